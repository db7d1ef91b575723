"""render/drain_guards.py's knowledge, held to the scripts it describes.

The preview says a re-run of the lab's upgrade scripts drains only when a version differs from what
the older config installed, and the membership drain only for hosts that left. Here the real
scripts (from the lab plan, exactly as the hosts receive them) run in the host sandbox
(tests/hostsim.py, a fake API server for kubectl) on a host that runs what they name: nothing is
drained; on a host one version behind, or with a member that left, the drain happens. The text
tests check that every upgrade script that can drain is recognised, and none that cannot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components import versions
from components.lab import scripts
from render import drain_guards, program
from tests.components.lab.test_host_scripts import (  # the fixture is used by name
    needs_isolation,
    real_machine_untouched,  # noqa: F401
)
from tests.components.lab.test_upgrade_scripts import (
    JOIN_STDIN,
    KUBEADM_CONFIG,
    control_plane,
    etcd_snapshot,  # noqa: F401 - the fixture, used by name
    etcd_tools,
    joined,
    kubectl,
)
from tests.hostsim import HostSim

REV = versions.KUBE_PACKAGE_REVISION
DRIVER_LABEL = {"nvidia.com/cuda.driver-version.full": "570.172.08"}  # GFD's label for a 570 driver


def _plan_script(name: str, which: str) -> str:
    (r,) = [r for r in program.run("lab").resources if r.name == name]
    script = r.inputs[which]
    assert isinstance(script, str)
    return script


# ------------------------------------------------------------------------------------------------
# text: which scripts are recognised, and the values read from them


DRAINING = {
    "kubeadm_upgrade_apply": lambda v, d: scripts.kubeadm_upgrade_apply("cp-1", v, REV, slot_tries=3),
    "node_upgrade_drain": lambda v, d: scripts.node_upgrade_drain("gpu-1", v, control_plane=False, driver=(d, None),
                                                                  slots=1, slot_tries=3),
    "node_self_upgrade": lambda v, d: scripts.node_self_upgrade("gpu-1", v, REV, control_plane=False,
                                                                driver=(d, None), slots=1, slot_tries=3),
    "nvidia_driver_self_upgrade": lambda v, d: scripts.nvidia_driver_self_upgrade("cp-1", d, None, 3),
}
NOT_DRAINING = {
    "kube_packages_stage": scripts.kube_packages_stage("1.34.2", "1.34", REV),
    "node_upgrade": scripts.node_upgrade("gpu-1", "1.34.2", REV, ("570", None)),
    "node_upgrade_done": scripts.node_upgrade_done("gpu-1", "1.34.2", ("570", None), 1),
    "node_self_upgrade_done": scripts.node_self_upgrade_done("gpu-1", "1.34.2", ("570", None), 1),
    "driver_ready_uncordon": scripts.driver_ready_uncordon("cp-1", 1, "570", None),
    "kubeadm_init": scripts.kubeadm_init(),
}


@pytest.mark.parametrize("name", sorted(DRAINING))
def test_every_draining_upgrade_script_is_recognised_with_its_versions(name: str) -> None:
    make = DRAINING[name]
    script = make("1.34.2", "570")
    assert drain_guards.NODE_DRAIN.search(script), f"{name} no longer drains: update the table"
    values = drain_guards.version_values(script)
    assert values is not None
    if "want" in values:
        assert values["want"] == "1.34.2"
    assert values.get("pkg", "nvidia-driver-570-server") == "nvidia-driver-570-server"
    # The same versions with other inputs (node name, slots): nothing to upgrade, so quiet.
    verdict = drain_guards.rerun(script, script)
    assert verdict is not None and not verdict.drains and verdict.drains_if
    # Another version or driver branch: loud, naming the config key.
    for newer, key in (("1.34.3", "kubernetesVersion"), ("580", "nvidiaDriver.branch")):
        changed = make(newer, "570") if key == "kubernetesVersion" else make("1.34.2", newer)
        if changed == script:
            continue  # this script does not name that version
        verdict = drain_guards.rerun(script, changed)
        assert verdict is not None and key in verdict.drains, (name, key)


@pytest.mark.parametrize("name", sorted(NOT_DRAINING))
def test_scripts_without_a_drain_are_not_recognised(name: str) -> None:
    assert drain_guards.version_values(NOT_DRAINING[name]) is None


def test_every_drain_in_the_plan_is_recognised() -> None:
    """Every lab command whose update or create script calls drain_node is one the table knows."""
    for r in program.run("lab").resources:
        for which in ("create", "update"):
            script = r.inputs.get(which)
            if isinstance(script, str) and drain_guards.NODE_DRAIN.search(script):
                assert drain_guards.rerun(script, script) is not None, f"{r.name} {which}: not recognised"


# ------------------------------------------------------------------------------------------------
# the sandbox: the plan's own scripts on a host at, or behind, the versions they name


@needs_isolation
@pytest.mark.usefixtures("real_machine_untouched")
@pytest.mark.parametrize(("host_version", "drained"), [("1.34.2", False), ("1.34.1", True)], ids=["same", "behind"])
def test_the_init_update_drains_only_a_control_plane_behind(
    tmp_path: Path, host_version: str, drained: bool, etcd_snapshot: Path,  # noqa: F811
) -> None:
    script = _plan_script("control-plane-init", "update")
    assert drain_guards.version_values(script) == {"want": "1.34.2", "revision": REV}
    sim = HostSim(tmp_path)
    control_plane(sim, host_version)
    etcd_tools(sim, etcd_snapshot)  # behind, it snapshots etcd first (verified by the real etcdutl)
    result = sim.run(script, stdin=KUBEADM_CONFIG)
    assert result.returncode == 0, result.stderr
    assert bool(kubectl(sim.calls(), "drain", "cp-1")) is drained


@needs_isolation
@pytest.mark.usefixtures("real_machine_untouched")
@pytest.mark.parametrize(("kubelet", "driver_label", "drained"), [
    ("v1.34.2", DRIVER_LABEL, False),
    ("v1.34.1", DRIVER_LABEL, True),
    ("v1.34.2", {"nvidia.com/cuda.driver-version.full": "580.65.06"}, True),
], ids=["same", "kubelet-behind", "other-driver"])
def test_the_join_update_drains_only_a_node_behind(tmp_path: Path, kubelet: str, driver_label: dict[str, str],
                                                   drained: bool) -> None:
    script = _plan_script("gpu-1-join", "update")
    values = drain_guards.version_values(script)
    assert values is not None and values["want"] == "1.34.2" and values["pkg"] == "nvidia-driver-570-server"
    sim = HostSim(tmp_path)
    joined(sim)
    sim.k8s_node("gpu-1", kubeletVersion=kubelet, labels=driver_label)
    sim.k8s_node("cp-1", kubeletVersion="v1.34.2", labels={"node-role.kubernetes.io/control-plane": ""})
    result = sim.run(script, stdin=JOIN_STDIN)
    assert bool(kubectl(sim.calls(), "drain", "gpu-1")) is drained, result.stderr
    if not drained:
        assert result.returncode == 0 and "gpu-1: nothing to upgrade" in result.stderr, result.stderr


@needs_isolation
@pytest.mark.usefixtures("real_machine_untouched")
def test_the_membership_drain_drains_only_a_member_that_left(tmp_path: Path) -> None:
    script = _plan_script("membership-drain", "create")
    listed = drain_guards.members(script)
    # the entry point is a member too (a later entry point drains it once it leaves: no special first server)
    assert listed == ["cp-1 192.0.2.10", "gpu-1 192.0.2.11", "gpu-2 192.0.2.12"]
    sim = HostSim(tmp_path)
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        sim.k8s_node(name, kubeletVersion="v1.34.2")
    members = sim.path("/var/lib/gpu-cluster/cluster-members")
    members.parent.mkdir(parents=True, exist_ok=True)
    members.write_text("".join(f"{m}\n" for m in listed))  # what the older run recorded: the same list
    assert sim.run(script).returncode == 0
    assert not kubectl(sim.calls(), "drain")
    members.write_text("".join(f"{m}\n" for m in [*listed, "gpu-3 192.0.2.13"]))  # gpu-3 has left since
    start = sim.mark()
    assert sim.run(script).returncode == 0
    assert [c[0:2] for c in kubectl(sim.calls_since(start), "drain")] == [["drain", "gpu-3"]]
