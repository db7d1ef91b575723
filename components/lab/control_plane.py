"""ControlPlane: `kubeadm init` on the first control-plane host, its admin kubeconfig read back as
a secret, and the explicit Kubernetes provider every in-cluster component receives.

The init step's triggers are the cluster's identity: the host `kubeadm init` ran on (name,
address, as the stack output `deployed` recorded it, even once that host left), the API endpoint
and the pod and service ranges. Changing one REBUILDS THE CLUSTER: `kubeadm reset`, a
fresh `kubeadm init`, every node re-joined; workloads and everything in etcd are lost. The config
refuses that unless allowRebuild is set (config/lab.py, change_problems), and the init is
`protect`ed unless it is, so Pulumi refuses to replace or delete it too (docs/operations/upgrading.md). A
replacement is delete-before-replace: the old cluster is reset before the new one is initialised.

A new kubernetesVersion (or any other change of the kubeadm config, its stdin) is an update: the
init's `update` upgrades in place (an etcd snapshot kept on the host, `kubeadm upgrade apply`, this
node's kubelet; upgrade.py). The kubeconfig read's triggers are the init's id (which an update
keeps) and the certificate check's result, so the provider and everything in the cluster stay as
they are until a renewal gives admin.conf a new client certificate.

Certificates: checked once per period and renewed within 30 days of expiry before the admin
kubeconfig is read (components/lab/certificates.py).

No special first server (issue 34): this component runs on the entry point, the first control
plane in config order that is not gone (LabStack.entry_point). When that host is removed or marked
gone, the next one takes over in the same `up`: these steps' connection moves to it (an update: the
upgrade script, the certificate check and the kubeconfig read run there and find the cluster as it
is), and the old one is drained, removed from etcd and, alive, reset like any other control plane
(init_host_reset: the init host has no join whose delete would reset it).

More than one control plane (docs/operations/high-availability.md): on a new cluster this is where
`kubeadm init --upload-certs` runs; the others join as control planes (node_join.py) through the
one API endpoint, kube-vip's virtual IP (kubeVip: its static pod is written here before init,
components/lab/kube_vip.py) or the user's load balancer (controlPlaneEndpoint).

Does not manage: the external load balancer behind controlPlaneEndpoint (bring your own; with
kubeVip the program serves the address itself), etcd backups (components/lab/etcd_backup.py keeps
scheduled snapshots on every control plane besides the snapshot before each upgrade), the kubeconfig of a control plane other than the entry point (the provider talks to the API
through the endpoint, whichever control plane answers), or re-reading admin.conf after
`kubeadm upgrade apply` renews its certificate (the one read at init stays valid until its own
expiry, a year after init).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_command import remote

from components import versions
from components.lab import kubeadm, scripts, ssh
from components.lab.certificates import certificate_check, renewal_script
from components.lab.etcd_backup import S3_CLIENT_PATH
from components.lab.kube_vip import kube_vip_step
from components.lab.upgrade import UpgradePolicy
from config.control_planes import KubeVip
from config.lab import Bastion, Host


@dataclass(frozen=True)
class ControlPlaneArgs:
    host: Host  # the entry point (LabStack.entry_point): kubeadm init runs there on a new cluster
    cluster: kubeadm.KubeadmSettings
    private_key: pulumi.Output[str]
    prepared: list[pulumi.Resource]  # NodePrep.done of that host
    bastion: Bastion | None = None
    # The current certificate check period (certificates.check_period): the check runs once in each.
    certificate_check_period: str = ""
    upgrade: UpgradePolicy = UpgradePolicy()
    # Refuse to replace or delete the init (and with it the cluster); off only with allowRebuild.
    protect: bool = True
    # kubeVip: kube-vip's static pod, written before kubeadm init (kube_vip.py).
    kube_vip: KubeVip | None = None
    # (name, address) of the host kubeadm init ran on (LabStack.init_identity); default: `host`.
    init_host: tuple[str, str] | None = None
    # Every control plane, this one among them: the certificate renewal checks their etcd members first.
    control_planes: tuple[Host, ...] = ()
    # etcdBackup.s3 is set: the snapshot before an upgrade is uploaded too, before kubeadm runs.
    etcd_s3: bool = False


class ControlPlane(pulumi.ComponentResource):
    name: str  # the component's name: its steps' names start with it
    init: remote.Command
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider
    etcd_snapshot: pulumi.Output[str | None]  # where the last upgrade's etcd snapshot is kept

    def __init__(self, name: str, args: ControlPlaneArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:ControlPlane", name, None, opts)
        self.name = name
        first = args.host
        self.host = first
        self.connection = ssh.connection(first, args.private_key, args.bastion)
        cluster = args.cluster
        init_config = kubeadm.init_config(cluster, first)
        prepared = list(args.prepared)
        if args.kube_vip is not None:
            # Before init: init waits for the API at the VIP, which kube-vip puts up.
            prepared.append(kube_vip_step(name, self.connection, args.kube_vip, self, list(args.prepared)))
        self.init = remote.Command(
            f"{name}-init",
            connection=self.connection,
            create=scripts.as_root(scripts.kubeadm_init()),
            update=scripts.as_root(scripts.kubeadm_upgrade_apply(
                first.name, cluster.kubernetes_version, versions.KUBE_PACKAGE_REVISION, args.upgrade.slot_tries,
                s3_client=S3_CLIENT_PATH if args.etcd_s3 else "",
            )),
            delete=scripts.as_root(scripts.kubeadm_reset()),
            # The kubeadm config, version included: a change is an update (upgrade.py).
            stdin=init_config,
            # The cluster's identity, fixed at kubeadm init: a change needs a new cluster. The init
            # host stays in it as recorded when it leaves (issue 34: the same values as before for
            # every deployed stack, so upgrading the program replaces nothing); the entry point
            # moving to another control plane is an update of the connection, whose update script
            # finds the version in place and changes nothing (kubeadm_upgrade_apply.sh).
            triggers=[*(args.init_host or (first.name, str(first.address))), cluster.api_endpoint,
                      str(cluster.pod_cidr), str(cluster.service_cidr)],
            # Reset the old cluster before initialising the new one: create-before-delete would
            # find admin.conf ("already initialised") and then the old delete would reset it.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=prepared, delete_before_replace=True, protect=args.protect
            ),
        )
        # Certificates: checked once per period and renewed within 30 days of their expiry.
        self.certificates_check = certificate_check(
            f"{name}-certificates", self.connection, [self.init],
            renewal_script(args.certificate_check_period, first, args.control_planes or (first,)), [self.init.id], self
        )
        self.certificates: pulumi.Output[dict[str, object]] = self.certificates_check.stdout.apply(json.loads)
        self.etcd_snapshot = self.init.stdout.apply(_snapshot_path)
        read = remote.Command(
            f"{name}-kubeconfig",
            connection=self.connection,
            create=scripts.as_root(scripts.read_admin_kubeconfig()),
            logging=remote.Logging.NONE,
            # A renewal changes the check's output: admin.conf, renewed with the rest, is read again.
            triggers=[self.init.id, self.certificates_check.stdout],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.init, self.certificates_check],
                additional_secret_outputs=["stdout"],
                delete_before_replace=True,
            ),
        )
        self.kubeconfig = pulumi.Output.secret(read.stdout)
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"endpoint": cluster.api_endpoint, "kubeconfig": self.kubeconfig,
                               "certificates": self.certificates, "etcdSnapshot": self.etcd_snapshot})


def _snapshot_path(stdout: str | None) -> str | None:
    """The snapshot the init's update reported last (`etcd snapshot: <path>`); None before any upgrade."""
    found = [line.removeprefix("etcd snapshot: ") for line in (stdout or "").splitlines()
             if line.startswith("etcd snapshot: ")]
    return found[-1] if found else None


def init_host_reset(cp: ControlPlane, host: Host, private_key: pulumi.Output[str], bastion: Bastion | None,
                    opts: pulumi.ResourceOptions | None = None) -> remote.Command:
    """On the host `kubeadm init` ran on, while the config lists it: nothing at create (no session
    opens), `kubeadm reset` at delete. Every other host is reset by its join step's delete when it
    leaves the config (node_join.py); the init host has no join, and its init step stays (it moves to
    the next entry point), so without this step a control plane removed alive would keep its
    kubelet, static pods and certificates. Removed resources are deleted after every other step, so
    the drain step has removed its etcd member and deleted its Node first. A gone host's step is
    retained on delete (stacks/lab.py gives it spare_gone_host): nothing connects to a dead host."""
    return remote.Command(
        f"{cp.name}-init-host-reset",
        connection=ssh.connection(host, private_key, bastion),
        delete=scripts.as_root(scripts.kubeadm_reset()),
        triggers=[host.name, str(host.address)],
        opts=pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=cp, depends_on=[cp.init], delete_before_replace=True),
                                          opts),
    )
