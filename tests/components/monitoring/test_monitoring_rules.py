"""The GPU alert rules: what `python -m render` writes to prometheus/rules.yaml passes
`promtool check rules`, and `promtool test rules` proves, for EVERY alert, input series that make it
fire (with the exact labels and annotations) and input series that must not fire it.

promtool comes from Debian's `prometheus` package (.ci/run installs it); without it these tests
skip with that reason.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring import alerts, certificates, etcd, etcd_backup
from components.monitoring import gpu_health as gpu_health_rules
from config.etcd_backup import EtcdBackupConfig
from config.health import GpuHealthConfig
from config.monitoring import MonitoringAlerts
from render import program
from render.__main__ import write

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
THRESHOLDS = MonitoringAlerts()  # the committed lab stack uses the defaults

# One GPU as the DCGM exporter reports it through the chart's ServiceMonitor: `node` from its
# relabeling (the scraped pod's node), `Hostname` the exporter pod's host name.
GPU = {"node": "gpu-1", "Hostname": "dcgm-exporter-x", "gpu": "0", "UUID": "GPU-0", "modelName": "NVIDIA H100 80GB HBM3",
       "job": "dcgm-exporter", "namespace": "gpu-system", "pod": "dcgm-exporter-x", "container": "exporter"}
GPU1 = {**GPU, "gpu": "1", "UUID": "GPU-1"}
# ... held by a training pod (exporter pod labels; honorLabels false renames them exported_*).
HELD = {**GPU, "exported_namespace": "team", "exported_pod": "train-0", "exported_container": "trainer"}
KSM = {"job": "kube-state-metrics", "namespace": "monitoring", "pod": "ksm-x", "instance": "10.0.0.9:8080"}
GPU_NODE = {**KSM, "node": "gpu-1", "resource": "nvidia_com_gpu", "unit": "integer"}
EXPORTER_TARGET = {"job": "dcgm-exporter", "namespace": "gpu-system", "service": "dcgm-exporter",
                   "pod": "dcgm-exporter-x", "endpoint": "metrics", "instance": "10.0.0.1:9400"}


def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{body}}}", "values": values}


def _phase(pod: str, phase: str, values: str) -> dict[str, str]:
    return _series("kube_pod_status_phase", {**KSM, "namespace": "team", "pod": pod, "phase": phase}, values)


# alert -> (eval time, series that fire it, labels of the alert (no rule labels), $value,
#           series that must not fire it)
CASES: dict[str, tuple[str, list[dict[str, str]], dict[str, str], str, list[dict[str, str]]]] = {
    "GpuFatalXidError": (
        "3m", [_series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 79 79 79")], GPU, "79",
        [_series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 13 13 13"), _series("DCGM_FI_DEV_XID_ERRORS", GPU1, "0x3")],
    ),
    "GpuXidError": (
        "3m", [_series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 13 13 13")], GPU, "13",
        [
            _series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 79 79 79"),  # fatal: GpuFatalXidError's
            _series("DCGM_FI_DEV_XID_ERRORS", GPU1, "0x3"),
            # an XID reported before the window: the last-XID gauge still holds it, no new fault
            _series("DCGM_FI_DEV_XID_ERRORS", {**GPU, "gpu": "2", "UUID": "GPU-2"}, "13x20"),
        ],
    ),
    "GpuUncorrectableMemoryError": (
        "3m", [_series("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", GPU, "0 0 1 1")], GPU, "",
        # rows remapped long ago (a constant counter) are not a new error
        [_series("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", GPU, "2x20")],
    ),
    "GpuRowRemapFailure": (
        "3m", [_series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, "0 1 1 1")], GPU, "",
        [_series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, "0x3")],
    ),
    "GpuClocksThrottled": (
        "30m",
        [_series("DCGM_FI_DEV_GPU_UTIL", GPU, "95x40"), _series("DCGM_FI_DEV_SM_CLOCK", GPU, "1980x5 1200x35")],
        GPU, "",
        [
            # an idle GPU lowers its clock: not throttling
            _series("DCGM_FI_DEV_GPU_UTIL", GPU, "10x40"), _series("DCGM_FI_DEV_SM_CLOCK", GPU, "1980x5 1200x35"),
            # busy at full clock
            _series("DCGM_FI_DEV_GPU_UTIL", GPU1, "95x40"), _series("DCGM_FI_DEV_SM_CLOCK", GPU1, "1980x40"),
        ],
    ),
    "GpuTemperatureHigh": (
        "15m", [_series("DCGM_FI_DEV_GPU_TEMP", GPU, f"{THRESHOLDS.gpu_temp_celsius + 5}x20")], GPU,
        str(THRESHOLDS.gpu_temp_celsius + 5),
        [
            _series("DCGM_FI_DEV_GPU_TEMP", GPU, f"{THRESHOLDS.gpu_temp_celsius}x20"),
            # a short spike is not sustained
            _series("DCGM_FI_DEV_GPU_TEMP", GPU1, f"70x5 {THRESHOLDS.gpu_temp_celsius + 10} 70x14"),
        ],
    ),
    "GpuAllocatedButIdle": (
        f"{THRESHOLDS.idle_minutes + 5}m",
        [_series("DCGM_FI_DEV_GPU_UTIL", HELD, f"0x{THRESHOLDS.idle_minutes + 10}"),
         _phase("train-0", "Running", f"1x{THRESHOLDS.idle_minutes + 10}")],
        HELD, "",
        [
            # busy for a moment in the window
            _series("DCGM_FI_DEV_GPU_UTIL", HELD, f"0x10 50 0x{THRESHOLDS.idle_minutes}"),
            _phase("train-0", "Running", f"1x{THRESHOLDS.idle_minutes + 10}"),
            # the pod holding GPU1 is no longer running
            _series("DCGM_FI_DEV_GPU_UTIL", {**HELD, "gpu": "1", "UUID": "GPU-1", "exported_pod": "done-0"},
                    f"0x{THRESHOLDS.idle_minutes + 10}"),
            _phase("done-0", "Running", f"0x{THRESHOLDS.idle_minutes + 10}"),
            _phase("done-0", "Succeeded", f"1x{THRESHOLDS.idle_minutes + 10}"),
            # an idle GPU no pod holds
            _series("DCGM_FI_DEV_GPU_UTIL", {**GPU, "gpu": "2", "UUID": "GPU-2"}, f"0x{THRESHOLDS.idle_minutes + 10}"),
        ],
    ),
    "GpuNodeAllocatableBelowCapacity": (
        "25m",
        [_series("kube_node_status_allocatable", GPU_NODE, "8x5 7x25"),
         _series("kube_node_status_capacity", GPU_NODE, "8x30")],
        GPU_NODE, "",
        [_series("kube_node_status_allocatable", GPU_NODE, "8x5 7x10 8x15"),  # recovered before 15 min
         _series("kube_node_status_capacity", GPU_NODE, "8x30")],
    ),
    "DcgmExporterDown": (
        "6m",
        [_series("up", EXPORTER_TARGET, "0x10")], EXPORTER_TARGET, "",
        [
            _series("up", {"job": "dcgm-exporter", "namespace": "gpu-system", "pod": "a", "instance": "a"}, "1x10"),
            _series("up", {"job": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "pod": "b", "instance": "b"},
                    "0x2 1x8"),
            _series("up", {"job": "node-exporter", "namespace": "monitoring", "pod": "c", "instance": "c"}, "0x10"),
        ],
    ),
    "GpuNodeWithoutGpuMetrics": (
        "16m", [_series("kube_node_status_capacity", GPU_NODE, "8x20")], {"node": "gpu-1"}, "",
        [
            _series("kube_node_status_capacity", GPU_NODE, "8x20"),
            _series("DCGM_FI_DEV_GPU_TEMP", GPU, "40x20"),
            _series("kube_node_status_capacity", {**GPU_NODE, "node": "cpu-1"}, "0x20"),
        ],
    ),
}

_T = THRESHOLDS
NVLINK = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
CASES.update({
    "GpuEccDoubleBitError": (
        "3m", [_series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "0 0 1 1")], GPU, "1",
        # errors counted long ago (a constant counter) are not a new error
        [_series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "3x20")],
    ),
    "GpuEccSingleBitErrorRate": (
        "125m",
        # twice the threshold an hour, every minute, for two hours
        [_series("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", GPU, f"0+{_T.ecc_sbe_per_hour * 2 / 60:g}x130")], GPU, "200",
        [_series("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", GPU, f"0+{_T.ecc_sbe_per_hour / 2 / 60:g}x130"),  # half of it
         # a burst that does not last the hour
         _series("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", GPU1, f"0x60 0+{_T.ecc_sbe_per_hour * 5 / 60:g}x10 600x60")],
    ),
    "GpuNvlinkErrorRate": (
        "25m",
        # three times the threshold a minute, split over the four NVLink error counters
        [_series(f"DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_TOTAL", GPU, f"0+{_T.nvlink_errors_per_minute * 3 / 4:g}x30")
         for kind in NVLINK],
        {"node": "gpu-1", "gpu": "0", "UUID": "GPU-0"}, "30",
        [*(_series(f"DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_TOTAL", GPU, f"0+{_T.nvlink_errors_per_minute / 8:g}x30")
           for kind in NVLINK),
         _series("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", GPU1, "5x30")],
    ),
    "GpuPcieReplayRate": (
        "25m", [_series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", GPU, f"0+{_T.pcie_replays_per_minute * 2}x30")], GPU, "20",
        [_series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", GPU, f"0+{_T.pcie_replays_per_minute // 2}x30"),
         _series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", GPU1, f"0x10 {_T.pcie_replays_per_minute * 100}x20")],  # one step
    ),
    # violation counters are nanoseconds throttled: 30 s a minute is 50 % of the time
    "GpuPowerThrottled": (
        "30m", [_series("DCGM_FI_DEV_POWER_VIOLATION", GPU, "0+30000000000x40")], GPU, "50",
        [_series("DCGM_FI_DEV_POWER_VIOLATION", GPU, f"0+{_T.throttle_percent * 6 // 10 * 10**9}x40"),
         _series("DCGM_FI_DEV_POWER_VIOLATION", GPU1, "0x20 0+30000000000x8 240000000000x12")],  # 8 min only
    ),
    "GpuThermalThrottled": (
        "30m", [_series("DCGM_FI_DEV_THERMAL_VIOLATION", GPU, "0+30000000000x40")], GPU, "50",
        [_series("DCGM_FI_DEV_THERMAL_VIOLATION", GPU, f"0+{_T.throttle_percent * 6 // 10 * 10**9}x40"),
         _series("DCGM_FI_DEV_POWER_VIOLATION", GPU1, "0+30000000000x40")],  # power, not thermal
    ),
    "GpuNodeNotReady": (
        "8m",
        [_series("kube_node_status_condition", {**KSM, "node": "gpu-1", "condition": "Ready", "status": "true"},
                 "1 0x10"),
         _series("kube_node_status_capacity", GPU_NODE, "8x11")],
        {**KSM, "node": "gpu-1", "condition": "Ready", "status": "true"}, "",
        [_series("kube_node_status_condition", {**KSM, "node": "gpu-1", "condition": "Ready", "status": "true"},
                 "1 0 0 1x8"),  # back within 5 minutes
         _series("kube_node_status_capacity", GPU_NODE, "8x11"),
         _series("kube_node_status_condition", {**KSM, "node": "cpu-1", "condition": "Ready", "status": "true"},
                 "0x11"),  # not a GPU node
         _series("kube_node_status_capacity", {**GPU_NODE, "node": "cpu-1"}, "0x11")],
    ),
})

# kube-apiserver's client-certificate histogram as scraped by the chart's apiserver ServiceMonitor.
APISERVER = {"job": "apiserver", "instance": "192.0.2.10:6443", "namespace": "default", "service": "kubernetes",
             "endpoint": "https"}
# Its bucket bounds (k8s.io/apiserver/pkg/authentication/request/x509/x509.go).
CERT_BUCKETS = ("0", "1800", "3600", "7200", "21600", "43200", "86400", "172800", "345600", "604800", "2592000",
                "7776000", "15552000", "31104000", "+Inf")


def _client_certs(labels: dict[str, str], days_left: int, minutes: int = 20) -> list[dict[str, str]]:
    """10 requests a minute, each presenting a client certificate that expires in `days_left` days."""
    left = days_left * 86400
    out = [_series("apiserver_client_certificate_expiration_seconds_bucket", {**labels, "le": le},
                   f"0+10x{minutes}" if le == "+Inf" or float(le) >= left else f"0x{minutes}")
           for le in CERT_BUCKETS]
    return out + [_series("apiserver_client_certificate_expiration_seconds_count", labels, f"0+10x{minutes}")]


CASES["ClusterCertificatesExpiringSoon"] = (
    "12m", _client_certs(APISERVER, 20), {"job": "apiserver", "instance": APISERVER["instance"]}, "",
    [
        *_client_certs(APISERVER, 300),  # renewed: a year's validity
        *_client_certs({**APISERVER, "instance": "192.0.2.11:6443"}, 45),  # outside the 30-day window
    ],
)

_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def _humanize(value: str) -> str:
    """Prometheus' template function `humanize` (template/template.go): SI prefixes, %.4g."""
    v = float(value)
    if v == 0 or v != v or abs(v) == float("inf"):
        return f"{v:.4g}"
    prefix = ""
    if abs(v) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
    else:
        for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
            if abs(v) >= 1:
                break
            prefix, v = p, v * 1000
    return f"{v:.4g}{prefix}"


