"""The host kubeadm init ran on is reset when it leaves the config alive, as every joined host is by
its join step's delete (components/lab/control_plane.py init_host_reset): the step of the lab-ha
plan, its delete run as it stands in the host sandbox (tests/hostsim.py), and no session at create.
The preview of cp-1 removed: tests/render/test_ha_update.py."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from render import program
from render.program import Registration
from tests.hostsim import HostSim, isolation_unavailable

_WHY_NOT = isolation_unavailable()
STEP = "control-plane-init-host-reset"


@cache
def _step(stack: str) -> Registration:
    (step,) = [r for r in program.run(stack).resources if r.name == STEP]
    return step


def test_the_step_connects_to_the_init_host_only_to_reset_it() -> None:
    step = _step("lab-ha")
    assert step.inputs["connection"]["host"] == "192.0.2.10"  # cp-1, where kubeadm init ran
    assert not step.inputs.get("create") and not step.inputs.get("update")  # pulumi-command opens no session
    assert "kubeadm reset -f" in step.inputs["delete"]
    assert step.delete_before_replace


@pytest.mark.skipif(_WHY_NOT is not None, reason=f"isolated host runs: {_WHY_NOT}")
def test_its_delete_resets_the_host_and_removes_the_cni_config(tmp_path: Path) -> None:
    sim = HostSim(tmp_path)
    for real in ("/etc/cni/net.d/10-calico.conflist", "/etc/kubernetes/admin.conf"):
        sim.path(real).parent.mkdir(parents=True, exist_ok=True)
        sim.path(real).write_text("x\n")
    (sim.state / "pkgs").mkdir(exist_ok=True)
    (sim.state / "pkgs" / "kubeadm").write_text("1.34.2-1.1\n")
    mark = sim.mark()
    result = sim.run(_step("lab-ha").inputs["delete"])
    assert result.returncode == 0, result.stderr
    assert ["kubeadm", "reset", "-f"] in sim.calls_since(mark)
    assert not sim.path("/etc/cni/net.d").exists()  # kubeadm reset leaves the CNI config (its docs): the step removes it
    assert not sim.path("/etc/kubernetes/admin.conf").exists()
