"""Certificates on lab: the control plane's check-and-renew step in the plan (where it runs,
what it waits for, what it feeds), how a new check period reaches the cluster (an update of that one
step, never a replacement of the control plane), and the stack output."""

from __future__ import annotations

import datetime
import json
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


# ---------------------------------------------------------------------------------------------
# The script on a simulated control plane (tests/hostsim.py), with real openssl and real
# certificates: what it reads, when it renews, and that a second run after a renewal changes nothing.


@pytest.fixture
def sim(tmp_path):
    """A simulated control plane whose openssl is the real one (it only reads certificates)."""
    from tests.hostsim import HostSim, isolation_unavailable

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    why = isolation_unavailable()
    if why is not None:
        pytest.skip(f"isolated host runs: {why}")
    return HostSim(tmp_path, real_tools=("openssl",))


def _cert(path, days: int, cn: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", "/dev/null", "-out", str(path), "-days", str(days), "-subj", f"/CN={cn.replace('/', '-')}"],
                   check=True, capture_output=True, timeout=60)


def _control_plane(sim, days: dict[str, int], default: int = 200) -> None:
    """kubeadm's files with the given lifetimes (days left, by file name; others `default`)."""
    import base64

    k8s = sim.path("/etc/kubernetes")
    _cert(k8s / "pki" / "ca.crt", 3650, "kubernetes")
    for name in scripts.KUBEADM_LEAF_CERTS:
        _cert(k8s / "pki" / name, days.get(name, default), name)
    for name in scripts.KUBEADM_KUBECONFIGS:
        pem = k8s / "pki" / f"{name}.pem"
        _cert(pem, days.get(name, default), name)
        data = base64.b64encode(pem.read_bytes()).decode()
        pem.unlink()
        (k8s / name).write_text(f"apiVersion: v1\nkind: Config\nusers:\n- name: x\n  user:\n"
                                f"    client-certificate-data: {data}\n    client-key-data: AAAA\n")
    (k8s / "manifests").mkdir(exist_ok=True)
    for pod in scripts.CONTROL_PLANE_STATIC_PODS:
        (k8s / "manifests" / f"{pod}.yaml").write_text(f"kind: Pod\nmetadata: {{name: {pod}}}\n")


def _days_left(stamp: str) -> float:
    at = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    return (at - datetime.datetime.now(datetime.UTC)).total_seconds() / 86400


def test_renews_within_the_window_and_a_second_run_changes_nothing(sim) -> None:
    # apiserver.crt expires in 10 days: inside the 30-day window
    _control_plane(sim, {"apiserver.crt": 10})
    script = scripts.as_root(scripts.certificates_check_renew("2026-W48", certificates.RENEW_WITHIN_DAYS))
    mark = sim.mark()
    first = sim.run(script)
    assert first.returncode == 0, first.stderr
    status = json.loads(first.stdout)
    assert status["renewed"] is True and status["certificate"] == "apiserver.crt"
    assert _days_left(status["caExpires"]) > 3600  # the CA: ten years, not counted
    calls = sim.calls_since(mark)
    assert ["kubeadm", "certs", "renew", "all"] in calls
    assert any(c[:1] == ["kubectl"] and "/readyz" in c for c in calls)  # waited for the API server
    manifests = sorted(p.name for p in sim.path("/etc/kubernetes/manifests").iterdir())
    assert manifests == sorted(f"{p}.yaml" for p in scripts.CONTROL_PLANE_STATIC_PODS)  # all put back

    # What `kubeadm certs renew all` leaves behind: every leaf and kubeconfig valid for a year.
    _control_plane(sim, {}, default=365)
    before = sim.snapshot()
    mark = sim.mark()
    second = sim.run(script)
    assert second.returncode == 0, second.stderr
    status = json.loads(second.stdout)
    assert status["renewed"] is False and 364 < _days_left(status["expires"]) <= 365
    assert not [c for c in sim.calls_since(mark) if c[:1] == ["kubeadm"]]
    assert sim.snapshot() == before  # nothing written, nothing moved


def test_a_kubeconfig_client_certificate_counts(sim) -> None:
    _control_plane(sim, {"controller-manager.conf": 45, "admin.conf": 60})
    out = sim.run(scripts.as_root(scripts.certificates_check_renew("2026-W48", 30)))
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    # 45 days: the first to expire, outside the window, so nothing is renewed
    assert status == {**status, "certificate": "controller-manager.conf", "renewed": False}
    assert 44 < _days_left(status["expires"]) <= 45


def test_no_certificates_is_an_error(sim) -> None:
    out = sim.run(scripts.as_root(scripts.certificates_check_renew("2026-W48", 30)))
    assert out.returncode == 1 and "is this the control plane?" in out.stderr
