"""The monitoring side of the GPU health service (components/gpu_health.py): the Alertmanager route
that sends GPU fault alerts to the service's webhook, and the fleet dashboard's "GPU health" row.

Routed: the alerts of alerts.gpu_rules that say a GPU is faulty (HEALTH_ALERTS), by name, so that
a rule renamed there fails a test here instead of silently no longer reaching the service. Not
routed, on purpose: GpuAllocatedButIdle (a user's idle job, not a fault), DcgmExporterDown and
GpuNodeWithoutGpuMetrics (a monitoring outage: acting on it would cordon healthy nodes).

Alertmanager's config is the chart's `alertmanager.config`. Helm merges maps but replaces lists,
so `route.routes` and `receivers` are given whole: the chart's own Watchdog route and `null`
receiver are repeated here (a test compares them with the chart's defaults). Everything not routed
here still ends at the chart's default receiver, `null`, as before.

The webhook receiver sends the service's bearer token from a file (`http_config.authorization
.credentials_file`, read by Alertmanager on every notification): the Secret that holds it is
mounted into the Alertmanager pod (components/gpu_health_access.py); the token itself never
appears in the config or a Helm value.

The metrics of the dashboard row are the service's own (gpuhealth): gpu_health_actions_total
{action, reason, result} and gpu_health_nodes_out_of_service. The rule group GROUP holds
GpuHealthReconcileStale: the service's last successful reconcile pass is older than
STALE_RECONCILES intervals (its /healthz fails then too, and the kubelet restarts it): GPU faults
are not acted on meanwhile. Those restarts must not hide it: each one leaves a gap in the scrapes
(the container is down, then in restart back-off) and a replaced pod starts a new series, either of
which reset a plain `time() - gauge > x` alert's `for:`. So the rule takes the newest success any pod
of the service reported within RESTART_WINDOW (max_over_time, then max over the pods).
"""

from __future__ import annotations

from typing import Any

from components.gpu_health import STALE_RECONCILES
from components.gpu_health_access import ALERTMANAGER_CREDENTIALS_FILE
from components.monitoring.alerts import _alert
from components.monitoring.dashboards import Panel, PanelGroup
from config.scheduling_contract import METRICS_NODE_LABEL as NODE

RECEIVER = "gpu-health"
# alerts.gpu_rules names of a GPU fault: the service decides what each means (cordon, drain, ...).
HEALTH_ALERTS = (
    "GpuFatalXidError",
    "GpuXidError",
    "GpuUncorrectableMemoryError",
    "GpuEccDoubleBitError",
    "GpuEccSingleBitErrorRate",
    "GpuRowRemapFailure",
    "GpuNvlinkErrorRate",
    "GpuPcieReplayRate",
    "GpuClocksThrottled",
    "GpuPowerThrottled",
    "GpuThermalThrottled",
    "GpuTemperatureHigh",
    "GpuNodeAllocatableBelowCapacity",
    "GpuNodeNotReady",
)
# The chart's defaults (values.yaml alertmanager.config), repeated because lists are replaced.
_CHART_NULL_RECEIVER = {"name": "null"}
_CHART_WATCHDOG_ROUTE = {"receiver": "null", "matchers": ['alertname = "Watchdog"']}

ACTIONS = "gpu_health_actions_total"
# The service's last successful reconcile pass (workloads/gpuhealth/metrics.py LAST_SUCCESS; a test
# keeps them equal).
LAST_SUCCESS = "gpu_health_last_successful_reconcile_timestamp_seconds"
GROUP = "gpu-cluster.gpu-health"
# Longer than the kubelet's longest restart back-off (5 min) plus a scrape: the samples of a pod the
# liveness probe keeps restarting, and of the pods before it, bridge every gap of the restarts.
RESTART_WINDOW = "10m"
STALE_ALERT = "GpuHealthReconcileStale"
NODES_OUT = "gpu_health_nodes_out_of_service"
TITLE = "GPU health"


def health_route() -> dict[str, Any]:
    """The route of the GPU fault alerts: one notification group per alert and node, resolved ones
    sent too (the service learns that a fault cleared), repeated hourly while firing (a service
    restarted in between learns it again)."""
    return {
        "receiver": RECEIVER,
        "matchers": [f'alertname =~ "{"|".join(HEALTH_ALERTS)}"'],
        "group_by": ["alertname", NODE],
        "group_wait": "10s",
        "group_interval": "1m",
        "repeat_interval": "1h",
    }


def alertmanager_values(webhook_url: str) -> dict[str, Any]:
    """The chart's `alertmanager.config` keys this program sets (merged over the chart's own)."""
    return {
        "route": {"routes": [dict(_CHART_WATCHDOG_ROUTE), health_route()]},
        "receivers": [
            dict(_CHART_NULL_RECEIVER),
            {"name": RECEIVER, "webhook_configs": [{
                "url": webhook_url, "send_resolved": True,
                "http_config": {"authorization": {"type": "Bearer", "credentials_file": ALERTMANAGER_CREDENTIALS_FILE}},
            }]},
        ],
    }


def panel_group() -> PanelGroup:
    """The fleet dashboard's row of what the service did and which nodes it holds out."""
    return PanelGroup(TITLE, (
        Panel("GPU nodes out of service", ((f"max({NODES_OUT})", "nodes"),), kind="stat",
              description="Nodes the GPU health service holds cordoned and tainted (gpu-cluster.io/gpu-unhealthy)."),
        Panel("Actions (last hour)", ((f"sum by (action, result) (increase({ACTIONS}[1h]))", "{{action}} {{result}}"),),
              description="cordon, taint, evict, uncordon, ... and their result (done, dry-run, refused by the "
                          "circuit breaker, failed)."),
        Panel("Actions by reason", ((f"sum by (action, reason) (rate({ACTIONS}[5m]))", "{{action}}: {{reason}}"),),
              "ops", "Why the service acted: the alert or the diagnostic result behind each action."),
        Panel("Refused by the circuit breaker", (
            (f'sum by (action, reason) (increase({ACTIONS}{{result="refused"}}[1h]))', "{{action}}: {{reason}}"),
        ), description="Actions the breaker refused (maxNodesOut / maxPercentOut reached): a fleet-wide "
                       "fault, or the limits are too low."),
    ))


def rule_group(reconcile_seconds: float) -> dict[str, Any]:
    """GpuHealthReconcileStale, for a service that reconciles every `reconcile_seconds`."""
    stale = STALE_RECONCILES * reconcile_seconds
    return {"name": GROUP, "rules": [_alert(
        STALE_ALERT,
        # 0 (no pass yet) counts as very old: a service that never reconciles fires too. One series
        # per service, whatever pod or restart reported it (see the module's docstring).
        f"time() - max by (namespace, job) (max_over_time({LAST_SUCCESS}[{RESTART_WINDOW}])) > {stale:g}",
        "5m", "warning",
        "The GPU health service has not reconciled for a while",
        "The GPU health service {{ $labels.namespace }}/{{ $labels.job }} has had no successful reconcile pass "
        f"for more than {stale:g} s ({STALE_RECONCILES} intervals), in any of its pods or restarts: GPU faults are "
        "not acted on and no node returns to service.",
    )]}
