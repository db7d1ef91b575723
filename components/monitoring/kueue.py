"""The monitoring side of the queues (components/queues): a Kueue row on the fleet dashboard and the
rule group GROUP, over the metrics Kueue's controller exports (Kueue's docs, reference/metrics.md;
the chart's ServiceMonitor scrapes them when monitoring is on):

  kueue_pending_workloads{cluster_queue, status}     gauge, status "active" (waiting for quota) or
                                                     "inadmissible" (cannot be admitted as things are)
  kueue_admitted_workloads_total{cluster_queue}      counter
  kueue_admitted_active_workloads{cluster_queue}     gauge, admitted and not finished
  kueue_admission_wait_time_seconds{cluster_queue}   histogram, creation to admission
  kueue_cluster_queue_status{cluster_queue, status}  1 for the ClusterQueue's one status
                                                     (pending, active, terminating)
  kueue_cluster_queue_resource_usage / _nominal_quota{cluster_queue, flavor, resource}
                                                     only with the manager's metrics.enableClusterQueueResources
                                                     (components/queues/kueue.py turns it on)

Kueue exports no age per pending workload, so "a workload pending longer than pendingAlertMinutes"
is read as: the ClusterQueue had workloads pending for that whole time and admitted none of them in
it. Then the workload at the head at the start is still waiting (unless it was deleted and another
took its place), and a queue that keeps admitting does not fire however long it stays busy.

Does not manage: Kueue's ServiceMonitor (the chart's), alerts on Kueue's own health (its Deployment
is covered by kube-prometheus-stack's KubeDeploymentReplicasMismatch).
"""

from __future__ import annotations

from typing import Any

from components.monitoring.alerts import _alert
from components.monitoring.dashboards import Panel, PanelGroup
from config.scheduling_contract import GPU_RESOURCE

GROUP = "gpu-cluster.kueue"
TITLE = "Queues (Kueue)"
PENDING = "kueue_pending_workloads"
ADMITTED_TOTAL = "kueue_admitted_workloads_total"
ADMITTED_ACTIVE = "kueue_admitted_active_workloads"
WAIT_TIME = "kueue_admission_wait_time_seconds"
QUEUE_STATUS = "kueue_cluster_queue_status"
USAGE = "kueue_cluster_queue_resource_usage"
NOMINAL = "kueue_cluster_queue_nominal_quota"
PENDING_ALERT = "KueueWorkloadPendingTooLong"
INACTIVE_ALERT = "KueueClusterQueueInactive"
INADMISSIBLE_ALERT = "KueueWorkloadInadmissible"
# A ClusterQueue is inactive while a flavor or admission check it names is missing: right after an
# install or a change that is seconds; 10 minutes of it is a broken queue.
INACTIVE_FOR = "10m"


def pending_too_long_expr(pending_minutes: int) -> str:
    """A ClusterQueue with workloads pending all through the last pending_minutes (and at their start),
    none admitted in it. The window is in the expression, not in `for:`: an increase() window plus
    `for` of the same length fired at about twice the configured time. A queue that never admitted
    anything has no kueue_admitted_workloads_total series at all (Kueue makes it at the first
    admission): `unless` with nothing on the right keeps it, so a new team's queue fires too; a series
    that appeared inside the window is a first admission (increase() does not count it). The
    subquery's step (a minute, coarser past two hours: the window may be a week) only looks for a
    gap; the offset keeps it from firing before the window is over."""
    window, step = f"{pending_minutes}m", f"{max(1, pending_minutes // 120)}m"
    pending = f"sum by (cluster_queue) ({PENDING})"
    return (f"(min_over_time(({pending})[{window}:{step}]) > 0 "
            f"and on (cluster_queue) sum by (cluster_queue) ({PENDING} offset {window}) > 0) "
            f"unless on (cluster_queue) (sum by (cluster_queue) (increase({ADMITTED_TOTAL}[{window}])) > 0) "
            f"unless on (cluster_queue) (sum by (cluster_queue) ({ADMITTED_TOTAL}) "
            f"unless on (cluster_queue) sum by (cluster_queue) ({ADMITTED_TOTAL} offset {window}))")


def rule_group(pending_minutes: int) -> dict[str, Any]:
    """Three alerts: pending too long, a ClusterQueue that is not active, workloads it cannot admit."""
    window = f"{pending_minutes}m"
    return {"name": GROUP, "rules": [
        _alert(
            PENDING_ALERT,
            pending_too_long_expr(pending_minutes),
            "0m", "warning",
            "Workloads have waited in a queue and none was admitted",
            "ClusterQueue {{ $labels.cluster_queue }} has had at least {{ $value }} workload(s) pending for "
            f"{window} and admitted none of them in that time.",
        ),
        _alert(
            INACTIVE_ALERT,
            f'{QUEUE_STATUS}{{status="active"}} == 0',
            INACTIVE_FOR, "critical",
            "A ClusterQueue is not active: it admits nothing",
            "ClusterQueue {{ $labels.cluster_queue }} is not active (a ResourceFlavor or admission check it "
            "names is missing, or it is stopped); every job queued to it waits.",
        ),
        _alert(
            INADMISSIBLE_ALERT,
            f'sum by (cluster_queue) ({PENDING}{{status="inadmissible"}}) > 0',
            window, "warning",
            "A ClusterQueue holds workloads it cannot admit",
            "ClusterQueue {{ $labels.cluster_queue }} has {{ $value }} workload(s) Kueue found inadmissible "
            f"for {window}: as the quotas and flavors are, they do not fit (a job larger than the queue's "
            "quota plus what it may borrow never will).",
        ),
    ]}


_PER_QUEUE = "{{cluster_queue}}"


def panel_group(gpu_resource: str = GPU_RESOURCE) -> PanelGroup:
    """The fleet dashboard's row: pending and admitted workloads, quota use, waiting time per queue.
    `gpu_resource`: the GPU resource the ClusterQueues cover (stacks/addons.py gpu_resource: a MIG
    slice type nvidia.com/mig-<profile> under the mixed strategy), the one Kueue reports quota in."""
    gpu = f'resource="{gpu_resource}"'
    return PanelGroup(TITLE, (
        Panel("Pending workloads", (
            (f'sum by (cluster_queue) ({PENDING}{{status="active"}})', "waiting " + _PER_QUEUE),
            (f'sum by (cluster_queue) ({PENDING}{{status="inadmissible"}})', "inadmissible " + _PER_QUEUE),
        ), "short", "Workloads waiting for quota (active) and those Kueue cannot admit as things are."),
        Panel("Admitted workloads", ((f"sum by (cluster_queue) ({ADMITTED_ACTIVE})", _PER_QUEUE),), "short",
              "Admitted and not finished, per ClusterQueue."),
        Panel("GPU quota used", ((
            # A nominal of 0 (a team that only borrows) has no ratio: filtered out, not drawn as +Inf or NaN.
            f"sum by (cluster_queue, flavor) ({USAGE}{{{gpu}}}) "
            f"/ on (cluster_queue, flavor) (sum by (cluster_queue, flavor) ({NOMINAL}{{{gpu}}}) > 0)",
            _PER_QUEUE + " {{flavor}}"),), "percentunit",
              "GPUs in use over the nominal quota, per ClusterQueue and flavor (above 1: borrowing from the cohort; "
              "a queue with no nominal GPUs is left out)."),
        Panel("Time waiting for admission (p90)", ((
            f"histogram_quantile(0.9, sum by (cluster_queue, le) (rate({WAIT_TIME}_bucket[1h])))", _PER_QUEUE),),
              "s", "90th percentile of the time from a workload's creation to its admission, over the last hour."),
    ))
