"""The certificate expiry metric (components/lab/certificates.py) and its alerts
(components/monitoring/certificates.py): the real job on a simulated control plane with real
openssl certificates of known lifetimes (tests/hostsim.py), what it writes checked by promtool's
own exposition-format lint, then the alert rules fed those very lines in `promtool test rules`;
and the wiring in the plans (every control plane of lab-ha gets the job; lab gets the rules, dev not)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from components.lab import certificates, scripts
from components.lab.etcd_backup import NODE_EXPORTER_TEXTFILE_DIR, TEXTFILE_DIR
from components.monitoring import certificates as alerts
from config.cron import check_cron
from render import program

PROMTOOL = shutil.which("promtool")
METRICS = f"{TEXTFILE_DIR}/gpu_cluster_certificates.prom"
SAMPLE = re.compile(r'^(\w+)\{host="([^"]+)"(?:,certificate="([^"]+)")?\} (\d+)$')
# Lifetimes in days: a CA, leaf certificates of the API server and etcd, a kubeconfig's client certificate.
LIFETIMES = {"ca.crt": 3650, "apiserver.crt": 20, "etcd/peer.crt": 5, "etcd/ca.crt": 3650,
             "front-proxy-client.crt": 200, "admin.conf": 100, "scheduler.conf": 300}


@pytest.fixture
def sim(openssl_sim):
    return openssl_sim


def _cert(path: Path, days: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", "/dev/null", "-out", str(path), "-days", str(days), "-subj", "/CN=test"],
                   check=True, capture_output=True, timeout=60)


def _control_plane(sim) -> float:
    """LIFETIMES under the simulated /etc/kubernetes, plus kubelet.conf naming its certificate by
    file (as kubeadm writes it: no client certificate of its own). Returns when they were made."""
    k8s = sim.path("/etc/kubernetes")
    made = time.time()
    for name, days in LIFETIMES.items():
        if name.endswith(".conf"):
            pem = k8s / "pki" / "tmp.pem"
            _cert(pem, days)
            data = base64.b64encode(pem.read_bytes()).decode()
            pem.unlink()
            (k8s / name).write_text(f"apiVersion: v1\nkind: Config\nusers:\n- name: x\n  user:\n"
                                    f"    client-certificate-data: {data}\n    client-key-data: AAAA\n")
        else:
            _cert(k8s / "pki" / name, days)
    (k8s / "kubelet.conf").write_text("users:\n- user:\n    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n")
    return made


def _run(sim) -> tuple[dict[str, int], str]:
    out = sim.run(scripts.as_root(certificates.expiry_script("cp-2")))
    assert out.returncode == 0, out.stderr
    text = sim.path(METRICS).read_text()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        metric, host, certificate, value = SAMPLE.fullmatch(line).groups()  # type: ignore[union-attr]
        assert host == "cp-2"
        samples[certificate or metric] = int(value)
    return samples, text


def test_every_certificate_with_its_end_date(sim) -> None:
    made = _control_plane(sim)
    samples, _ = _run(sim)
    assert samples.pop(alerts.UNREADABLE) == 0
    assert set(samples) == set(LIFETIMES)  # kubelet.conf names a file: no certificate of its own
    for name, days in LIFETIMES.items():
        assert abs(samples[name] - (made + days * 86400)) < 120, name


def test_an_unreadable_certificate_is_counted_and_the_rest_still_written(sim) -> None:
    _control_plane(sim)
    sim.path("/etc/kubernetes/pki/broken.crt").write_text("-----BEGIN CERTIFICATE-----\nnot one\n")
    samples, _ = _run(sim)
    assert samples.pop(alerts.UNREADABLE) == 1
    assert set(samples) == set(LIFETIMES)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_the_file_is_valid_exposition_format(sim) -> None:
    _control_plane(sim)
    _, text = _run(sim)
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _promtool_test(tmp_path: Path, series: list[dict[str, str]], alerts_at: list[dict]) -> None:
    """The rules as built, less their annotations: the descriptions carry `humanizeDuration` of a
    value that depends on when the job ran; what fires, when and with which labels is the test."""
    group = alerts.rule_group()
    group["rules"] = [{k: v for k, v in r.items() if k != "annotations"} for r in group["rules"]]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": alerts_at}]}))
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _firing(alert: str, at: str, *certs: str) -> dict:
    rule = next(r for r in alerts.rule_group()["rules"] if r["alert"] == alert)
    return {"eval_time": at, "alertname": alert, "exp_alerts": [
        {"exp_labels": {"severity": rule["labels"]["severity"], "host": "cp-2", "certificate": c}} for c in certs]}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_the_alerts_on_what_the_job_wrote(sim, tmp_path: Path) -> None:
    """The job's own lines, each value less the time it ran (promtool's clock starts at 0): at 2 h,
    etcd/peer.crt (5 days) and apiserver.crt (20 days) are inside 30 days, only the peer certificate
    inside 7; the CAs, admin.conf (100 days) and the rest are not."""
    _control_plane(sim)
    ran = time.time()
    samples, _ = _run(sim)
    unreadable = samples.pop(alerts.UNREADABLE)
    series = [{"series": f'{alerts.EXPIRY}{{host="cp-2",certificate="{c}"}}', "values": f"{int(v - ran)}x180"}
              for c, v in samples.items()]
    series.append({"series": f'{alerts.UNREADABLE}{{host="cp-2"}}', "values": f"{unreadable}x180"})
    rules_dir = tmp_path / "promtool"
    rules_dir.mkdir()
    _promtool_test(rules_dir, series, [
        _firing(alerts.EXPIRING_ALERT, "30m"),  # not for an hour yet
        _firing(alerts.EXPIRING_ALERT, "2h", "apiserver.crt", "etcd/peer.crt"),
        _firing(alerts.CRITICAL_ALERT, "2h", "etcd/peer.crt"),
        {"eval_time": "2h", "alertname": alerts.UNREADABLE_ALERT, "exp_alerts": []},
    ])


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_missing_fires_for_a_control_plane_without_metrics(tmp_path: Path) -> None:
    role = 'kube_node_role{role="control-plane",node="%s"}'
    far = str(365 * 86400)
    series = [{"series": role % n, "values": "1x300"} for n in ("cp-1", "cp-2", "cp-3")] + [
        {"series": f'{alerts.EXPIRY}{{host="{n}",certificate="apiserver.crt"}}', "values": f"{far}x300"}
        for n in ("cp-1", "cp-2")] + [
        # cp-3's job starts reporting at 4 h
        {"series": f'{alerts.EXPIRY}{{host="cp-3",certificate="apiserver.crt"}}', "values": f"_x240 {far}x60"}]
    _promtool_test(tmp_path, series, [
        {"eval_time": "2h", "alertname": alerts.MISSING_ALERT, "exp_alerts": []},
        {"eval_time": "3h30m", "alertname": alerts.MISSING_ALERT, "exp_alerts": [{"exp_labels": {"severity": "warning"}}]},
        {"eval_time": "4h30m", "alertname": alerts.MISSING_ALERT, "exp_alerts": []},
    ])


def test_the_job_runs_hourly_as_the_missing_alert_assumes() -> None:
    assert check_cron(certificates.EXPIRY_SCHEDULE) == certificates.EXPIRY_SCHEDULE
    assert certificates.EXPIRY_SCHEDULE.split()[1:] == ["*", "*", "*", "*"]
    assert alerts.MISSING_FOR == "3h"
    assert alerts.WARNING_DAYS == certificates.RENEW_WITHIN_DAYS


def test_every_control_plane_gets_the_job_and_lab_the_rules() -> None:
    plan = program.run("lab-ha")
    steps = {r.name: r for r in plan.of_type("command:remote:Command") if r.name.endswith("-certificates-expiry")}
    assert sorted(steps) == ["cp-1-certificates-expiry", "cp-2-certificates-expiry", "cp-3-certificates-expiry"]
    assert [s.inputs["connection"]["host"] for _, s in sorted(steps.items())] == ["192.0.2.10", "192.0.2.20",
                                                                                  "192.0.2.30"]
    assert "node=cp-2\n" in steps["cp-2-certificates-expiry"].inputs["create"]
    assert certificates.EXPIRY_SCRIPT in steps["cp-2-certificates-expiry"].inputs["delete"]
    release = next(r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.name.endswith("kube-prometheus-stack"))
    args = release.inputs["values"]["prometheus-node-exporter"]["extraArgs"]
    assert f"--collector.textfile.directory={NODE_EXPORTER_TEXTFILE_DIR}" in args
    for stack, wanted in (("lab-ha", True), ("dev", False)):
        rules = (plan if stack == "lab-ha" else program.run(stack)).of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
        groups = {g["name"] for r in rules for g in r.inputs["spec"]["groups"]}
        assert (alerts.GROUP in groups) is wanted, stack