def _expand(text: str, labels: dict[str, str], value: str) -> str:
    def one(m: re.Match[str]) -> str:
        expr = m.group(1)
        if expr == "$value":
            return value
        if expr == "$value | humanize":
            return _humanize(value)
        assert expr.startswith("$labels."), f"template {expr!r}: only $labels.<name>, $value (| humanize) are tested"
        return labels[expr.removeprefix("$labels.")]

    return _TEMPLATE.sub(one, text)


def _rules() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in alerts.rule_groups(THRESHOLDS) for r in g["rules"]}


@functools.cache
def _rendered(tmp: Path) -> Path:
    write(program.run("lab"), tmp / "lab")
    return tmp / "lab" / "prometheus" / "rules.yaml"


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _rendered(tmp_path_factory.mktemp("render"))


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, check=False)


# ------------------------------------------------------------------------------------------------


def _health_group() -> dict[str, Any]:
    """The GPU health service's own group (tests/components/monitoring/test_gpu_health_rules.py), at
    the reconcile interval the committed lab stack keeps (the default: it sets no gpuHealth)."""
    return gpu_health_rules.rule_group(GpuHealthConfig().reconcile_seconds)


def _etcd_backup_group() -> dict[str, Any]:
    """The etcd backup's group (tests/components/monitoring/test_etcd_backup_monitoring.py), at the
    schedule the committed lab stack keeps (the default)."""
    return etcd_backup.rule_group(EtcdBackupConfig().interval_seconds)


