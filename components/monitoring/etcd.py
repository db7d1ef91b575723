"""etcd's health alerts on lab: the pinned kube-prometheus-stack's own `etcd` rule group (on by
default: defaultRules.rules.etcd, over the kubeEtcd scrape of the etcd static pods on port 2381,
which kubeadm binds on the node's addresses: components/lab/kubeadm.py ETCD_METRICS_URL), not a
second rule for the same thing here. What this adds is where a human reads what to do: each alert
below gets this program's `runbook` (its docs/runbook.md section's remedy) and `runbook_url` (that
section) through the chart's per-alert annotations (defaultRules.additionalRuleAnnotations), which
replace the chart's link to the upstream runbooks.

The chart's names are kept (lower-case `etcd...`): Alertmanager routes and silences use them.

Ours, in GROUP: EtcdDefragFailed, over the metrics each scheduled defragmentation run writes on its
control plane (components/lab/etcd_defrag.py; node-exporter's textfile collector reads them, as it
reads the snapshots': components/monitoring/etcd_backup.py).
"""

from __future__ import annotations

from typing import Any

from components.monitoring.alerts import _alert
from components.monitoring.runbook import remedy, url

GROUP = "gpu-cluster.etcd"
DEFRAG_LAST_RUN_OK = "etcd_defrag_last_run_success"
DEFRAG_FAILED_ALERT = "EtcdDefragFailed"

# The chart's alerts for what a lab operator must see: no leader, a member down, frequent leader
# changes, a database near its quota, slow WAL fsync, slow backend commits.
ALERTS = ("etcdNoLeader", "etcdMembersDown", "etcdHighNumberOfLeaderChanges", "etcdDatabaseQuotaLowSpace",
          "etcdHighFsyncDurations", "etcdHighCommitDurations")


def chart_values() -> dict[str, Any]:
    """kube-prometheus-stack's `defaultRules` keys: the runbook annotations of ALERTS."""
    return {"additionalRuleAnnotations": {a: {"runbook": remedy(a), "runbook_url": url(a)} for a in ALERTS}}


def rule_group() -> dict[str, Any]:
    """EtcdDefragFailed while a control plane's last scheduled defragmentation refused (a member was
    down) or failed: it stays until a run succeeds (the next week's, or one started by hand)."""
    return {"name": GROUP, "rules": [
        _alert(
            DEFRAG_FAILED_ALERT, f"{DEFRAG_LAST_RUN_OK} == 0", "0m", "warning",
            "The scheduled etcd defragmentation refused or failed",
            "The last scheduled etcd defragmentation on {{ $labels.etcd_member }} refused (a member was unhealthy) "
            "or failed; etcd's database keeps the pages compaction freed until a run succeeds.",
        ),
    ]}
