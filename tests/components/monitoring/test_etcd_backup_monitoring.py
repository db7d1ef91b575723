"""The etcd backup's metrics and alerts (components/monitoring/etcd_backup.py):

* `promtool test rules`: EtcdBackupTooOld fires once the newest snapshot is older than twice the
  schedule's interval (and not before, nor while snapshots keep coming), EtcdBackupMissing when a
  control plane reports no metrics;
* node-exporter, as the pinned kube-prometheus-stack chart renders it with these values, reads the
  textfile directory the snapshot script writes to (under its /host/root mount of the host's "/"),
  and keeps the chart's own arguments (Helm replaces a list whole);
* the wiring: the lab stack with etcdBackup gets both; with etcdBackup off, and on dev, neither.

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

from components import versions
from components.lab import etcd_backup as lab_backup
from components.monitoring import etcd_backup
from render import program
from render.cluster.objects import render_chart

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
RELEASE = "kubernetes:helm.sh/v3:Release"
SIX_HOURS = 6 * 3600


def _promtool_test(tmp_path: Path, series: list[dict[str, str]], alerts: list[dict[str, Any]]) -> None:
    assert PROMTOOL is not None
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [etcd_backup.rule_group(SIX_HOURS)]}))
    (tmp_path / "test.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": alerts}],
    }))
    result = subprocess.run([PROMTOOL, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _annotations(name: str) -> dict[str, str]:
    rule = next(r for r in etcd_backup.rule_group(SIX_HOURS)["rules"] if r["alert"] == name)
    return dict(rule["annotations"])


@needs_promtool
def test_too_old_fires_past_twice_the_interval(tmp_path: Path) -> None:
    # cp-1's last snapshot at t=1h stays; cp-2 keeps taking one every minute (its value is the time).
    series = [
        {"series": f'{etcd_backup.LAST_SUCCESS}{{etcd_member="cp-1"}}', "values": "3600x1000"},
        {"series": f'{etcd_backup.LAST_SUCCESS}{{etcd_member="cp-2"}}', "values": "0+60x1000"},
    ]
    too_old = etcd_backup.TOO_OLD_ALERT
    _promtool_test(tmp_path, series, [
        # 12 h after the 1 h snapshot is 13 h: not yet (and 10 minutes of `for` after that).
        {"eval_time": "13h", "alertname": too_old, "exp_alerts": []},
        {"eval_time": "13h05m", "alertname": too_old, "exp_alerts": []},
        {"eval_time": "13h20m", "alertname": too_old, "exp_alerts": [
            {"exp_labels": {"severity": "warning", "etcd_member": "cp-1"}, "exp_annotations": {
                **_annotations(too_old),
                "description": "The newest etcd snapshot on cp-1 is 12h 20m 0s old, more than twice the schedule's "
                               f"interval (12h); {etcd_backup.LAST_RUN_OK} says whether the last run failed."}}]},
    ])


@needs_promtool
def test_no_snapshot_yet_counts_as_too_old_and_missing_metrics_alert(tmp_path: Path) -> None:
    series = [
        {"series": f'{etcd_backup.LAST_SUCCESS}{{etcd_member="cp-1"}}', "values": "0x1000"},
        {"series": 'kube_node_role{node="cp-1",role="control-plane"}', "values": "1x1000"},
        {"series": 'kube_node_role{node="cp-2",role="control-plane"}', "values": "1x1000"},
        {"series": 'kube_node_role{node="gpu-1",role="worker"}', "values": "1x1000"},
    ]
    missing = etcd_backup.MISSING_ALERT
    _promtool_test(tmp_path, series, [
        # promtool's clock starts at 0: a 0 (no snapshot) is as old as the clock.
        {"eval_time": "11h55m", "alertname": etcd_backup.TOO_OLD_ALERT, "exp_alerts": []},
        {"eval_time": "12h20m", "alertname": etcd_backup.TOO_OLD_ALERT, "exp_alerts": [
            {"exp_labels": {"severity": "warning", "etcd_member": "cp-1"}, "exp_annotations": {
                **_annotations(etcd_backup.TOO_OLD_ALERT),
                "description": "The newest etcd snapshot on cp-1 is 12h 20m 0s old, more than twice the schedule's "
                               f"interval (12h); {etcd_backup.LAST_RUN_OK} says whether the last run failed."}}]},
        # cp-2 reports nothing: one of two control planes is missing.
        {"eval_time": "11h50m", "alertname": missing, "exp_alerts": []},
        {"eval_time": "12h10m", "alertname": missing, "exp_alerts": [
            {"exp_labels": {"severity": "warning"}, "exp_annotations": _annotations(missing)}]},
    ])


@needs_promtool
def test_s3_too_old_fires_only_for_a_member_that_uploads_and_stopped(tmp_path: Path) -> None:
    """etcdBackup.s3: cp-1 uploaded last at 1 h, cp-2 keeps uploading; a member without S3 has no series."""
    series = [
        {"series": f'{etcd_backup.LAST_UPLOAD}{{etcd_member="cp-1"}}', "values": "3600x1000"},
        {"series": f'{etcd_backup.LAST_UPLOAD}{{etcd_member="cp-2"}}', "values": "0+60x1000"},
        {"series": f'{etcd_backup.LAST_SUCCESS}{{etcd_member="cp-3"}}', "values": "0+60x1000"},
    ]
    alert = etcd_backup.S3_TOO_OLD_ALERT
    _promtool_test(tmp_path, series, [
        {"eval_time": "13h05m", "alertname": alert, "exp_alerts": []},
        {"eval_time": "13h20m", "alertname": alert, "exp_alerts": [
            {"exp_labels": {"severity": "warning", "etcd_member": "cp-1"}, "exp_annotations": {
                **_annotations(alert),
                "description": "cp-1 last uploaded an etcd snapshot to etcdBackup.s3 12h 20m 0s ago, more than twice "
                               "the schedule's interval (12h): the off-host copy is stale."}}]},
    ])


def test_node_exporter_keeps_the_charts_arguments(upstream_dir: Path) -> None:
    chart_values = yaml.safe_load((_chart(upstream_dir) / "values.yaml").read_text())
    ours = etcd_backup.node_exporter_values()["extraArgs"]
    assert ours[:-1] == chart_values["prometheus-node-exporter"]["extraArgs"]


def _chart(upstream_dir: Path) -> Path:
    return upstream_dir / "charts" / f"{versions.KUBE_PROMETHEUS_STACK_CHART}-{versions.KUBE_PROMETHEUS_STACK_CHART_VERSION}"


def test_node_exporter_reads_the_snapshot_metrics_directory(upstream_dir: Path) -> None:
    from components.monitoring import prometheus_stack_values
    from config.monitoring import MonitoringConfig

    values = prometheus_stack_values(MonitoringConfig(), etcd_backup_metrics=True)
    templates, _ = render_chart(_chart(upstream_dir), values, "monitoring", "monitoring", "1.34.2")
    docs = [d for path, text in templates.items() if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet" and "node-exporter" in d["metadata"]["name"]]
    (container,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "node-exporter"]
    assert f"--collector.textfile.directory={lab_backup.NODE_EXPORTER_TEXTFILE_DIR}" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/host/root")
    volume = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == "/"
    # The directory node-exporter reads is the host's TEXTFILE_DIR under that mount.
    assert lab_backup.NODE_EXPORTER_TEXTFILE_DIR == "/host/root" + lab_backup.TEXTFILE_DIR


def _plan(stack: str, backup: dict[str, Any] | None = None) -> program.Plan:
    values, secret_keys = program.stack_config(stack)
    if backup is not None:
        values["gpu-cluster:etcdBackup"] = json.dumps(backup)
    return program.run(stack, config=(values, secret_keys))


def _wiring(plan: program.Plan) -> tuple[Any, set[str]]:
    release = next(r for r in plan.of_type(RELEASE) if r.inputs["chart"] == versions.KUBE_PROMETHEUS_STACK_CHART)
    rules = plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    groups = {g["name"] for r in rules for g in r.inputs["spec"]["groups"]}
    return release.inputs["values"].get("prometheus-node-exporter"), groups


def test_lab_with_backups_gets_the_metrics_and_the_alerts() -> None:
    plan = _plan("lab", {"schedule": "0 */4 * * *"})
    node_exporter, groups = _wiring(plan)
    assert node_exporter == etcd_backup.node_exporter_values()
    assert etcd_backup.GROUP in groups
    (rule,) = [r for r in plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")]
    (group,) = [g for g in rule.inputs["spec"]["groups"] if g["name"] == etcd_backup.GROUP]
    assert group["rules"][0]["expr"].endswith(f"> {2 * 4 * 3600}")
    installs = [r for r in plan.of_type("command:remote:Command") if r.name.endswith("-etcd-backup-install")]
    assert [r.name for r in installs] == ["cp-1-etcd-backup-install"]


@pytest.mark.parametrize(("stack", "backup"), [("lab", {"enabled": False}), ("dev", None)])
def test_without_backups_neither(stack: str, backup: dict[str, Any] | None) -> None:
    plan = _plan(stack, backup)
    node_exporter, groups = _wiring(plan)
    # lab's node-exporter still reads the textfiles: the etcd defragmentation's metrics (etcd.py).
    assert node_exporter == (etcd_backup.node_exporter_values() if stack == "lab" else None)
    assert etcd_backup.GROUP not in groups
    assert not [r for r in plan.of_type("command:remote:Command") if "etcd-backup" in r.name]
