"""The certificates kubeadm issued: checked on `up`, renewed before they lapse (ControlPlane runs
this step between its init and the admin kubeconfig read that feeds the Kubernetes provider).

kubeadm's leaf and client certificates are valid for one year; when they lapse the API server
refuses its own components, the Kubernetes provider and the exported kubeconfig (kubeadm renews
them only during `kubeadm upgrade`). Once per check period (stacks/lab.py passes the ISO week:
the script's text carries it, and a changed script is a Pulumi update that runs it again), the
check finds the earliest expiry on the first control plane; within RENEW_WITHIN_DAYS it runs
`kubeadm certs renew all` and restarts the control plane's static pods
(scripts.certificates_check_renew). A renewal changes the check's output, and with it the admin
kubeconfig read back (a trigger): the provider and the `kubeconfig` output always hold a valid
client certificate. Monitoring alerts on the same window (components/monitoring/alerts.py,
ClusterCertificatesExpiringSoon).

Does not manage: the CAs (ten years; rotating them is a manual kubeadm procedure), kubelet
certificates (the kubelet rotates its client certificate itself), further control-plane hosts
(each needs `kubeadm certs renew all`: docs/operations/certificates.md).
"""

from __future__ import annotations

import datetime

import pulumi
from pulumi_command import remote

from components.lab import scripts

# Renew when the first certificate expires within this many days: the alert's window too, so a
# firing alert is answered by the next `up`.
RENEW_WITHIN_DAYS = 30


def check_period(today: datetime.date) -> str:
    """The ISO week of `today`, e.g. "2026-W48": at most one certificate check a week of `up` runs."""
    year, week, _ = today.isocalendar()
    return f"{year}-W{week:02d}"


def certificate_check(name: str, connection: remote.ConnectionArgs, initialised: remote.Command, period: str,
                      parent: pulumi.Resource) -> remote.Command:
    """The check-and-renew step on the first control plane; its stdout is one JSON line
    (expires, certificate, caExpires, renewed)."""
    return remote.Command(
        name,
        connection=connection,
        create=scripts.as_root(scripts.certificates_check_renew(period, RENEW_WITHIN_DAYS)),
        # Runs again for a rebuilt cluster; no delete: the certificates go with the cluster.
        triggers=[initialised.id],
        # Delete-first like every lab step (there is no delete: nothing to order, one rule to read).
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[initialised], delete_before_replace=True),
    )
