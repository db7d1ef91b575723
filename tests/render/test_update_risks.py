"""`--against` tells the truth both ways (issue 22):

  - what `pulumi up` refuses (a skipped minor, a downgrade, a CIDR change without allowRebuild) is
    shown `REFUSED`, naming the key, and exits 2: the one rule `up` runs (LabStack.change_problems);
  - a change of CNI, GPU stack or shared storage backend is loud (`!!`, exit 4) with the reason;
  - an update script that drains only when a version differs is loud only when the config changes
    one; a bastion or host key change previews quiet (render/drain_guards.py).
The older configs are built as in test_update.py: the committed Pulumi.lab.yaml with overrides.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import ConfigError
from config.lab import LabStack
from render import __main__ as render_main
from render import program, update, update_risks
from tests.conftest import PROJECT_DIR

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHt6mQ1wV0pR8sK3zY5bN2cF7dL4eJ9gA1uX6oT3iM8q"
BASTION = {"host": "198.51.100.5", "hostKey": HOST_KEY}
INIT, DRAIN = "control-plane-init", "membership-drain"


def _config(stack: str = "lab", **overrides: Any) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config(stack)
    values.update({f"gpu-cluster:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in overrides.items()})
    return values, secret_keys


def _side(stack: str = "lab", **overrides: Any) -> update_risks.Side:
    return update_risks.plan_side(program.run(stack, config=_config(stack, **overrides)))


def _older_stack_file(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())
    data["config"].update({f"gpu-cluster:{k}": v for k, v in changes.items()})
    path = tmp_path / "old-Pulumi.lab.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _against(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: Path) -> tuple[int, str, str]:
    rc = render_main.main(["lab", "--out", str(tmp_path / "out"), "--no-check", "--against", str(old)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _hosts() -> list[dict[str, Any]]:
    return list(yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())["config"]["gpu-cluster:hosts"])


# ------------------------------------------------------------------------------------------------
# what `pulumi up` refuses: REFUSED, exit 2, the key named


@pytest.mark.parametrize(("older", "key", "words"), [
    ({"kubernetesVersion": "1.32.4"}, "gpu-cluster:kubernetesVersion", "1.32.4 -> 1.34.2 skips minor 1.33"),
    ({"kubernetesVersion": "1.34.3"}, "gpu-cluster:kubernetesVersion", "kubeadm cannot downgrade"),
    ({"podCidr": "10.245.0.0/16"}, "gpu-cluster:podCidr", "needs a new cluster"),
    ({"serviceCidr": "10.112.0.0/12"}, "gpu-cluster:serviceCidr", "needs a new cluster"),
], ids=["skipped-minor", "downgrade", "pod-cidr", "service-cidr"])
def test_what_up_refuses_is_refused_with_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 older: dict[str, Any], key: str, words: str) -> None:
    rc, out, err = _against(tmp_path, capsys, _older_stack_file(tmp_path, **older))
    assert rc == 2, err
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1 and refused[0].startswith(f"REFUSED {key}: ") and words in refused[0], out
    assert "pulumi up would refuse this update" in err and key in err
    assert "REFUSED" in (tmp_path / "out" / "summary.md").read_text()


def test_refused_from_an_older_plan_json_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The older plan.json carries the `deployed` output `up` compares with."""
    older = _older_stack_file(tmp_path, kubernetesVersion="1.32.4")
    render_main.write(program.run("lab", config=program.stack_config("lab", stack_file=older)), tmp_path / "old")
    rc, out, _ = _against(tmp_path, capsys, tmp_path / "old" / "plan.json")
    assert rc == 2 and "REFUSED gpu-cluster:kubernetesVersion: 1.32.4 -> 1.34.2 skips minor 1.33" in out


