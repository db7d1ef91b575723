"""etcd's health alerts on lab: the pinned kube-prometheus-stack's own `etcd` rule group (on by
default: defaultRules.rules.etcd, over the kubeEtcd scrape of the etcd static pods on port 2381,
which kubeadm binds on the node's addresses: components/lab/kubeadm.py ETCD_METRICS_URL), not a
second rule for the same thing here. What this adds is where a human reads what to do: each alert
below gets this program's `runbook` (its docs/runbook.md section's remedy) and `runbook_url` (that
section) through the chart's per-alert annotations (defaultRules.additionalRuleAnnotations), which
replace the chart's link to the upstream runbooks.

The chart's names are kept (lower-case `etcd...`): Alertmanager routes and silences use them.
"""

from __future__ import annotations

from typing import Any

from components.monitoring.runbook import remedy, url

# The chart's alerts for what a lab operator must see: no leader, a member down, frequent leader
# changes, a database near its quota, slow WAL fsync, slow backend commits.
ALERTS = ("etcdNoLeader", "etcdMembersDown", "etcdHighNumberOfLeaderChanges", "etcdDatabaseQuotaLowSpace",
          "etcdHighFsyncDurations", "etcdHighCommitDurations")


def chart_values() -> dict[str, Any]:
    """kube-prometheus-stack's `defaultRules` keys: the runbook annotations of ALERTS."""
    return {"additionalRuleAnnotations": {a: {"runbook": remedy(a), "runbook_url": url(a)} for a in ALERTS}}
