"""The kubelet-config rollout's host scripts (components/lab/kubelet_config.py), run in the host
sandbox (tests/hostsim.py): the ConfigMap merge on the entry point against the fake API server in a
file (tests/fake_kubectl.py: get -o json, a merge patch refused on a stale resourceVersion), and the
per-node step with the kubeadm, sysctl and systemctl stand-ins. The merge against the real API
server: tests/e2e/test_kubelet_config_merge.py. test_host_scripts.py shellchecks both as rendered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.lab import kubeadm, kubelet_config
from stacks.lab import kubeadm_settings
from tests.conftest import lab_config
from tests.hostsim import TIMEOUT, HostSim, isolation_unavailable

_WHY_NOT = isolation_unavailable()
pytestmark = pytest.mark.skipif(_WHY_NOT is not None, reason=f"isolated host runs: {_WHY_NOT}")

CLUSTER = kubeadm_settings(lab_config())
# What kubeadm init wrote for a cluster of an earlier version: no serverTLSBootstrap nor
# protectKernelDefaults, and a field of the user's own.
OLD_DOCUMENT = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
maxPods: 250
readOnlyPort: 0
"""


def sandbox(tmp_path: Path) -> HostSim:
    sim = HostSim(tmp_path)
    # python3 with PyYAML, as on Ubuntu (netplan depends on python3-yaml): the test's own interpreter.
    wrapper = sim.sim / "bin" / "python3"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return sim


def kubelet_config_map(sim: HostSim) -> dict:
    return yaml.safe_load(sim.k8s()["configmaps"]["kubelet-config"]["kubelet"])


def test_the_merge_sets_the_programs_fields_keeps_the_users_and_a_second_run_writes_nothing(tmp_path: Path) -> None:
    sim = sandbox(tmp_path)
    sim.k8s_configmap("kubelet-config", kubelet=OLD_DOCUMENT)
    script = kubelet_config.merge_script(CLUSTER)
    first = sim.run(script)
    assert first.returncode == 0, first.stderr
    doc = kubelet_config_map(sim)
    assert doc["serverTLSBootstrap"] is True and doc["protectKernelDefaults"] is True
    assert doc["maxPods"] == 250  # the user's field
    assert doc["authentication"]["webhook"]["cacheTTL"] == "0s"  # a nested field the program does not set
    assert doc == {**yaml.safe_load(OLD_DOCUMENT), **{k: v for k, v in kubelet_config.fields(CLUSTER).items()
                                                     if k != "authentication"},
                   "authentication": {**kubelet_config.fields(CLUSTER)["authentication"],
                                      "webhook": {"cacheTTL": "0s", "enabled": True}}}
    mark = sim.mark()
    second = sim.run(script)
    assert second.returncode == 0, second.stderr
    assert "unchanged" in second.stdout
    assert not [c for c in sim.calls_since(mark) if c[:1] == ["kubectl"] and "patch" in c]