def test_render_writes_every_rule(rules_file: Path) -> None:
    assert yaml.safe_load(rules_file.read_text()) == {
        "groups": [*alerts.rule_groups(THRESHOLDS), _health_group(), _etcd_backup_group(), etcd.rule_group(),
                       certificates.rule_group()]}


def test_certificate_alert_window_is_the_renewal_window() -> None:
    """lab's `up` renews kubeadm's certificates within the window the alert fires in."""
    from components.lab.certificates import RENEW_WITHIN_DAYS

    assert alerts.CERTIFICATE_WARNING_DAYS == RENEW_WITHIN_DAYS


def test_every_alert_has_a_fire_and_no_fire_case() -> None:
    assert set(CASES) == set(_rules())


def test_every_alert_has_severity_and_runbook() -> None:
    for name, rule in _rules().items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["runbook"].strip(), name
        assert rule["annotations"]["runbook_url"].startswith("docs/runbook.md#"), name
        assert {"summary", "description"} <= set(rule["annotations"]), name


@needs_promtool
def test_promtool_check_rules(rules_file: Path) -> None:
    result = _promtool("check", "rules", str(rules_file))
    assert result.returncode == 0, result.stdout + result.stderr
    extra = (len(_health_group()["rules"]) + len(_etcd_backup_group()["rules"]) + len(etcd.rule_group()["rules"])
             + len(certificates.rule_group()["rules"]))
    assert f"SUCCESS: {len(_rules()) + extra} rules found" in result.stdout


