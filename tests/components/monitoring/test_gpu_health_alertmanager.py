"""The Alertmanager route of the GPU health service (components/monitoring/gpu_health.py): the
values exist in the pinned chart, the chart renders them into Alertmanager's config, Alertmanager's
own amtool accepts that config and routes a GPU fault alert to the service's webhook (and nothing
else there), and the fleet dashboard gets the service's row."""

from __future__ import annotations

import base64
import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.gpu_health import WEBHOOK_URL
from components.monitoring import RELEASE_NAME, alerts, dashboards, prometheus_stack_values
from components.monitoring import gpu_health as health_monitoring
from config.monitoring import MonitoringAlerts, MonitoringConfig
from render import program
from render.cluster.objects import collect
from tests.components.test_helm_values import undeclared_paths

AMTOOL = shutil.which("amtool")
needs_amtool = pytest.mark.skipif(AMTOOL is None, reason="amtool (Debian: prometheus-alertmanager) is not installed")


@functools.cache
def _plan(stack: str) -> program.Plan:
    return program.run(stack, config=program.stack_config(stack))


def rendered_config(stack: str, upstream_dir: Path) -> str:
    """alertmanager.yaml as the chart renders it into the Alertmanager's config Secret."""
    plan = _plan(stack)
    objs = collect(plan, upstream_dir, plan.config.kubernetes_version).objects
    (secret,) = [o for o in objs if o.kind == "Secret" and o.name == f"alertmanager-{RELEASE_NAME}-kube-prometheus-alertmanager"]
    return base64.b64decode(secret.body["data"]["alertmanager.yaml"]).decode()


def chart_defaults(upstream_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((upstream_dir / "kube-prometheus-stack" / "values.yaml").read_text())


def test_every_value_set_is_declared_by_the_chart(upstream_dir: Path) -> None:
    values = prometheus_stack_values(MonitoringConfig(), WEBHOOK_URL)
    assert undeclared_paths(values["alertmanager"], chart_defaults(upstream_dir)["alertmanager"]) == []


def test_the_charts_own_routes_and_receivers_are_kept(upstream_dir: Path) -> None:
    # Lists replace the chart's: its Watchdog route and null receiver must be repeated exactly.
    default = chart_defaults(upstream_dir)["alertmanager"]["config"]
    ours = health_monitoring.alertmanager_values(WEBHOOK_URL)
    assert ours["route"]["routes"][: len(default["route"]["routes"])] == default["route"]["routes"]
    assert ours["receivers"][: len(default["receivers"])] == default["receivers"]


def test_without_the_service_alertmanager_keeps_the_chart_default() -> None:
    assert "config" not in prometheus_stack_values(MonitoringConfig())["alertmanager"]
    gke = _plan("gke")
    (release,) = [r for r in gke.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == RELEASE_NAME]
    assert "config" not in release.inputs["values"]["alertmanager"]


def test_routed_alerts_are_gpu_rules() -> None:
    names = {rule["alert"] for rule in alerts.gpu_rules(MonitoringAlerts())}
    assert set(health_monitoring.HEALTH_ALERTS) <= names
    # Not a GPU fault: never routed to a service that takes nodes out.
    assert not {"GpuAllocatedButIdle", "DcgmExporterDown", "GpuNodeWithoutGpuMetrics"} & set(
        health_monitoring.HEALTH_ALERTS)


@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_the_chart_renders_the_route(stack: str, upstream_dir: Path) -> None:
    config = yaml.safe_load(rendered_config(stack, upstream_dir))
    (receiver,) = [r for r in config["receivers"] if r["name"] == health_monitoring.RECEIVER]
    (webhook,) = receiver["webhook_configs"]
    assert (webhook["url"], webhook["send_resolved"]) == (WEBHOOK_URL, True)
    assert set(webhook["http_config"]["authorization"]) == {"type", "credentials_file"}  # the token from a file
    assert health_monitoring.health_route() in config["route"]["routes"]
    assert config["route"]["receiver"] == "null"  # everything else as before
    assert config["inhibit_rules"]  # the chart's own, merged in


def _amtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert AMTOOL is not None
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=30, check=False)


@needs_amtool
def test_amtool_accepts_the_rendered_config(upstream_dir: Path, tmp_path: Path) -> None:
    file = tmp_path / "alertmanager.yaml"
    file.write_text(rendered_config("lab", upstream_dir))
    result = _amtool("check-config", str(file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 receivers" in result.stdout


@needs_amtool
@pytest.mark.parametrize(("labels", "receiver"), [
    (["alertname=GpuFatalXidError", "severity=critical", "node=gpu-1", "gpu=0"], "gpu-health"),
    (["alertname=GpuXidError", "severity=warning", "node=gpu-2", "gpu=1"], "gpu-health"),
    (["alertname=GpuRowRemapFailure", "severity=critical", "node=gpu-1"], "gpu-health"),
    (["alertname=GpuAllocatedButIdle", "severity=warning", "node=gpu-1"], "null"),
    (["alertname=DcgmExporterDown", "severity=critical"], "null"),
    (["alertname=Watchdog", "severity=none"], "null"),
    (["alertname=KubePodCrashLooping", "severity=warning", "namespace=training"], "null"),
])
def test_amtool_routes_gpu_faults_to_the_service(upstream_dir: Path, tmp_path: Path, labels: list[str],
                                                 receiver: str) -> None:
    file = tmp_path / "alertmanager.yaml"
    file.write_text(rendered_config("lab", upstream_dir))
    result = _amtool("config", "routes", "test", f"--config.file={file}", *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


@needs_amtool
def test_the_route_test_has_teeth(upstream_dir: Path, tmp_path: Path) -> None:
    config = yaml.safe_load(rendered_config("lab", upstream_dir))
    config["route"]["routes"] = config["route"]["routes"][:1]  # the GPU route dropped
    file = tmp_path / "alertmanager.yaml"
    file.write_text(yaml.safe_dump(config))
    result = _amtool("config", "routes", "test", f"--config.file={file}", "alertname=GpuFatalXidError", "node=gpu-1")
    assert result.stdout.strip() == "null"


def test_the_fleet_dashboard_has_the_service_row() -> None:
    group = health_monitoring.panel_group()
    exprs = " ".join(e for panel in group.panels for e, _ in panel.exprs)
    assert "gpu_health_nodes_out_of_service" in exprs and "gpu_health_actions_total" in exprs
    for label in ("action", "reason", "result"):
        assert label in exprs
    board = dashboards.to_json(dashboards.fleet_dashboard((group,)))
    assert health_monitoring.TITLE in [p["title"] for p in board["panels"] if p["type"] == "row"]


def test_the_committed_lab_plan_provisions_the_row() -> None:
    plan = _plan("lab")
    (fleet,) = [r for r in plan.of_type("kubernetes:core/v1:ConfigMap") if r.inputs["metadata"]["name"] == "gpu-cluster-gpu-fleet"]
    assert health_monitoring.NODES_OUT in next(iter(fleet.inputs["data"].values()))