def test_the_merge_reads_again_when_the_config_map_changed_in_between(tmp_path: Path) -> None:
    """The patch carries the resourceVersion read: a write made in between is refused, not lost."""
    sim = sandbox(tmp_path)
    sim.k8s_configmap("kubelet-config", kubelet=OLD_DOCUMENT)
    state = sim.k8s()
    state["configmapVersions"] = {"kubelet-config": 7}
    sim._save_k8s(state)  # noqa: SLF001 - the fake API server's state
    program = kubelet_config.MERGE_SOURCE
    stale = {"metadata": {"name": "kubelet-config", "resourceVersion": "6"}, "data": {"kubelet": OLD_DOCUMENT}}
    patch = subprocess.run([sys.executable, str(program), kubelet_config.fields_json(CLUSTER)], input=json.dumps(stale),
                           capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
    refused = sim.run(f"kubectl -n kube-system patch configmap kubelet-config --type merge -p '{patch.strip()}'")
    assert refused.returncode != 0 and "Conflict" in refused.stderr
    assert kubelet_config_map(sim) == yaml.safe_load(OLD_DOCUMENT)
    assert sim.run(kubelet_config.merge_script(CLUSTER)).returncode == 0
    assert kubelet_config_map(sim)["serverTLSBootstrap"] is True


def test_the_merge_refuses_a_config_map_that_is_no_kubelet_configuration(tmp_path: Path) -> None:
    sim = sandbox(tmp_path)
    sim.k8s_configmap("kubelet-config", kubelet="apiVersion: v1\nkind: Pod\n")
    result = sim.run(kubelet_config.merge_script(CLUSTER))
    assert result.returncode != 0 and "is not a KubeletConfiguration" in result.stderr


KUBELET_CONF = "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://192.0.2.10:6443\n"
UPGRADER = "upgrader-token: sim-token\n"  # the node upgrader's token, as the step's stdin carries it
SLOT_TRIES = 3


def node_run(sim: HostSim):
    return sim.run(kubelet_config.node_script("gpu-1", SLOT_TRIES), stdin=UPGRADER)


def _node(tmp_path: Path, tunables: dict[str, str] | None = None) -> HostSim:
    sim = sandbox(tmp_path)
    (sim.state / "sysctl").mkdir()
    for name, value in (tunables or {n: str(v) for n, v in kubeadm.KUBELET_KERNEL_TUNABLES}).items():
        (sim.state / "sysctl" / name).write_text(f"{value}\n")
    for real, text in (("/etc/kubernetes/kubelet.conf", KUBELET_CONF), ("/etc/kubernetes/pki/ca.crt", "CA\n"),
                       ("/var/lib/kubelet/config.yaml", OLD_DOCUMENT)):
        sim.path(real).parent.mkdir(parents=True, exist_ok=True)
        sim.path(real).write_text(text)
    return sim


def _restarts(sim: HostSim, mark: int) -> list[list[str]]:
    return [c for c in sim.calls_since(mark) if c[:3] == ["systemctl", "restart", "kubelet"]]


def test_a_node_whose_file_changes_restarts_its_kubelet_and_waits_for_ready(tmp_path: Path) -> None:
    sim = _node(tmp_path)
    new = OLD_DOCUMENT + "protectKernelDefaults: true\nserverTLSBootstrap: true\n"
    (sim.state / "kubelet-config").write_text(new)
    mark = sim.mark()
    result = node_run(sim)
    assert result.returncode == 0, result.stderr
    assert sim.path("/var/lib/kubelet/config.yaml").read_text() == new
    calls = sim.calls_since(mark)
    phase = calls.index(next(c for c in calls if c[:1] == ["kubeadm"]))
    assert calls[phase] == ["kubeadm", "upgrade", "node", "phase", "kubelet-config"]
    assert len(_restarts(sim, mark)) == 1
    assert any(c[:2] == ["kubectl", "--kubeconfig"] and "wait" in c and "node/gpu-1" in c for c in calls)
    # the restart happened while this node held the one slot, freed once its Node was Ready
    took = next(i for i, c in enumerate(calls) if "create" in c and "gpu-cluster-upgrade-slot-0" in c)
    freed = next(i for i, c in enumerate(calls) if "delete" in c and "gpu-cluster-upgrade-slot-0" in c)
    restart = calls.index(["systemctl", "restart", "kubelet"])
    assert took < restart < freed
    assert sim.k8s()["configmaps"] == {}
    # the copy of the old file and the upgrader's kubeconfig (it holds the token) are gone
    assert list((tmp_path / "root" / "tmp").iterdir()) == []
    # again: the file is what the cluster says, so nothing restarts
    mark = sim.mark()
    again = node_run(sim)
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert _restarts(sim, mark) == []


def test_a_kernel_setting_that_differs_stops_the_step_before_the_kubelet_is_touched(tmp_path: Path) -> None:
    tunables = {n: str(v) for n, v in kubeadm.KUBELET_KERNEL_TUNABLES}
    tunables["vm.overcommit_memory"] = "0"
    sim = _node(tmp_path, tunables)
    (sim.state / "kubelet-config").write_text(OLD_DOCUMENT + "protectKernelDefaults: true\n")
    mark = sim.mark()
    result = node_run(sim)
    assert result.returncode != 0
    assert "vm.overcommit_memory is '0', not 1" in result.stderr
    assert not [c for c in sim.calls_since(mark) if c[:1] in (["kubeadm"], ["systemctl"])]
    assert sim.path("/var/lib/kubelet/config.yaml").read_text() == OLD_DOCUMENT


def test_a_kubelet_that_does_not_become_ready_gets_its_old_file_back(tmp_path: Path) -> None:
    sim = _node(tmp_path)
    sim.k8s_node("gpu-1", ready=False)
    (sim.state / "kubelet-config").write_text(OLD_DOCUMENT + "protectKernelDefaults: true\n")
    mark = sim.mark()
    result = node_run(sim)
    assert result.returncode != 0 and "its old file is back" in result.stderr
    assert sim.path("/var/lib/kubelet/config.yaml").read_text() == OLD_DOCUMENT
    assert len(_restarts(sim, mark)) == 2  # the new file, then the old one
    assert sim.k8s()["configmaps"] == {}  # the slot is free again


def test_a_node_waits_for_the_slot_another_node_holds_and_gives_up_bounded(tmp_path: Path) -> None:
    """One kubelet restart at a time: while gpu-2 holds the slot (restarting, or upgrading), gpu-1
    does not restart its kubelet; after SLOT_TRIES it stops and says who holds it, its old file in
    place, so that the next run, the slot free, restarts it with the new one."""
    sim = _node(tmp_path)
    sim.k8s_configmap("gpu-cluster-upgrade-slot-0", node="gpu-2")
    sim.k8s_node("gpu-2", kubeletVersion="v1.34.2")
    (sim.state / "kubelet-config").write_text(OLD_DOCUMENT + "protectKernelDefaults: true\n")
    mark = sim.mark()
    result = node_run(sim)
    assert result.returncode != 0 and "no upgrade slot came free after 3 tries" in result.stderr
    assert _restarts(sim, mark) == []
    # the old file stays while the kubelet runs it, so the next run still sees the change
    assert sim.path("/var/lib/kubelet/config.yaml").read_text() == OLD_DOCUMENT
    state = sim.k8s()
    del state["configmaps"]["gpu-cluster-upgrade-slot-0"]
    sim._save_k8s(state)  # noqa: SLF001 - gpu-2 is done: its slot is free
    mark = sim.mark()
    again = node_run(sim)
    assert again.returncode == 0, again.stderr
    assert len(_restarts(sim, mark)) == 1
    assert sim.path("/var/lib/kubelet/config.yaml").read_text() == OLD_DOCUMENT + "protectKernelDefaults: true\n"