def _test_file(rules_file: Path) -> dict[str, Any]:
    rules = _rules()
    tests = []
    for alert, (at, fire, labels, value, quiet) in CASES.items():
        rule = rules[alert]
        expected_labels = {**labels, **rule["labels"]}
        annotations = {k: _expand(v, labels, value) for k, v in rule["annotations"].items()}
        tests.append({
            "name": f"{alert} fires",
            "interval": "1m",
            "input_series": fire,
            "alert_rule_test": [{"eval_time": at, "alertname": alert,
                                 "exp_alerts": [{"exp_labels": expected_labels, "exp_annotations": annotations}]}],
        })
        tests.append({
            "name": f"{alert} stays quiet",
            "interval": "1m",
            "input_series": quiet,
            "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": []}],
        })
    return {"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": tests}


@needs_promtool
def test_promtool_test_rules(rules_file: Path, tmp_path: Path) -> None:
    test_file = tmp_path / "gpu-alerts.test.yaml"
    test_file.write_text(yaml.safe_dump(_test_file(rules_file), sort_keys=False))
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_test_catches_a_wrong_expectation(rules_file: Path, tmp_path: Path) -> None:
    """The harness is not vacuous: swapping a fire case's series for its quiet ones fails."""
    spec = _test_file(rules_file)
    spec["tests"][0]["input_series"] = spec["tests"][1]["input_series"]
    test_file = tmp_path / "broken.test.yaml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode != 0


