"""Certificates on lab: the check-and-renew step of every control plane in the plan (where each
runs, what it waits for, what it feeds, one host after another), how a new check period reaches the
cluster (an update of those steps, never a replacement of the control plane), and the stack output;
then the script itself on a simulated control plane with real certificates.
The expiry metric and its alert: test_certificate_expiry.py."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess

import pytest

from components.lab import certificates, scripts
from render import program

COMMAND = "command:remote:Command"


def _plan(monkeypatch: pytest.MonkeyPatch, today: datetime.date, stack: str = "lab") -> program.Plan:
    import stacks.lab

    monkeypatch.setattr(stacks.lab.datetime, "date", type("FixedDate", (datetime.date,), {
        "today": classmethod(lambda cls: today)}))
    return program.run(stack)


def _script(host: str = "cp-1", address: str = "192.0.2.10",
            control_planes: tuple[tuple[str, str], ...] = (("cp-1", "192.0.2.10"),), within: int = 30) -> str:
    return scripts.certificates_check_renew("2026-W48", within, host, address, control_planes,
                                            certificates.EXPIRY_SCRIPT)


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
    assert changed == ["control-plane-certificates"]  # lab: one control plane
    assert before["control-plane-certificates"].inputs["triggers"] == after["control-plane-certificates"].inputs["triggers"]


def test_stack_output_reports_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(monkeypatch, datetime.date(2026, 11, 23))
    assert set(plan.outputs["certificates"]) == {"expires", "certificate", "caExpires", "renewed"}


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (apt-get install shellcheck)")
def test_script_passes_shellcheck(tmp_path) -> None:
    path = tmp_path / "certificates.sh"
    path.write_text(_script(control_planes=(("cp-1", "192.0.2.10"), ("cp-2", "192.0.2.20"))))
    result = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_script_counts_every_kubeadm_leaf_and_kubeconfig_but_no_ca() -> None:
    text = _script()
    for name in (*scripts.KUBEADM_LEAF_CERTS, *scripts.KUBEADM_KUBECONFIGS):
        assert name in text
    assert "ca.crt" not in " ".join(scripts.KUBEADM_LEAF_CERTS)


# ---------------------------------------------------------------------------------------------
# The script on a simulated control plane (tests/hostsim.py), with real openssl and real
# certificates: what it reads, when it renews, and that a second run after a renewal changes nothing.


@pytest.fixture
def sim(openssl_sim):
    return openssl_sim


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


# etcd's own health endpoint on its metrics port (kubeadm.ETCD_METRICS_URL), as etcd 3.6 answers it.
LOCAL_ETCD_HEALTH = "http://127.0.0.1:2381/health"
HEALTHY = '{"health":"true","reason":""}'
UNHEALTHY = '{"health":"false","reason":"RAFT NO LEADER"}'


def _days_left(stamp: str) -> float:
    at = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    return (at - datetime.datetime.now(datetime.UTC)).total_seconds() / 86400


def test_renews_within_the_window_and_a_second_run_changes_nothing(sim) -> None:
    # apiserver.crt expires in 10 days: inside the 30-day window
    _control_plane(sim, {"apiserver.crt": 10})
    script = scripts.as_root(_script(within=certificates.RENEW_WITHIN_DAYS))
    sim.serve(LOCAL_ETCD_HEALTH, HEALTHY)
    mark = sim.mark()
    first = sim.run(script)
    assert first.returncode == 0, first.stderr
    status = json.loads(first.stdout)
    assert status["renewed"] is True and status["certificate"] == "apiserver.crt"
    assert _days_left(status["caExpires"]) > 3600  # the CA: ten years, not counted
    calls = sim.calls_since(mark)
    assert ["kubeadm", "certs", "renew", "all"] in calls
    # waited for this host's own API server, at its address (the endpoint may be another host's)
    assert any(c[:1] == ["kubectl"] and "--raw=/readyz" in c and "--server=https://192.0.2.10:6443" in c
               for c in calls)
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
    out = sim.run(scripts.as_root(_script()))
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    # 45 days: the first to expire, outside the window, so nothing is renewed
    assert status == {**status, "certificate": "controller-manager.conf", "renewed": False}
    assert 44 < _days_left(status["expires"]) <= 45


def test_no_certificates_is_an_error(sim) -> None:
    out = sim.run(scripts.as_root(_script()))
    assert out.returncode == 1 and "is this the control plane?" in out.stderr


def test_kube_vip_restarts_with_the_static_pods(sim) -> None:
    """kube-vip reads admin.conf's client certificate once: renewed, it is restarted with the rest."""
    _control_plane(sim, {"admin.conf": 5})
    sim.path("/etc/kubernetes/manifests/kube-vip.yaml").write_text("kind: Pod\nmetadata: {name: kube-vip}\n")
    sim.serve(LOCAL_ETCD_HEALTH, HEALTHY)
    mark = sim.mark()
    out = sim.run(scripts.as_root(_script()))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["renewed"] is True
    moved = [c for c in sim.calls_since(mark) if c[:1] == ["sleep"]]
    assert moved, "waited for the kubelet to stop the pods"
    manifests = sorted(p.name for p in sim.path("/etc/kubernetes/manifests").iterdir())
    assert manifests == sorted([*(f"{p}.yaml" for p in scripts.CONTROL_PLANE_STATIC_PODS), "kube-vip.yaml"])
    assert "kube-vip" in _script().split("for pod in ", 1)[1].splitlines()[0]


