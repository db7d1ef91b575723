"""GPU (and cluster certificate) alert rules, as the `spec` of one PrometheusRule (plain Prometheus rule-file format).

Every DCGM metric used here is one the exporter publishes as this program configures it
(components/dcgm_metrics.py: its default list plus volatile ECC counts, NVLink CRC / replay /
recovery errors and power / thermal violation time); the Kubernetes ones come from
kube-state-metrics and Prometheus itself (`up`). Uncorrectable memory errors are seen through
double-bit ECC counts, remapped rows (Ampere and newer) and XID 48/64/94/95; sustained throttling
both as violation time (power, thermal) and as a busy GPU whose SM clock stays far below its own
recent maximum (whatever the reason).

Label conventions of the DCGM exporter as both GPU-stack paths deploy it: `node` is the node (both
DCGM ServiceMonitors copy the scraped pod's node name into it: components/gpu_stack.py
DCGM_NODE_RELABELINGS; the exporter's own `Hostname` may be its pod's host name, not the node's),
`gpu`/`UUID` the device; the pod holding the GPU arrives as `exported_namespace`/`exported_pod`
(the charts' ServiceMonitors keep `honorLabels: false`, so the scrape target's own namespace/pod win).

XIDs: DCGM_FI_DEV_XID_ERRORS is a gauge holding the LAST XID the GPU reported; it does not return
to 0. A fatal XID stays an alert until the GPU is reset (the reset is the fix and clears it); any
other XID alerts only for 10 minutes after the value changes, so an application fault does not
leave a warning firing forever.

Does not manage: Alertmanager receivers (where alerts are sent) and the chart's default rules.
"""

from __future__ import annotations

from typing import Any

from components.monitoring.runbook import remedy, url
from config.monitoring import MonitoringAlerts
from config.scheduling_contract import GPU_RESOURCE, metric_label_name
from config.scheduling_contract import METRICS_NODE_LABEL as NODE

# The Service (hence `job`) of the exporter: dcgm-exporter chart (device-plugin) or GPU Operator.
DCGM_JOBS = "dcgm-exporter|nvidia-dcgm-exporter"

# XIDs after which the GPU needs a reset or the machine a reboot: those NVIDIA's XID catalogue
# (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, immediate action) buckets RESET_GPU,
# WORKFLOW_* or RESTART_BM: double-bit ECC (48), PMU halt (62), row remapping failure (64), NVLink error (74),
# fallen off the bus (79), uncontained ECC (95), GSP timeout / error (119, 120), ECC escape (140).
# Not 63 (a row remap recorded; applied at the next reset) nor 92 (high single-bit ECC rate): the
# catalogue buckets both IGNORE, and NVIDIA's memory error guide says a pending remap leaves
# running and new work unaffected; they alert as GpuXidError. workloads/gpuhealth/xid.py holds the
# buckets; a test keeps this list equal to the XIDs its table drains for.
FATAL_XIDS = (48, 62, 64, 74, 79, 95, 119, 120, 140)

GROUP = "gpu-cluster.gpu"
# kube-state-metrics' `resource` label for the GPU resource (nvidia_com_gpu).
GPU_RESOURCE_METRIC = metric_label_name(GPU_RESOURCE)

_RUNNING_PODS_AS_EXPORTED = (
    'label_replace(label_replace(kube_pod_status_phase{phase="Running"} == 1, '
    '"exported_pod", "$1", "pod", "(.+)"), "exported_namespace", "$1", "namespace", "(.+)")'
)


# How long a non-fatal XID alerts after the last-XID gauge changed.
XID_WINDOW = "10m"


def _fatal_xid_expr() -> str:
    return " or ".join(f"DCGM_FI_DEV_XID_ERRORS == {x}" for x in FATAL_XIDS)


def _new_xid_expr() -> str:
    """A GPU whose last XID changed within XID_WINDOW to a non-fatal one; $value is the XID."""
    return (f"((DCGM_FI_DEV_XID_ERRORS > 0) and (changes(DCGM_FI_DEV_XID_ERRORS[{XID_WINDOW}]) > 0)) "
            f"unless ({_fatal_xid_expr()})")


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    """One alerting rule; what a human does comes from its runbook section (components/monitoring/runbook.py)."""
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ != "0m":
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description,
                           "runbook": remedy(name), "runbook_url": url(name)}
    return rule


