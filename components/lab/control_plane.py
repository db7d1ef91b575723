"""ControlPlane: `kubeadm init` on the first control-plane host, its admin kubeconfig read back as
a secret, and the explicit Kubernetes provider every in-cluster component receives.

Changing kubernetesVersion, podCidr, serviceCidr or controlPlaneEndpoint changes the kubeadm config
and therefore REBUILDS THE CLUSTER: `kubeadm reset` on the control plane, a fresh `kubeadm init`,
every node re-joined; workloads and everything stored in etcd are lost. The init, the kubeconfig
read (and NodeJoin's steps) are replaced delete-before-replace: the old cluster is reset before the
new one is initialised, never after (which would wipe the cluster just created).

Certificates: checked once per period and renewed within 30 days of expiry before the admin
kubeconfig is read (components/lab/certificates.py).

Does not manage: an external load balancer for controlPlaneEndpoint (bring your own when there
is more than one control plane), etcd backups, or `kubeadm upgrade` between Kubernetes minors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_command import remote

from components.lab import kubeadm, scripts, ssh
from components.lab.certificates import certificate_check
from config.lab import Bastion, Host


@dataclass(frozen=True)
class ControlPlaneArgs:
    host: Host  # the first control-plane host: kubeadm init runs there
    cluster: kubeadm.KubeadmSettings
    private_key: pulumi.Output[str]
    prepared: list[pulumi.Resource]  # NodePrep.done of that host
    bastion: Bastion | None = None
    # The current certificate check period (certificates.check_period): the check runs once in each.
    certificate_check_period: str = ""


class ControlPlane(pulumi.ComponentResource):
    init: remote.Command
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(self, name: str, args: ControlPlaneArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:ControlPlane", name, None, opts)
        first = args.host
        self.host = first
        self.connection = ssh.connection(first, args.private_key, args.bastion)
        init_config = kubeadm.init_config(args.cluster, first)
        self.init = remote.Command(
            f"{name}-init",
            connection=self.connection,
            create=scripts.as_root(scripts.kubeadm_init()),
            delete=scripts.as_root(scripts.kubeadm_reset()),
            stdin=init_config,
            # A new version, CIDR or endpoint means a new cluster: re-init rather than edit.
            triggers=[first.name, str(first.address), init_config],
            # Reset the old cluster before initialising the new one: create-before-delete would
            # find admin.conf ("already initialised") and then the old delete would reset it.
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.prepared, delete_before_replace=True),
        )
        # Certificates: checked once per period and renewed within 30 days of their expiry.
        self.certificates_check = certificate_check(
            f"{name}-certificates", self.connection, self.init, args.certificate_check_period, self
        )
        self.certificates: pulumi.Output[dict[str, object]] = self.certificates_check.stdout.apply(json.loads)
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
        self.register_outputs({"endpoint": args.cluster.api_endpoint, "kubeconfig": self.kubeconfig,
                               "certificates": self.certificates})