def test_an_etcd_member_that_does_not_come_back_fails_the_step(sim) -> None:
    """The next control plane's step depends on this one: a host whose etcd member stays unhealthy
    after the restart fails here, so no second member is restarted."""
    _control_plane(sim, {"etcd/peer.crt": 3})
    sim.serve(LOCAL_ETCD_HEALTH, UNHEALTHY)
    out = sim.run(scripts.as_root(_script()))
    assert out.returncode == 1
    assert "cp-1's API server or etcd member did not come back healthy" in out.stderr
    manifests = sorted(p.name for p in sim.path("/etc/kubernetes/manifests").iterdir())
    assert manifests == sorted(f"{p}.yaml" for p in scripts.CONTROL_PLANE_STATIC_PODS)  # put back all the same


def test_refuses_while_another_member_is_unhealthy(sim) -> None:
    """cp-2 of three: cp-3's member is down, so restarting cp-2's would leave one of three."""
    members = (("cp-1", "192.0.2.10"), ("cp-2", "192.0.2.20"), ("cp-3", "192.0.2.30"))
    _control_plane(sim, {"apiserver.crt": 10})
    for name, _ in members:
        sim.k8s_node(name, kubeletVersion="v1.34.2", labels={"node-role.kubernetes.io/control-plane": ""})
    sim.serve("http://192.0.2.10:2381/health", HEALTHY)
    sim.serve("http://192.0.2.30:2381/health", UNHEALTHY)
    sim.serve(LOCAL_ETCD_HEALTH, HEALTHY)
    script = scripts.as_root(_script("cp-2", "192.0.2.20", members))
    before = sim.snapshot()
    mark = sim.mark()
    out = sim.run(script)
    assert out.returncode == 1
    assert "the etcd member on cp-3 (192.0.2.30:2381/health) is not healthy" in out.stderr
    assert not [c for c in sim.calls_since(mark) if c[:1] == ["kubeadm"]]
    assert sim.snapshot() == before

    # cp-3 back: cp-2 renews (its own member is not asked over its address, only on 127.0.0.1)
    sim.serve("http://192.0.2.30:2381/health", HEALTHY)
    mark = sim.mark()
    out = sim.run(script)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["renewed"] is True
    asked = [c[-1] for c in sim.calls_since(mark) if c[:1] == ["curl"]]
    assert "http://192.0.2.20:2381/health" not in asked and LOCAL_ETCD_HEALTH in asked


def test_every_control_plane_renews_one_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """lab-ha: a check on each of the three control planes, over its own connection, each joined
    host's after its join and after the check before it (one chain: never two restarts at once)."""
    plan = _plan(monkeypatch, datetime.date(2026, 11, 23), "lab-ha")
    cmds = _commands(plan)
    chain = [cmds["control-plane-certificates"], cmds["cp-2-certificates-check"], cmds["cp-3-certificates-check"]]
    assert [c.inputs["connection"]["host"] for c in chain] == ["192.0.2.10", "192.0.2.20", "192.0.2.30"]
    for before, check in zip(chain, chain[1:], strict=False):
        assert before.urn in check.dependencies
    for host, check in (("cp-2", chain[1]), ("cp-3", chain[2])):
        join_ready = [c for c in cmds.values() if c.urn in check.dependencies and c.name != chain[0].name
                      and c.inputs["connection"]["host"] == check.inputs["connection"]["host"]]
        assert join_ready, f"{host}'s check waits for its join"
        assert f"self={host}\n" in check.inputs["create"] and "kubeadm certs renew all" in check.inputs["create"]
        assert "cp-1=192.0.2.10 cp-2=192.0.2.20 cp-3=192.0.2.30" in check.inputs["create"]
    # a new week: the three checks run again, nothing else changes
    later = _commands(_plan(monkeypatch, datetime.date(2026, 11, 30), "lab-ha"))
    changed = sorted(n for n in cmds if cmds[n].inputs != later[n].inputs)
    assert changed == ["control-plane-certificates", "cp-2-certificates-check", "cp-3-certificates-check"]