def test_refusals_are_the_rule_up_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule, not a copy: whatever LabStack.change_problems says is what the preview refuses,
    and allowRebuild lets a CIDR change through as it does for `up`."""
    older = _side(podCidr="10.245.0.0/16")
    new = program.run("lab", config=_config(allowRebuild=True))
    assert update_risks.refusals(older, new.config) == []
    assert update_risks.refusals(older, program.run("lab").config) == [
        ConfigError.refusal("podCidr", p[1]) for p in program.run("lab").config.change_problems(
            update_risks.DeployedLab.model_validate(older.outputs["deployed"]))]
    seen: list[Any] = []

    def rule(self: LabStack, deployed: Any) -> list[tuple[str, str]]:
        seen.append(deployed)
        return [("hosts[0].name", "the test's rule")]

    monkeypatch.setattr(LabStack, "change_problems", rule)
    assert update_risks.refusals(older, new.config) == [
        "gpu-cluster:hosts[0].name: the test's rule (docs/getting-started/lab.md)"]
    assert seen and str(seen[0].pod_cidr) == "10.245.0.0/16"


def test_an_allowed_upgrade_is_not_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _against(tmp_path, capsys, _older_stack_file(tmp_path, kubernetesVersion="1.33.5"))
    assert rc == 4 and "REFUSED" not in out


# ------------------------------------------------------------------------------------------------
# changes under every running pod: loud, exit 4


def test_a_cni_change_is_loud(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _against(tmp_path, capsys, _older_stack_file(tmp_path, cni="flannel"))
    assert rc == 4, err
    loud = [line for line in out.splitlines() if line.startswith("!!")]
    assert loud == [line for line in loud if line.startswith("!! CNI flannel -> calico (gpu-cluster:cni): the pod "
                                                             "network under every running pod is replaced")]
    assert len(loud) == 1 and "exit 4" in err


def test_a_gpu_stack_change_is_loud() -> None:
    older, newer = _side(), _side(gpu={"stack": "operator"})
    (line,) = update_risks.whole_cluster_changes(older, newer)
    assert line.startswith("GPU stack device-plugin -> operator (gpu-cluster:gpu.stack): ")
    plan = update.compare(older.resources, newer.resources, "lab", "old")
    plan.risks = update_risks.whole_cluster_changes(older, newer)
    assert plan.destructive and f"!! {line}" in plan.text()


@pytest.mark.parametrize(("stack", "older", "newer", "words"), [
    ("lab", {}, {"storage": {"nfs": {"server": "198.51.100.7", "path": "/export/shared"}, "size": "100Gi"}},
     "nfs://192.0.2.10/srv/gpu-cluster/shared -> nfs://198.51.100.7/export/shared"),
    ("dev", {}, {"storage": {"useDefaultClass": True, "size": "100Gi"}},
     "hostPath:/data/gpu-cluster-shared -> default StorageClass"),
], ids=["lab-nfs-server", "dev-hostpath-to-class"])
def test_a_storage_backend_change_is_loud(stack: str, older: dict[str, Any], newer: dict[str, Any], words: str) -> None:
    (line,) = update_risks.whole_cluster_changes(_side(stack, **older), _side(stack, **newer))
    assert line.startswith(f"shared storage {words} (gpu-cluster:storage): ")


def test_the_same_stack_has_no_whole_cluster_change() -> None:
    assert update_risks.whole_cluster_changes(_side(), _side()) == []
    assert update_risks.cni(_side()) == "calico" and update_risks.cni(_side(cni="flannel")) == "flannel"


# ------------------------------------------------------------------------------------------------
# drains: loud only when a version changes


def _steps(older: dict[str, Any], newer: dict[str, Any]) -> dict[str, update.Step]:
    plan = update.compare(_side(**older).resources, _side(**newer).resources, "lab", "old")
    return {s.resource.name: s for s in plan.steps}


@pytest.mark.parametrize("newer", [
    {"bastion": BASTION},
    {"hosts": [{**h, "hostKey": HOST_KEY} if h["name"] == "cp-1" else h for h in _hosts()]},
    {"hosts": [{**h, "sshPort": 2222} for h in _hosts()]},
], ids=["bastion-added", "host-key", "ssh-port"])
def test_an_ssh_route_or_key_change_is_quiet(newer: dict[str, Any]) -> None:
    steps = _steps({}, newer)
    for name in (INIT, DRAIN):
        assert steps[name].action is update.Action.UPDATE, name
    assert [line for s in steps.values() for line in s.loud] == []
    assert any(r.startswith("drains if the host does not run kubelet/kubectl v1.34.2") for r in steps[INIT].reasons)
    assert "drains if a host left the list or changed address; none did" in steps[DRAIN].reasons


def test_a_bastion_change_exits_0_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _against(tmp_path, capsys, _older_stack_file(tmp_path, bastion=BASTION))
    assert rc == 0, err
    assert "!!" not in out and "drains if" in out


def test_a_version_change_is_loud_and_says_which() -> None:
    steps = _steps({}, {"kubernetesVersion": "1.34.3"})
    assert steps[INIT].loud[0].endswith("drains a node (kubectl drain): the node is drained for kubernetesVersion "
                                        "1.34.2 -> 1.34.3")
    driver = _steps({}, {"nvidiaDriver": {"branch": "580"}})
    assert driver["gpu-1-join"].loud[0].endswith("the node is drained for nvidiaDriver.branch 570 -> 580")
    assert not driver[INIT].loud  # the control plane has no GPU: its init does not change


def test_the_membership_drain_is_loud_only_for_a_host_that_leaves() -> None:
    gpu3 = {**_hosts()[2], "name": "gpu-3", "address": "192.0.2.13"}
    added = _steps({}, {"hosts": [*_hosts(), gpu3]})
    assert added[DRAIN].action is update.Action.UPDATE and not added[DRAIN].loud
    removed = _steps({"hosts": [*_hosts(), gpu3]}, {})
    assert removed[DRAIN].loud == [f"UPDATE {DRAIN}: runs its create script again on 192.0.2.10, a script that "
                                   "drains a node (kubectl drain), deletes a node (kubectl delete node): drains and "
                                   "deletes gpu-3 (left the host list or changed address)"]
    moved = _steps({}, {"hosts": [{**h, "address": "192.0.2.21"} if h["name"] == "gpu-2" else h for h in _hosts()]})
    assert "drains and deletes gpu-2" in moved[DRAIN].loud[0]


def test_a_refused_update_says_so_in_the_answer_of_summary_md(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """summary.md is read first: a cluster that would come up must not read as a go-ahead when `up`
    refuses the update (exit 2)."""
    old = _older_stack_file(tmp_path, kubernetesVersion="1.32.4")
    rc = render_main.main(["lab", "--out", str(tmp_path / "out"), "--against", str(old)])
    capsys.readouterr()
    assert rc == 2
    summary = (tmp_path / "out" / "summary.md").read_text()
    answer = summary.split("## Update from", 1)[0]
    assert "**yes**" in answer and "**The update is refused**" in answer, answer
