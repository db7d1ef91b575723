"""The GPU dashboards are valid Grafana JSON built by code, and every metric a panel, a dashboard
variable or an alert rule queries exists: in the DCGM exporter's default counter list
(../shared/upstream/dcgm-exporter/default-counters.csv) or in the short list of Kubernetes metrics
below, each with the reason it is there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import dcgm_metrics
from components.monitoring import alerts, dashboards
from components.monitoring.dashboards import Panel, PanelGroup
from config.monitoring import MonitoringAlerts
from config.scheduling_contract import JOB_METRIC_LABEL, metric_label_name

# Metrics that are not the DCGM exporter's, and why they exist in every cluster this program builds.
OTHER_METRICS = {
    "container_network_receive_bytes_total": "cAdvisor, scraped by the chart's kubelet ServiceMonitor (cAdvisor on)",
    "container_network_transmit_bytes_total": "cAdvisor, scraped by the chart's kubelet ServiceMonitor (cAdvisor on)",
    "kube_pod_status_phase": "kube-state-metrics (kubeStateMetrics.enabled, chart default)",
    "kube_node_status_allocatable": "kube-state-metrics: nvidia.com/gpu appears as resource=nvidia_com_gpu",
    "kube_node_status_capacity": "kube-state-metrics: nvidia.com/gpu appears as resource=nvidia_com_gpu",
    "kube_node_status_condition": "kube-state-metrics: node conditions (condition, status labels)",
    "up": "Prometheus' own series for every scrape target",
    # kube-apiserver (the chart's apiserver ServiceMonitor, kubeApiServer.enabled by default); the
    # chart's own KubeClientCertificateExpiration rule reads the same histogram.
    "apiserver_client_certificate_expiration_seconds_bucket": "kube-apiserver, k8s.io/apiserver x509 authenticator",
    "apiserver_client_certificate_expiration_seconds_count": "kube-apiserver, k8s.io/apiserver x509 authenticator",
}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "on", "without", "ignoring", "group_left", "group_right"}
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (strings, label matchers, ranges, grouping
    clauses, functions and keywords removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"(?<![A-Za-z0-9_:])[0-9.]+(e[+-]?[0-9]+)?", " ", text)  # number literals: 1e9, 0.7
    names = set()
    for m in _IDENT.finditer(text):
        rest = text[m.end():].lstrip()
        if m.group() in _KEYWORDS or rest.startswith("("):
            continue
        names.add(m.group())
    return names


def dcgm_counters(upstream_dir: Path) -> set[str]:
    lines = (upstream_dir / "dcgm-exporter" / "default-counters.csv").read_text().splitlines()
    return {line.split(",")[0].strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}


def _boards() -> list[dict[str, Any]]:
    return [dashboards.to_json(d) for d in dashboards.dashboards()]


def _targets(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for p in board["panels"] for t in p.get("targets", [])]


def _var_queries(board: dict[str, Any]) -> list[str]:
    out = []
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*[A-Za-z_]+\)", v["query"]["query"])
            assert m, v["query"]
            out.append(m.group(1))
    return out


# ------------------------------------------------------------------------------------------------


def test_metric_name_extraction() -> None:
    assert metric_names('sum by (a, b) (rate(x_total{a="b{c}"}[5m])) and on(a) max(y)') == {"x_total", "y"}
    assert metric_names('label_replace(z, "node", "$1", "Hostname", "(.+)") > 0') == {"z"}


def test_every_queried_metric_exists(upstream_dir: Path) -> None:
    defaults = dcgm_counters(upstream_dir)
    assert "DCGM_FI_DEV_GPU_UTIL" in defaults and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in defaults  # parsed right
    # what the exporter publishes as configured: its defaults plus the health fields
    # (components/dcgm_metrics.py; tests/components/test_dcgm_metrics.py holds it against upstream)
    published = {field for field, _, _ in dcgm_metrics.FIELDS}
    assert defaults <= published
    known = published | set(OTHER_METRICS)
    exprs = [t["expr"] for b in _boards() for t in _targets(b)] + [q for b in _boards() for q in _var_queries(b)]
    exprs += [r["expr"] for g in alerts.rule_groups(MonitoringAlerts()) for r in g["rules"]]
    used: set[str] = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= known, f"{sorted(names - known)} in {expr!r} is neither a default DCGM counter nor listed"
        used |= names
    assert set(OTHER_METRICS) <= used, "OTHER_METRICS lists a metric nothing queries: drop it"


def test_number_literals_are_not_metrics() -> None:
    assert metric_names("rate(DCGM_FI_DEV_POWER_VIOLATION[10m]) / 1e9 * 100 > 10") == {"DCGM_FI_DEV_POWER_VIOLATION"}
    assert metric_names("0.7 * max(x2)") == {"x2"}


def test_a_typo_metric_is_caught(upstream_dir: Path) -> None:
    known = dcgm_counters(upstream_dir) | set(OTHER_METRICS)
    assert metric_names("DCGM_FI_DEV_GPU_UTILIZATION > 0") - known == {"DCGM_FI_DEV_GPU_UTILIZATION"}


def test_cadvisor_and_kube_state_metrics_are_on_upstream(upstream_dir: Path) -> None:
    values = yaml.safe_load((upstream_dir / "kube-prometheus-stack" / "values.yaml").read_text())
    assert values["kubelet"]["serviceMonitor"]["cAdvisor"] is True
    assert values["kubeStateMetrics"]["enabled"] is True


@pytest.mark.parametrize("index", [0, 1], ids=["fleet", "training"])
def test_dashboard_is_valid_grafana_json(index: int) -> None:
    board = _boards()[index]
    assert json.loads(json.dumps(board)) == board
    assert board["uid"] and len(board["uid"]) <= 40 and board["title"]
    assert board["schemaVersion"] == dashboards.SCHEMA_VERSION
    variables = {v["name"] for v in board["templating"]["list"]}
    assert "datasource" in variables
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["type"] in ("timeseries", "stat") and p["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs)), p["title"]
    for expr in [t["expr"] for t in _targets(board)] + _var_queries(board):
        for var in re.findall(r"\$(\w+)", expr):
            assert var in variables or var.isdigit(), f"${var} in {expr!r} is not a dashboard variable"


@pytest.mark.parametrize("index", [0, 1], ids=["fleet", "training"])
def test_legends_name_labels_the_query_keeps(index: int) -> None:
    for t in _targets(_boards()[index]):
        legend = set(re.findall(r"\{\{(\w+)\}\}", t["legendFormat"]))
        m = re.match(r"\w+ by \(([^)]*)\)", t["expr"])
        assert m or not legend, f"a legend naming labels needs an explicit `by`: {t['expr']!r}"
        kept = {s.strip() for s in m.group(1).split(",")} if m else set()
        assert legend <= kept, t


def test_fleet_dashboard_covers_the_issue_metrics() -> None:
    fleet = " ".join(t["expr"] for t in _targets(_boards()[0]))
    for metric in ("GPU_UTIL", "FB_USED", "FB_FREE", "POWER_USAGE", "GPU_TEMP", "SM_CLOCK", "XID_ERRORS"):
        assert f"DCGM_FI_DEV_{metric}" in fleet
    # per node as the DCGM ServiceMonitors label it (the exporter's Hostname may be its pod's name)
    assert "by (node, gpu)" in fleet and "Hostname" not in fleet
    node_var = next(v for v in _boards()[0]["templating"]["list"] if v["name"] == "node")
    assert node_var["query"]["query"] == "label_values(DCGM_FI_DEV_GPU_TEMP, node)"


def test_training_dashboard_groups_by_pod_and_job() -> None:
    training = " ".join(t["expr"] for t in _targets(_boards()[1]))
    assert "exported_namespace, exported_pod" in training
    assert f"count by (exported_namespace, {JOB_METRIC_LABEL})" in training
    assert "training_kubeflow_org_job_name" not in training  # PyTorchJob pods only
    assert "container_network_receive_bytes_total" in training and "container_network_transmit_bytes_total" in training


def test_metric_label_name() -> None:
    assert metric_label_name("gpu-cluster.io/training-job") == "gpu_cluster_io_training_job"
    assert metric_label_name("nvidia.com/gpu") == "nvidia_com_gpu"  # kube-state-metrics' resource label
    assert metric_label_name("app") == "app"


@pytest.mark.parametrize("launcher", ["indexed-job", "pytorchjob"])
def test_training_pods_carry_the_label_the_dashboard_groups_on(launcher: str) -> None:
    """Rendered training pod templates (both launchers) carry the pod label whose exporter form the
    training dashboard groups GPUs by, with the job's name as its value."""
    from components.storage_contract import SharedClaim
    from components.training.job import TrainingJobArgs, indexed_job_manifest, pytorchjob_manifest
    from config.training import Launcher, TrainingConfig

    t = TrainingConfig.model_validate({"launcher": launcher, "nodes": 2})
    args = TrainingJobArgs(training=t, claim=SharedClaim(ready=[]))
    if t.launcher is Launcher.INDEXED_JOB:
        templates = [indexed_job_manifest("train", args)["spec"]["template"]]
    else:
        templates = [r["template"] for r in pytorchjob_manifest("train", args)["spec"]["pytorchReplicaSpecs"].values()]
    assert templates
    for template in templates:
        labels = template["metadata"]["labels"]
        (pod_label,) = [k for k in labels if metric_label_name(k) == JOB_METRIC_LABEL]
        assert labels[pod_label] == "train"


def test_extra_panel_groups_are_the_seam_for_another_exporter() -> None:
    rdma = PanelGroup("RDMA", (Panel("RDMA writes", (("sum by (node) (rate(rdma_writes_total[5m]))", "{{node}}"),)),))
    board = dashboards.to_json(dashboards.fleet_dashboard((rdma,)))
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows[-1] == "RDMA"
    assert board["panels"][-1]["targets"][0]["expr"].startswith("sum by (node)")


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Every panel query and variable query, wrapped as a recording rule, passes `promtool check
    rules` (a PromQL syntax error in a dashboard otherwise shows only in Grafana)."""
    exprs = [t["expr"] for b in _boards() for t in _targets(b)] + [q for b in _boards() for q in _var_queries(b)]
    rules = [{"record": f"gpu_cluster:dashboard_query_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, sort_keys=False))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
    # not vacuous: a broken query fails
    path.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": [{"record": "x:y", "expr": "sum by (a (b)"}]}]}))
    broken = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert broken.returncode != 0
