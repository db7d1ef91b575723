"""GpuHealthReconcileStale (components/monitoring/gpu_health.py), as the lab plan's PrometheusRule
carries it: `promtool check rules` accepts it, `promtool test rules` shows it firing for a service
whose reconcile passes stopped, and quiet for one that keeps reconciling or stalled only briefly.
It reads the metric the service exports (workloads/gpuhealth/metrics.py), is there only with the
service, and its threshold is the service's own /healthz staleness.

promtool comes from Debian's `prometheus` package; without it the promtool tests skip with that reason.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.gpu_health import STALE_RECONCILES
from components.monitoring import gpu_health as health_monitoring
from render import program
from tests.conftest import PROJECT_DIR

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))
from gpuhealth import metrics as service_metrics  # noqa: E402

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
RULE_TYPE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
# The service's series as its ServiceMonitor scrapes it.
SERVICE = {"job": "gpu-health", "namespace": "gpu-health", "service": "gpu-health", "pod": "gpu-health-7d9f-x",
           "endpoint": "http", "instance": "10.0.0.7:8080", "container": "gpu-health"}


@functools.cache
def _plan(stack: str) -> program.Plan:
    return program.run(stack, config=program.stack_config(stack))


def _groups(stack: str) -> list[dict[str, Any]]:
    return [g for r in _plan(stack).resources if r.type == RULE_TYPE for g in r.inputs["spec"]["groups"]]


def _group(stack: str) -> dict[str, Any]:
    (group,) = [g for g in _groups(stack) if g["name"] == health_monitoring.GROUP]
    return group


def test_the_alert_reads_the_metric_the_service_exports() -> None:
    assert health_monitoring.LAST_SUCCESS == service_metrics.LAST_SUCCESS
    (rule,) = _group("lab")["rules"]
    assert service_metrics.LAST_SUCCESS in rule["expr"]


def test_the_threshold_is_the_services_own_staleness() -> None:
    """lab reconciles every 60 s (gpuHealth.reconcileSeconds); /healthz fails after STALE_RECONCILES."""
    reconcile = _plan("lab").config.gpu_health.reconcile_seconds
    (rule,) = _group("lab")["rules"]
    assert rule["expr"].endswith(f"> {STALE_RECONCILES * reconcile:g}")


def test_only_with_the_service() -> None:
    assert health_monitoring.GROUP not in [g["name"] for g in _groups("gke")]  # gpuHealth off by default there


def _series(values: str) -> dict[str, str]:
    labels = ", ".join(f'{k}="{v}"' for k, v in SERVICE.items())
    return {"series": f"{service_metrics.LAST_SUCCESS}{{{labels}}}", "values": values}


def _test_file(rules: Path) -> dict[str, Any]:
    (rule,) = _group("lab")["rules"]
    description = rule["annotations"]["description"].replace("{{ $labels.namespace }}", SERVICE["namespace"]).replace(
        "{{ $labels.pod }}", SERVICE["pod"])
    fired = [{"exp_labels": {**SERVICE, **rule["labels"]},
              "exp_annotations": {**rule["annotations"], "description": description}}]

    def case(name: str, values: str, at: str, expected: list[dict[str, Any]]) -> dict[str, Any]:
        return {"name": name, "interval": "1m", "input_series": [_series(values)],
                "alert_rule_test": [{"eval_time": at, "alertname": health_monitoring.STALE_ALERT, "exp_alerts": expected}]}

    return {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [
        # passes every minute until 3m, none after: stale (> 240 s) from 8m, firing 5m later
        case("fires once passes stop", "0 60 120 180x15", "14m", fired),
        # never a successful pass (0): fires too
        case("fires when it never reconciled", "0x20", "14m", fired),
        case("quiet while it reconciles", "0+60x20", "14m", []),
        # stale from 8m, but not for 5m yet
        case("quiet during a short stall", "0 60 120 180x15", "11m", []),
    ]}


@needs_promtool
def test_promtool_checks_and_tests_the_rule(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    rules = tmp_path / "gpu-health-rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": [_group("lab")]}, sort_keys=False))
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=120,
                           check=False)
    assert check.returncode == 0 and "SUCCESS: 1 rules found" in check.stdout, check.stdout + check.stderr
    tests = tmp_path / "gpu-health-rules.test.yaml"
    tests.write_text(yaml.safe_dump(_test_file(rules), sort_keys=False))
    result = subprocess.run([PROMTOOL, "test", "rules", str(tests)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_catches_a_wrong_expectation(tmp_path: Path) -> None:
    """The cases have teeth: expecting the alert from a service that keeps reconciling fails."""
    assert PROMTOOL is not None
    rules = tmp_path / "gpu-health-rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": [_group("lab")]}, sort_keys=False))
    spec = _test_file(rules)
    spec["tests"][2]["alert_rule_test"][0]["exp_alerts"] = spec["tests"][0]["alert_rule_test"][0]["exp_alerts"]
    tests = tmp_path / "wrong.test.yaml"
    tests.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([PROMTOOL, "test", "rules", str(tests)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode != 0