def gpu_rules(thresholds: MonitoringAlerts) -> list[dict[str, Any]]:
    gpu = "GPU {{ $labels.gpu }} on {{ $labels." + NODE + " }}"
    per_gpu = f"{NODE}, gpu, UUID"
    return [
        _alert(
            "GpuFatalXidError", _fatal_xid_expr(), "0m", "critical",
            "GPU reported a fatal XID error",
            f"{gpu} reported XID {{{{ $value }}}}; the GPU needs a reset.",
        ),
        _alert(
            "GpuXidError", _new_xid_expr(), "0m", "warning",
            "GPU reported an XID error",
            f"{gpu} reported XID {{{{ $value }}}} (often an application fault such as 13, 31 or 43).",
        ),
        _alert(
            "GpuUncorrectableMemoryError", "increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[10m]) > 0", "0m",
            "critical",
            "GPU memory had an uncorrectable (double-bit) error",
            f"{gpu} remapped rows after uncorrectable ECC errors.",
        ),
        _alert(
            "GpuEccDoubleBitError", "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0", "0m", "critical",
            "GPU memory had a double-bit (uncorrectable) ECC error",
            f"{gpu} counted {{{{ $value | humanize }}}} double-bit ECC errors in 10 minutes.",
        ),
        _alert(
            "GpuEccSingleBitErrorRate",
            f"rate(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL[1h]) * 3600 > {thresholds.ecc_sbe_per_hour}", "1h", "warning",
            "GPU memory corrects many single-bit ECC errors",
            f"{gpu} corrected {{{{ $value | humanize }}}} single-bit ECC errors an hour for an hour (threshold "
            f"{thresholds.ecc_sbe_per_hour}).",
        ),
        _alert(
            "GpuNvlinkErrorRate",
            "sum by (" + per_gpu + ") (rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[10m]) "
            "+ rate(DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL[10m]) "
            "+ rate(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[10m]) "
            f"+ rate(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[10m])) * 60 > {thresholds.nvlink_errors_per_minute}",
            "10m", "warning",
            "GPU's NVLink keeps retrying",
            f"{gpu} counts {{{{ $value | humanize }}}} NVLink CRC, replay or recovery errors a minute (threshold "
            f"{thresholds.nvlink_errors_per_minute}) for 10 minutes.",
        ),
        _alert(
            "GpuPcieReplayRate",
            f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[10m]) * 60 > {thresholds.pcie_replays_per_minute}", "10m",
            "warning",
            "GPU's PCIe link keeps replaying",
            f"{gpu} replays {{{{ $value | humanize }}}} PCIe transfers a minute (threshold "
            f"{thresholds.pcie_replays_per_minute}) for 10 minutes.",
        ),
        _alert(
            "GpuPowerThrottled",
            f"rate(DCGM_FI_DEV_POWER_VIOLATION[10m]) / 1e9 * 100 > {thresholds.throttle_percent}", "15m", "warning",
            "GPU throttled by its power limit",
            f"{gpu} spent {{{{ $value | humanize }}}}% of the time throttled by power limits (threshold "
            f"{thresholds.throttle_percent}%) for 15 minutes.",
        ),
        _alert(
            "GpuThermalThrottled",
            f"rate(DCGM_FI_DEV_THERMAL_VIOLATION[10m]) / 1e9 * 100 > {thresholds.throttle_percent}", "15m",
            "warning",
            "GPU throttled by temperature",
            f"{gpu} spent {{{{ $value | humanize }}}}% of the time throttled by thermal limits (threshold "
            f"{thresholds.throttle_percent}%) for 15 minutes.",
        ),
        _alert(
            "GpuRowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", "0m", "critical",
            "GPU memory row remapping failed",
            f"{gpu} could not remap a faulty memory row.",
        ),
        _alert(
            "GpuClocksThrottled",
            # The reference is the GPU's own maximum across all its series (it changes pods).
            f"(DCGM_FI_DEV_GPU_UTIL > 80) and on({per_gpu}) "
            f"(DCGM_FI_DEV_SM_CLOCK < on({per_gpu}) group_left() "
            f"0.7 * max by ({per_gpu}) (max_over_time(DCGM_FI_DEV_SM_CLOCK[1d])))",
            "15m", "warning",
            "Busy GPU running far below its clock for 15 minutes",
            f"{gpu} is busy but its SM clock is under 70% of its maximum of the last day: thermal, "
            "power or reliability throttling.",
        ),
        _alert(
            "GpuTemperatureHigh", f"DCGM_FI_DEV_GPU_TEMP > {thresholds.gpu_temp_celsius}", "10m", "warning",
            "GPU temperature high",
            f"{gpu} is at {{{{ $value }}}} C (threshold {thresholds.gpu_temp_celsius} C) for 10 minutes.",
        ),
        _alert(
            "GpuAllocatedButIdle",
            f'(DCGM_FI_DEV_GPU_UTIL{{exported_pod!=""}} == 0) and on(exported_namespace, exported_pod) '
            f"{_RUNNING_PODS_AS_EXPORTED}",
            f"{thresholds.idle_minutes}m", "warning",
            "GPU allocated to a running pod but idle",
            f"{gpu} is held by {{{{ $labels.exported_namespace }}}}/{{{{ $labels.exported_pod }}}} and has been "
            f"at 0% for {thresholds.idle_minutes} minutes.",
        ),
        _alert(
            "GpuNodeAllocatableBelowCapacity",
            f'kube_node_status_allocatable{{resource="{GPU_RESOURCE_METRIC}"}} '
            f'< kube_node_status_capacity{{resource="{GPU_RESOURCE_METRIC}"}}',
            "15m", "warning",
            "Node offers fewer GPUs than it has",
            "{{ $labels.node }} has fewer allocatable " + GPU_RESOURCE + " than its capacity: the device plugin "
            "marked a GPU unhealthy.",
        ),
        _alert(
            "GpuNodeNotReady",
            f'(kube_node_status_condition{{condition="Ready",status="true"}} == 0) and on(node) '
            f'(max by (node) (kube_node_status_capacity{{resource="{GPU_RESOURCE_METRIC}"}}) > 0)',
            "5m", "warning",
            "GPU node not Ready",
            "{{ $labels.node }} (a GPU node) has not been Ready for 5 minutes: its GPU pods are evicted by the "
            "node lifecycle controller and nothing new lands there.",
        ),
        _alert(
            "DcgmExporterDown", f'up{{job=~"{DCGM_JOBS}"}} == 0', "5m", "critical",
            "DCGM exporter is down",
            "Prometheus cannot scrape {{ $labels.namespace }}/{{ $labels.pod }}: no GPU metrics or GPU alerts "
            "for that node.",
        ),
        _alert(
            "GpuNodeWithoutGpuMetrics",
            # kube-state-metrics' `node` and the DCGM ServiceMonitors' `node` (NODE) name the same node.
            f'(max by (node) (kube_node_status_capacity{{resource="{GPU_RESOURCE_METRIC}"}}) > 0) unless on(node) '
            f"max by ({NODE}) (DCGM_FI_DEV_GPU_TEMP)",
            "15m", "warning",
            "GPU node without GPU metrics",
            "{{ $labels.node }} has GPUs but no DCGM exporter reports them: no GPU alerts for that node.",
        ),
    ]