@needs_promtool
def test_xid_alerts_over_time(rules_file: Path, tmp_path: Path) -> None:
    """A non-fatal XID fires for XID_WINDOW after the gauge changes, then clears although the gauge
    still holds it, and fires again on a different XID; a fatal XID stays firing."""
    assert alerts.XID_WINDOW == "10m"
    xid = [_series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 13x14 31x14"),
           _series("DCGM_FI_DEV_XID_ERRORS", GPU1, "0 79x40")]
    gpu_rule = _rules()["GpuXidError"]
    fatal_rule = _rules()["GpuFatalXidError"]

    def exp(rule: dict[str, Any], labels: dict[str, str], value: str) -> dict[str, Any]:
        return {"exp_labels": {**labels, **rule["labels"]},
                "exp_annotations": {k: _expand(v, labels, value) for k, v in rule["annotations"].items()}}

    spec = {"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": xid,
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "GpuXidError", "exp_alerts": [exp(gpu_rule, GPU, "13")]},
            {"eval_time": "13m", "alertname": "GpuXidError", "exp_alerts": []},
            {"eval_time": "17m", "alertname": "GpuXidError", "exp_alerts": [exp(gpu_rule, GPU, "31")]},
            {"eval_time": "29m", "alertname": "GpuXidError", "exp_alerts": []},
            {"eval_time": "39m", "alertname": "GpuFatalXidError", "exp_alerts": [exp(fatal_rule, GPU1, "79")]},
        ],
    }]}
    test_file = tmp_path / "xid.test.yaml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_name_the_node_label_the_service_monitors_set() -> None:
    from components.gpu_stack import DCGM_NODE_RELABELINGS
    from config.scheduling_contract import METRICS_NODE_LABEL

    assert METRICS_NODE_LABEL == "node"  # GpuNodeWithoutGpuMetrics joins kube-state-metrics' `node` on it
    assert [r["targetLabel"] for r in DCGM_NODE_RELABELINGS] == [METRICS_NODE_LABEL]
    for name, rule in _rules().items():
        assert "Hostname" not in rule["expr"] + str(rule["annotations"]), name
    assert "max by (node) (DCGM_FI_DEV_GPU_TEMP)" in _rules()["GpuNodeWithoutGpuMetrics"]["expr"]
