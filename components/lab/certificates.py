"""The certificates kubeadm issued on every control plane: checked on `up`, renewed before they
lapse, one control plane at a time, and watched between `up` runs by an expiry metric.

kubeadm's leaf and client certificates are valid for one year, issued per control plane (each
has its own API server serving certificate, its etcd member's server and peer certificates, its
kubeconfig files); when they lapse the API server refuses its own components, an etcd member its
peers, and the Kubernetes provider the exported kubeconfig (kubeadm renews them only during
`kubeadm upgrade`, on the host it runs on). Once per check period (stacks/lab.py passes the ISO
week: the script's text carries it, and a changed script is a Pulumi update that runs it again),
the check on each control plane finds that host's earliest expiry; within RENEW_WITHIN_DAYS it
runs `kubeadm certs renew all`, restarts the host's static pods (kube-vip's too: it reads admin.conf
once) and waits until that host's API server is ready and its etcd member healthy
(scripts.certificates_check_renew).

One at a time: the checks form one chain in the `up`'s dependency graph (the first control plane's,
then each joined one's after the one before it and after its own join), not a lock on the hosts
nor a per-host time offset: they run only inside `up`, which Pulumi already runs once at a time per
stack, and a chain both orders them and stops the rest when one host does not come back healthy (a
lock would let the next host go on after a failure; an offset only guesses how long a restart
takes). A host's check also refuses to restart while another control plane's etcd member is
unhealthy, which the chain cannot see (a member down for another reason): two members down at once
could cost etcd its quorum.

The first control plane's check runs between its init and the admin kubeconfig read that feeds the
Kubernetes provider (ControlPlane): a renewal there changes its output and so the admin kubeconfig
read back, so the provider and the `kubeconfig` output always hold a valid client certificate.

The expiry metric: on every control plane an hourly cron job (host_steps/cluster/certificate_expiry.sh)
writes when each certificate under /etc/kubernetes/pki and each kubeconfig client certificate
expires, as node-exporter textfile metrics beside the etcd snapshots' (TEXTFILE_DIR);
components/monitoring/certificates.py alerts on them (30 days: the renewal window, so a warning is
answered by the next `up`; 7 days: critical).

Does not manage: the CAs (ten years; rotating them is a manual kubeadm procedure; the metric shows
them), kubelet certificates (the kubelet rotates its client certificate itself, its serving
certificate through kubelet-csr-approver: components/lab/kubelet_serving.py).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_command import remote

from components.lab import scripts
from components.lab.etcd_backup import TEXTFILE_DIR, cron_entry, here_document
from components.lab.host_steps import fill
from config.lab import Host

# Renew when the first certificate expires within this many days: the alert's window too, so a
# firing alert is answered by the next `up`.
RENEW_WITHIN_DAYS = 30
EXPIRY_SCRIPT = "/usr/local/sbin/gpu-cluster-certificate-expiry"
EXPIRY_CRON_FILE = "/etc/cron.d/gpu-cluster-certificate-expiry"
# Hourly, at a minute of its own (the etcd snapshots' default is 23, the defragmentation's 41): the
# metric follows a renewal by hand within the hour (the renewal step refreshes it at once).
EXPIRY_SCHEDULE = "7 * * * *"


def check_period(today: datetime.date) -> str:
    """The ISO week of `today`, e.g. "2026-W48": at most one certificate check a week of `up` runs."""
    year, week, _ = today.isocalendar()
    return f"{year}-W{week:02d}"


def renewal_script(period: str, host: Host, control_planes: Sequence[Host]) -> str:
    """The check-and-renew script of control plane `host`."""
    return scripts.certificates_check_renew(period, RENEW_WITHIN_DAYS, host.name, str(host.address),
                                            [(h.name, str(h.address)) for h in control_planes], EXPIRY_SCRIPT)


def certificate_check(name: str, connection: remote.ConnectionArgs, after: Sequence[pulumi.Resource],
                      script: str, triggers: Sequence[pulumi.Input[str]], parent: pulumi.Resource) -> remote.Command:
    """The check-and-renew step on one control plane; its stdout is one JSON line
    (expires, certificate, caExpires, renewed)."""
    return remote.Command(
        name,
        connection=connection,
        create=scripts.as_root(script),
        # Runs again for a rebuilt cluster or a re-joined host; no delete: the certificates go with them.
        triggers=list(triggers),
        # Delete-first like every lab step (there is no delete: nothing to order, one rule to read).
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after), delete_before_replace=True),
    )


def expiry_script(node: str) -> str:
    """The script cron runs (host_steps/cluster/certificate_expiry.sh): complete, with its own strict mode."""
    body = fill("cluster/certificate_expiry.sh", NODE=node, TEXTFILE_DIR=TEXTFILE_DIR,
                KUBECONFIGS=scripts._words(scripts.KUBEADM_KUBECONFIGS))  # noqa: SLF001 - the quoting of every script
    return "#!/usr/bin/env bash\n# generated by gpu-cluster: the certificate expiry metric\n" + body


def expiry_cron_file() -> str:
    return cron_entry("certificate expiry metric (docs/operations/certificates.md)", EXPIRY_SCHEDULE,
                      "gpu-cluster-certificate-expiry", EXPIRY_SCRIPT)


def expiry_install_script(node: str) -> str:
    return scripts._script(fill(  # noqa: SLF001 - the host scripts' common prelude
        "cluster/certificate_expiry_install.sh", SCRIPT_PATH=EXPIRY_SCRIPT, CRON_PATH=EXPIRY_CRON_FILE,
        EXPIRY_SCRIPT=here_document(expiry_script(node), "GPU_CLUSTER_CERTIFICATE_EXPIRY"),
        CRON_FILE=here_document(expiry_cron_file(), "GPU_CLUSTER_CERTIFICATE_EXPIRY_CRON")))


def expiry_remove_script() -> str:
    return scripts._script(fill("cluster/certificate_expiry_remove.sh", SCRIPT_PATH=EXPIRY_SCRIPT,  # noqa: SLF001
                                CRON_PATH=EXPIRY_CRON_FILE, TEXTFILE_DIR=TEXTFILE_DIR))


@dataclass(frozen=True)
class ControlPlaneCertificatesArgs:
    host: Host
    connection: remote.ConnectionArgs
    joined: pulumi.CustomResource  # the host's init or join: its certificates exist from then on
    # The renewal check, on a joined control plane: the period, every control plane, and the check
    # that runs before this one (the chain: one host at a time). None on the first control plane,
    # whose check ControlPlane holds.
    period: str | None = None
    control_planes: tuple[Host, ...] = ()
    previous: pulumi.Resource | None = None


class ControlPlaneCertificates(pulumi.ComponentResource):
    """Name it `<host>-certificates`: the expiry metric's step `-expiry`, a joined host's check `-check`."""

    check: remote.Command | None

    def __init__(self, name: str, args: ControlPlaneCertificatesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:ControlPlaneCertificates", name, None, opts)
        h = args.host
        self.check = None
        if args.period is not None:
            self.check = certificate_check(
                f"{name}-check", args.connection, [args.joined, *([args.previous] if args.previous else [])],
                renewal_script(args.period, h, args.control_planes), [args.joined.id], self)
        self.expiry = remote.Command(
            f"{name}-expiry",
            connection=args.connection,
            create=scripts.as_root(expiry_install_script(h.name)),
            update=scripts.as_root(expiry_install_script(h.name)),
            delete=scripts.as_root(expiry_remove_script()),
            triggers=[h.name, str(h.address)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.joined, *([self.check] if self.check else [])],
                                        delete_before_replace=True),
        )
        self.register_outputs({})


def on_every_control_plane(first_check: remote.Command, hosts: Sequence[tuple[Host, remote.ConnectionArgs,
                                                                                pulumi.CustomResource]],
                           period: str, spared: Callable[[Host], pulumi.ResourceOptions | None] = lambda h: None,
                           ) -> list[ControlPlaneCertificates]:
    """`hosts`: every control plane with its connection and its init or join, the entry point first.
    The expiry metric on each; the renewal check on each joined one, chained after the check before
    it (the first's, `first_check`). A gone host (hosts[].gone) keeps its steps as they are
    (`spared`: never connected to again) and is left out of the etcd members checked first."""
    control_planes = tuple(h for h, _, _ in hosts if not h.gone)
    previous: pulumi.Resource = first_check
    made = []
    for n, (host, connection, joined) in enumerate(hosts):
        if n == 0:
            args = ControlPlaneCertificatesArgs(host=host, connection=connection, joined=first_check)
        else:
            args = ControlPlaneCertificatesArgs(host=host, connection=connection, joined=joined, period=period,
                                                control_planes=control_planes, previous=previous)
        certs = ControlPlaneCertificates(f"{host.name}-certificates", args, opts=spared(host))
        previous = certs.check or previous
        made.append(certs)
    return made