CLUSTER_GROUP = "gpu-cluster.cluster"
# Days ahead the certificate alert fires: lab's `up` renews kubeadm's certificates within the same
# window (components/lab/certificates.py RENEW_WITHIN_DAYS; a test keeps the two equal).
CERTIFICATE_WARNING_DAYS = 30


def cluster_rules() -> list[dict[str, Any]]:
    """The cluster's own health that GPU work depends on."""
    seconds = CERTIFICATE_WARNING_DAYS * 86400
    return [
        _alert(
            "ClusterCertificatesExpiringSoon",
            # kube-prometheus-stack's KubeClientCertificateExpiration (7 days, 1 day) on the same
            # histogram: the client certificates the API server sees, kubeadm's controller-manager
            # and scheduler ones (issued with its serving certificates) among them. 2592000 s is one
            # of the histogram's bucket bounds, so 30 days is measured, not interpolated past.
            "histogram_quantile(0.01, sum without (namespace, service, endpoint) "
            f'(rate(apiserver_client_certificate_expiration_seconds_bucket{{job="apiserver"}}[5m]))) < {seconds} '
            'and on (job, instance) apiserver_client_certificate_expiration_seconds_count{job="apiserver"} > 0',
            "5m", "warning",
            f"A client certificate of the cluster expires within {CERTIFICATE_WARNING_DAYS} days",
            "A client of the API server {{ $labels.instance }} presents a certificate that expires in less than "
            f"{CERTIFICATE_WARNING_DAYS} days (kubeadm issues them for one year).",
        ),
    ]


def rule_groups(thresholds: MonitoringAlerts) -> list[dict[str, Any]]:
    """The `spec.groups` of the PrometheusRule (and the `groups:` of a plain rule file)."""
    return [{"name": GROUP, "rules": gpu_rules(thresholds)}, {"name": CLUSTER_GROUP, "rules": cluster_rules()}]
