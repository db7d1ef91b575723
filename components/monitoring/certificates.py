"""The monitoring side of the lab's control-plane certificates (components/lab/certificates.py):
node-exporter's textfile collector reads what the hourly expiry job writes on every control plane
(the directory etcd_backup.node_exporter_values points it at), and the rule group GROUP alerts
before a certificate lapses, and when a control plane reports nothing.

Metrics, per control plane (label host, the node name):
  gpu_cluster_certificate_expiry_timestamp_seconds{host, certificate}  notAfter of each certificate
      under /etc/kubernetes/pki (path below pki/, e.g. etcd/peer.crt; the CAs too) and of each
      kubeconfig client certificate (admin.conf, ...), in seconds since the epoch: a timestamp, so a
      value stays true between runs and the alert needs no knowledge of the schedule
  gpu_cluster_certificate_unreadable{host}  certificates the job could not read

Beside ClusterCertificatesExpiringSoon (components/monitoring/alerts.py): that one sees only the
client certificates the API server is shown; this one sees every certificate on every control plane,
etcd's peer and server certificates and the API server's own serving certificate among them.
"""

from __future__ import annotations

from typing import Any

from components.lab.certificates import RENEW_WITHIN_DAYS
from components.monitoring.alerts import _alert

GROUP = "gpu-cluster.certificates"
EXPIRY = "gpu_cluster_certificate_expiry_timestamp_seconds"
UNREADABLE = "gpu_cluster_certificate_unreadable"
EXPIRING_ALERT = "ControlPlaneCertificateExpiring"
CRITICAL_ALERT = "ControlPlaneCertificateExpiryCritical"
MISSING_ALERT = "ControlPlaneCertificateMetricsMissing"
UNREADABLE_ALERT = "ControlPlaneCertificateUnreadable"
DAY = 86400
# Warning within the renewal window (the next `up` renews), critical within a week (a week of
# weekends and holidays is what is left to act before the API server or an etcd peer is refused).
WARNING_DAYS = RENEW_WITHIN_DAYS
CRITICAL_DAYS = 7
# The job runs hourly (EXPIRY_SCHEDULE; a test holds the two together): three missed runs is no
# longer a late one.
MISSING_FOR = "3h"


def rule_group() -> dict[str, Any]:
    where = "{{ $labels.certificate }} on {{ $labels.host }}"
    left = "{{ $value | humanizeDuration }}"
    return {"name": GROUP, "rules": [
        _alert(
            EXPIRING_ALERT, f"{EXPIRY} - time() < {WARNING_DAYS * DAY}", "1h", "warning",
            f"A control-plane certificate expires within {WARNING_DAYS} days",
            f"{where} expires in {left}; `pulumi up` renews it (within {WARNING_DAYS} days of expiry).",
        ),
        _alert(
            CRITICAL_ALERT, f"{EXPIRY} - time() < {CRITICAL_DAYS * DAY}", "10m", "critical",
            f"A control-plane certificate expires within {CRITICAL_DAYS} days",
            f"{where} expires in {left} (a negative time: it has expired); when it lapses the API server or "
            "an etcd member refuses the component that presents it.",
        ),
        _alert(
            MISSING_ALERT,
            f'count(kube_node_role{{role="control-plane"}}) > (count(count by (host) ({EXPIRY})) or vector(0))',
            MISSING_FOR, "warning",
            "A control plane reports no certificate expiry metrics",
            "Fewer control planes report certificate expiry metrics than there are control planes, for "
            f"{MISSING_FOR}: the expiry job is not installed or fails, or node-exporter does not read its directory.",
        ),
        _alert(
            UNREADABLE_ALERT, f"{UNREADABLE} > 0", "1h", "warning",
            "A control-plane certificate cannot be read",
            "{{ $value }} certificate(s) under /etc/kubernetes on {{ $labels.host }} could not be read by the "
            "expiry job: their expiry is not watched.",
        ),
    ]}
