"""NodeJoin: one host joining the cluster, with a token minted for it at join time.

  token (on the control plane): `kubeadm token create --ttl 15m`, a secret output
  join  (on the host): kubeadm join with a JoinConfiguration filled from the token on stdin;
        delete = `kubeadm reset -f`
  ready (on the control plane): wait for the node to be Ready; delete = drain and delete the
        node, which therefore runs before the host is reset.

All three are replaced delete-before-replace (their triggers include the control plane's init, so
a rebuilt cluster re-joins every node): the old node is drained and reset before it joins again;
create-before-delete would report "already joined" and then reset the freshly joined node.
Changing the CIDRs, the endpoint or the first control plane rebuilds the cluster (control_plane.py).

A new kubernetesVersion or, on a worker whose driver node prep installs, a new driver branch is an
update of all three, each running its `update` (upgrade.py): the token step drains the node from
the control plane (holding one of maxUnavailable slots), the join step upgrades it on the node
(`kubeadm upgrade node`, kubelet and kubectl; the driver and a reboot), the ready step, which reads
the join's report on stdin, waits for the node and uncordons it.

Because every join mints its own short-lived token, a worker added months later joins like the
first ones did (no 24-hour token to renew by hand).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_command import remote

from components import versions
from components.lab import kubeadm, scripts, ssh
from components.lab.control_plane import ControlPlane
from components.lab.upgrade import UpgradePolicy
from config.lab import Bastion, Host, NvidiaDriver, Role


@dataclass(frozen=True)
class NodeJoinArgs:
    cluster: kubeadm.KubeadmSettings
    host: Host
    control_plane: ControlPlane
    private_key: pulumi.Output[str]
    prepared: list[pulumi.Resource]  # NodePrep.done of this host
    network: list[pulumi.Resource]  # the CNI: nodes are Ready only once it runs
    bastion: Bastion | None = None
    upgrade: UpgradePolicy = UpgradePolicy()
    # A worker's driver that node prep installs: upgraded here, drained (a control plane's
    # driver is upgraded by its NodePrep, which drains itself).
    driver: NvidiaDriver | None = None


class NodeJoin(pulumi.ComponentResource):
    ready: remote.Command

    def __init__(self, name: str, args: NodeJoinArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:NodeJoin", name, None, opts)
        host, cp = args.host, args.control_plane
        is_cp = host.role is Role.CONTROL_PLANE
        # Re-join when the host or the cluster it joins is replaced.
        triggers = [host.name, str(host.address), cp.init.id]
        version = args.cluster.kubernetes_version
        driver = (args.driver.branch, args.driver.version) if args.driver is not None and not is_cp else None
        token = remote.Command(
            f"{name}-token",
            connection=cp.connection,
            create=scripts.as_root(scripts.mint_join_token(host.name, control_plane=is_cp)),
            # An upgrade: drain the node first (the token is not minted again).
            update=scripts.as_root(scripts.node_upgrade_drain(
                host.name, version, control_plane=is_cp, driver=driver, slots=args.upgrade.max_unavailable,
                slot_tries=args.upgrade.slot_tries,
            )),
            # No delete: the token expires 15 minutes after it is minted.
            logging=remote.Logging.NONE,
            triggers=triggers,
            # Minted only once this host is prepared, so a long driver install cannot eat the
            # token's 15 minutes before the join uses it.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[cp.init, *args.prepared],
                additional_secret_outputs=["stdout"],
                delete_before_replace=True,
            ),
        )
        join_stdin: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.concat(token.stdout, "\n", kubeadm.join_config_template(args.cluster, host))
        )
        join = remote.Command(
            f"{name}-join",
            connection=ssh.connection(host, args.private_key, args.bastion),
            create=scripts.as_root(scripts.kubeadm_join()),
            update=scripts.as_root(scripts.node_upgrade(host.name, version, versions.KUBE_PACKAGE_REVISION, driver)),
            delete=scripts.as_root(scripts.kubeadm_reset()),
            stdin=join_stdin,
            logging=remote.Logging.STDERR,
            triggers=triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[token, *args.prepared], delete_before_replace=True),
        )
        self.ready = remote.Command(
            f"{name}-ready",
            connection=cp.connection,
            create=scripts.as_root(scripts.node_ready(host.name)),
            update=scripts.as_root(scripts.node_upgrade_done(host.name, version, driver, host.gpus if driver else 0)),
            delete=scripts.as_root(scripts.node_drain(host.name)),
            # What the join step reported: after an upgrade, the reboot to wait for.
            stdin=join.stdout,
            triggers=triggers,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[join, *args.network], delete_before_replace=True),
        )
        self.register_outputs({"node": host.name})
