"""The queues' alerts and dashboard row (components/monitoring/kueue.py):

* `promtool test rules` on the metrics Kueue exports (names and labels as Kueue's
  reference/metrics.md lists them): KueueWorkloadPendingTooLong fires when a ClusterQueue keeps
  workloads pending through the window and admits none, not while it keeps admitting, not for a
  shorter wait; KueueClusterQueueInactive for a queue that is not active; KueueWorkloadInadmissible;
* every expression of the rules and the row parses (promtool check rules);
* the wiring: lab-ha (queues on, monitoring on) gets the group and the row, lab (queues off) neither.

promtool comes from Debian's `prometheus` package; without it those tests skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring import kueue
from render import program
from render.__main__ import kubernetes_objects

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
HOUR = 60


def _promtool(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def _test(tmp_path: Path, series: list[dict[str, str]], alerts: list[dict[str, Any]]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [kueue.rule_group(HOUR)]}))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": alerts}],
    }))
    result = _promtool(tmp_path, "test", "rules", "test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def _firing(name: str, labels: dict[str, str], at: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name,
            "exp_alerts": [{"exp_labels": {**{k: v for k, v in labels.items() if k != "_value"},
                                           "severity": _severity(name)},
                            "exp_annotations": _annotations(name, labels)}]}


def _quiet(name: str, at: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": []}


def _severity(name: str) -> str:
    return next(r for r in kueue.rule_group(HOUR)["rules"] if r["alert"] == name)["labels"]["severity"]


def _annotations(name: str, labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations with the templates filled as Prometheus would (labels and $value)."""
    rule = next(r for r in kueue.rule_group(HOUR)["rules"] if r["alert"] == name)
    out = {}
    for key, text in rule["annotations"].items():
        for label, value in labels.items():
            text = text.replace("{{ $labels." + label + " }}", value)
        out[key] = text.replace("{{ $value }}", labels.get("_value", "1"))
    return out


@needs_promtool
def test_pending_too_long_fires_only_when_nothing_is_admitted(tmp_path: Path) -> None:
    series = [
        # team-a: one workload pending from the start, nothing admitted: fires after the hour.
        {"series": f'{kueue.PENDING}{{cluster_queue="team-a", status="active"}}', "values": "1x200"},
        {"series": f'{kueue.ADMITTED_TOTAL}{{cluster_queue="team-a"}}', "values": "3x200"},
        # team-b: always something pending, but one admitted every 10 minutes: never fires.
        {"series": f'{kueue.PENDING}{{cluster_queue="team-b", status="active"}}', "values": "2x200"},
        {"series": f'{kueue.ADMITTED_TOTAL}{{cluster_queue="team-b"}}', "values": "0+0.1x200"},
        # team-c: pending for 40 minutes only.
        {"series": f'{kueue.PENDING}{{cluster_queue="team-c", status="active"}}', "values": "1x40 0x160"},
        {"series": f'{kueue.ADMITTED_TOTAL}{{cluster_queue="team-c"}}', "values": "0x200"},
    ]
    labels = {"cluster_queue": "team-a"}
    _test(tmp_path, series, [
        _quiet(kueue.PENDING_ALERT, "50m"),
        # an hour of pending with no admission fires at minute 60 (test_kueue_pending_alert.py); still at 150
        _firing(kueue.PENDING_ALERT, labels, "150m"),
    ])


@needs_promtool
def test_inactive_cluster_queue_fires(tmp_path: Path) -> None:
    series = [
        {"series": f'{kueue.QUEUE_STATUS}{{cluster_queue="team-a", status="active"}}', "values": "0x30"},
        {"series": f'{kueue.QUEUE_STATUS}{{cluster_queue="team-a", status="pending"}}', "values": "1x30"},
        {"series": f'{kueue.QUEUE_STATUS}{{cluster_queue="team-b", status="active"}}', "values": "1x30"},
    ]
    _test(tmp_path, series, [
        _quiet(kueue.INACTIVE_ALERT, "5m"),
        {"eval_time": "15m", "alertname": kueue.INACTIVE_ALERT,
         "exp_alerts": [{"exp_labels": {"cluster_queue": "team-a", "status": "active", "severity": "critical"},
                         "exp_annotations": _annotations(kueue.INACTIVE_ALERT, {"cluster_queue": "team-a"})}]},
    ])


@needs_promtool
def test_inadmissible_fires_after_the_window(tmp_path: Path) -> None:
    series = [
        {"series": f'{kueue.PENDING}{{cluster_queue="team-a", status="inadmissible"}}', "values": "2x100"},
        {"series": f'{kueue.PENDING}{{cluster_queue="team-b", status="inadmissible"}}', "values": "0x100"},
    ]
    _test(tmp_path, series, [
        _quiet(kueue.INADMISSIBLE_ALERT, "30m"),
        _firing(kueue.INADMISSIBLE_ALERT, {"cluster_queue": "team-a", "_value": "2"}, "70m"),
    ])


@needs_promtool
def test_rules_and_row_queries_parse(tmp_path: Path) -> None:
    panels = kueue.panel_group().panels
    records = [{"record": f"kueue_panel_{i}_{j}", "expr": expr}
               for i, panel in enumerate(panels) for j, (expr, _) in enumerate(panel.exprs)]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [kueue.rule_group(HOUR),
                                                                    {"name": "panels", "rules": records}]}))
    result = _promtool(tmp_path, "check", "rules", "rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_quota_used_panel_skips_a_nominal_of_zero(tmp_path: Path) -> None:
    """The "GPU quota used" panel evaluated by promtool: usage over nominal per queue and flavor; a
    queue with no nominal GPUs (a team that only borrows) gives no sample, not +Inf (x/0) or NaN (0/0)."""
    (panel,) = [p for p in kueue.panel_group().panels if p.title == "GPU quota used"]
    ((expr, _),) = panel.exprs
    gpu = 'resource="nvidia.com/gpu"'
    series = [{"series": f'{metric}{{cluster_queue="{cq}", flavor="gpu", {gpu}}}', "values": f"{value}x5"}
              for cq, usage, nominal in (("team-a", 3, 2), ("team-b", 1, 0), ("team-c", 0, 0))
              for metric, value in ((kueue.USAGE, usage), (kueue.NOMINAL, nominal))]
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": [], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
            {"expr": expr, "eval_time": "2m",
             "exp_samples": [{"labels": '{cluster_queue="team-a", flavor="gpu"}', "value": 1.5}]}]}],
    }))
    result = _promtool(tmp_path, "test", "rules", "test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def _groups_and_rows(stack: str) -> tuple[set[str], set[str]]:
    objects = kubernetes_objects(program.run(stack))
    groups = {g["name"] for o in objects if o["kind"] == "PrometheusRule" for g in o["spec"]["groups"]}
    rows = {p["title"] for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("gpu-cluster-")
            for text in o.get("data", {}).values() for p in json.loads(text).get("panels", []) if p.get("type") == "row"}
    return groups, rows


def test_queues_on_brings_the_group_and_the_row() -> None:
    groups, rows = _groups_and_rows("lab-ha")
    assert kueue.GROUP in groups and kueue.TITLE in rows
    groups, rows = _groups_and_rows("lab")
    assert kueue.GROUP not in groups and kueue.TITLE not in rows
