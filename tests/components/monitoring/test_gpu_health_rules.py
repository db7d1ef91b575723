"""GpuHealthReconcileStale (components/monitoring/gpu_health.py), as the lab plan's PrometheusRule
carries it: `promtool check rules` accepts it, `promtool test rules` shows it firing for a service
whose reconcile passes stopped, and quiet for one that keeps reconciling or stalled only briefly.
Issue 30: it also fires while the liveness probe restarts the stuck service every few minutes, in
place (a gap in the scrapes each time) or as a new pod (a new series each time), which reset the
`for:` of the old `time() - gauge > x` rule for ever; and a healthy service that restarts stays quiet.
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


def _series(values: str, pod: int = 0) -> dict[str, str]:
    """The service's gauge as scraped from its pod number `pod` (pod 0: SERVICE's own labels)."""
    labels = {**SERVICE, **({"pod": f"gpu-health-7d9f-{pod}", "instance": f"10.0.0.{7 + pod}:8080"} if pod else {})}
    text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{service_metrics.LAST_SUCCESS}{{{text}}}", "values": values}


# The liveness probe kills a stuck service after /healthz failed for a minute; here every 3 minutes.
# A `stale` sample is a failed scrape (Prometheus writes a staleness marker), `_` no sample at all.
MINUTES = 21
STUCK_IN_PLACE = " ".join(["0 0 stale"] * (MINUTES // 3))  # same pod: up 2 scrapes, down 1
STOPPED_THEN_RESTARTED = "0 60 120 180 stale " + " ".join(["0 0 stale"] * ((MINUTES - 5) // 3))


def _new_pod_every_3_minutes(values: object) -> list[dict[str, str]]:
    """A pod per 3 minutes, each scraped for 3 minutes then gone; `values(i, minute)` its samples."""
    out = []
    for i in range(MINUTES // 3):
        samples = " ".join(str(values(i, 3 * i + k)) for k in range(3))  # type: ignore[operator]
        out.append(_series(" ".join(["_"] * (3 * i) + [samples, "stale"]), pod=i + 1))
    return out


def _test_file(rules: Path) -> dict[str, Any]:
    (rule,) = _group("lab")["rules"]
    description = rule["annotations"]["description"].replace("{{ $labels.namespace }}", SERVICE["namespace"]).replace(
        "{{ $labels.job }}", SERVICE["job"])
    # one alert per service, whichever pod reported the gauge
    fired = [{"exp_labels": {"namespace": SERVICE["namespace"], "job": SERVICE["job"], **rule["labels"]},
              "exp_annotations": {**rule["annotations"], "description": description}}]

    def case(name: str, values: str | list[dict[str, str]], at: str | list[str],
             expected: list[dict[str, Any]]) -> dict[str, Any]:
        series = [_series(values)] if isinstance(values, str) else values
        times = [at] if isinstance(at, str) else at
        return {"name": name, "interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": t, "alertname": health_monitoring.STALE_ALERT, "exp_alerts": expected} for t in times]}

    return {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [
        # passes every minute until 3m, none after: stale (> 240 s) from 8m, firing 5m later
        case("fires once passes stop", "0 60 120 180x15", "14m", fired),
        # never a successful pass (0): fires too
        case("fires when it never reconciled", "0x20", "14m", fired),
        case("quiet while it reconciles", "0+60x20", "14m", []),
        # stale from 8m, but not for 5m yet
        case("quiet during a short stall", "0 60 120 180x15", "11m", []),
        # never a pass, restarted in place every 3 minutes: stale (> 240 s after promtool's epoch) from
        # 5m, firing from 10m, and through every restart after (the old rule: never)
        case("fires while the liveness probe restarts it in place", STUCK_IN_PLACE, ["10m", "14m", "17m", "20m"],
             fired),
        case("pending until then", STUCK_IN_PLACE, ["9m"], []),
        # never a pass, each restart a new pod with a fresh series
        case("fires while each restart is a new pod", _new_pod_every_3_minutes(lambda i, minute: 0),
             ["10m", "14m", "17m", "20m"], fired),
        # passes until 3m (stale from 8m), then stuck and restarted: fires 5m later and stays firing
        case("fires once passes stop, through the restarts", STOPPED_THEN_RESTARTED, ["13m", "20m"], fired),
        case("not before it was stale for 5m", STOPPED_THEN_RESTARTED, ["7m", "11m"], []),
        # a healthy service restarted every 3 minutes: each new pod reports 0 until its first pass
        case("quiet while a restarted service keeps reconciling",
             _new_pod_every_3_minutes(lambda i, minute: 0 if minute % 3 == 0 else 60 * minute),
             ["5m", "10m", "14m", "20m"], []),
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
