"""Certificates on lab: the control plane's check-and-renew step in the plan (where it runs,
what it waits for, what it feeds), how a new check period reaches the cluster (an update of that one
step, never a replacement of the control plane), and the stack output."""

from __future__ import annotations

import datetime
import shutil
import subprocess

import pytest

from components.lab import certificates, scripts
from render import program

COMMAND = "command:remote:Command"


def _plan(monkeypatch: pytest.MonkeyPatch, today: datetime.date) -> program.Plan:
    import stacks.lab

    monkeypatch.setattr(stacks.lab.datetime, "date", type("FixedDate", (datetime.date,), {
        "today": classmethod(lambda cls: today)}))
    return program.run("lab")


def _commands(plan: program.Plan) -> dict[str, program.Registration]:
    return {r.name: r for r in plan.of_type(COMMAND)}


def test_check_period_is_the_iso_week() -> None:
    assert certificates.check_period(datetime.date(2026, 11, 23)) == "2026-W48"
    assert certificates.check_period(datetime.date(2027, 1, 1)) == "2026-W53"  # ISO year of that Friday
    assert certificates.check_period(datetime.date(2026, 11, 29)) == "2026-W48"
    assert certificates.check_period(datetime.date(2026, 11, 30)) == "2026-W49"


def test_check_runs_on_the_control_plane_between_init_and_the_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    cmds = _commands(_plan(monkeypatch, datetime.date(2026, 11, 23)))
    check, init, read = cmds["control-plane-certificates"], cmds["control-plane-init"], cmds["control-plane-kubeconfig"]
    assert check.inputs["connection"]["host"] == init.inputs["connection"]["host"]
    assert init.urn in check.dependencies
    assert check.urn in read.dependencies
    assert "# check period 2026-W48" in check.inputs["create"]
    assert "kubeadm certs renew all" in check.inputs["create"]
    assert check.inputs["create"].startswith("sudo -n /bin/bash -c")
    assert "delete" not in check.inputs  # certificates go with the cluster
    # the kubeconfig (and with it the provider and the `kubeconfig` output) follows a renewal
    assert len(read.inputs["triggers"]) == 2


def test_a_new_week_updates_only_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new period changes the check's script (a Pulumi update that runs it again: pulumi-command
    runs `create` again on an input change when no `update` is given) and nothing else: no trigger,
    so nothing of the control plane is replaced."""
    before = _commands(_plan(monkeypatch, datetime.date(2026, 11, 23)))
    after = _commands(_plan(monkeypatch, datetime.date(2026, 11, 30)))
    changed = sorted(n for n in before if before[n].inputs != after[n].inputs)
    assert changed == ["control-plane-certificates"]
    assert before["control-plane-certificates"].inputs["triggers"] == after["control-plane-certificates"].inputs["triggers"]


def test_stack_output_reports_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(monkeypatch, datetime.date(2026, 11, 23))
    assert set(plan.outputs["certificates"]) == {"expires", "certificate", "caExpires", "renewed"}


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (apt-get install shellcheck)")
def test_script_passes_shellcheck(tmp_path) -> None:
    path = tmp_path / "certificates.sh"
    path.write_text(scripts.certificates_check_renew("2026-W48", certificates.RENEW_WITHIN_DAYS))
    result = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_script_counts_every_kubeadm_leaf_and_kubeconfig_but_no_ca() -> None:
    text = scripts.certificates_check_renew("2026-W48", 30)
    for name in (*scripts.KUBEADM_LEAF_CERTS, *scripts.KUBEADM_KUBECONFIGS):
        assert name in text
    assert "ca.crt" not in " ".join(scripts.KUBEADM_LEAF_CERTS)
