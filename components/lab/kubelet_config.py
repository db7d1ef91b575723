"""KubeletConfigRollout: the cluster's kubelet configuration brought to what the program sets, on a
cluster initialised by an older version of this program too, then rolled out to every node, one
at a time.

Why: kubeadm copies the KubeletConfiguration of the init file into the ConfigMap
kube-system/kubelet-config at `kubeadm init` only; every join and `kubeadm upgrade node` reads that
copy. A field the program added later (serverTLSBootstrap with kubelet-csr-approver,
protectKernelDefaults with node prep's kernel settings) never reaches a cluster initialised before
it. kubeadm's "Reconfiguring a kubeadm cluster" says how to move one: edit the ConfigMap, then on
each node `kubeadm upgrade node phase kubelet-config` and restart the kubelet. These steps do that:

  kubelet-config-configmap (on the entry point, with admin.conf) merges the program's fields
                          (kubeadm.kubelet_configuration) into the ConfigMap's document, keeping
                          every other field (a user's own), and writes it only when one differs
                          (host_steps/cluster/kubelet_config_merge.sh, kubelet_config_merge.py);
  kubelet-config-node-<host> (on each host not gone) checks the kernel settings protectKernelDefaults
                          makes the kubelet check, writes the kubelet's file from the ConfigMap and,
                          only when that changed it, restarts the kubelet and waits until it is
                          healthy and its Node Ready, bounded; a kubelet that does not come back
                          gets its old file again and its step fails (kubelet_config_node.sh).

One node at a time: the node steps stand side by side in the `up`'s graph (a chain would make every
`up` of a new cluster wait for N sessions in a row, tests/stacks/test_stacks.py), and a node whose
file changed takes upgrade slot 0 (lib/upgrade_helpers.sh, the slots kubernetesVersion upgrades
take) before it restarts its kubelet and frees it once its Node is Ready: one kubelet restarts at a
time, never beside a node that upgrades. A joined node takes the slot with the node upgrader's token
on stdin, as its upgrade steps do.

Idempotent: on a cluster already right the merge writes nothing and no kubelet restarts. The steps
run when created and again when the fields change (their triggers) or a host re-joins; no delete:
the configuration stays with the cluster. A gone host (hosts[].gone) gets no step.

Does not manage: fields a user set that the program also sets (the program's value wins, as in a
new cluster's init file), a KubeletConfiguration given per node (kubeadm patches), kubelet flags
(kubeletExtraArgs live in each node's /var/lib/kubelet/kubeadm-flags.env, not in the ConfigMap).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
from pulumi_command import remote

from components.lab import kubeadm, scripts
from components.lab.etcd_backup import here_document
from components.lab.host_steps import fill
from config.lab import Host

MERGE_SOURCE = Path(__file__).resolve().parent / "kubelet_config_merge.py"
MERGE_TRIES = 5  # reads and writes of the ConfigMap, each refused only when someone changed it in between
# The kubelet's health after its restart: up to 5 minutes, then the Node's Ready (kubectl wait, 5 minutes).
HEALTH_TRIES = 60
HEALTH_INTERVAL = 5


def fields(cluster: kubeadm.KubeadmSettings) -> dict[str, Any]:
    """The fields the program sets in every node's KubeletConfiguration (its kind and version aside)."""
    return {k: v for k, v in kubeadm.kubelet_configuration(cluster).items() if k not in ("apiVersion", "kind")}


def fields_json(cluster: kubeadm.KubeadmSettings) -> str:
    return json.dumps(fields(cluster), sort_keys=True, separators=(",", ":"))


def merge_script(cluster: kubeadm.KubeadmSettings) -> str:
    program = MERGE_SOURCE.read_text(encoding="utf-8")
    return scripts._script(fill(  # noqa: SLF001 - the host scripts' common prelude
        "cluster/kubelet_config_merge.sh", MERGE=here_document(program, "GPU_CLUSTER_KUBELET_CONFIG_MERGE"),
        FIELDS=fields_json(cluster), TRIES=MERGE_TRIES))


def node_script(node: str, slot_tries: int) -> str:
    """With the upgrade helpers (lib/upgrade_helpers.sh): the slots, the node upgrader's credential."""
    tunables = [f"{name}={value}" for name, value in kubeadm.KUBELET_KERNEL_TUNABLES]
    return scripts._upgrade_script(fill(  # noqa: SLF001 - the host scripts' common prelude
        "cluster/kubelet_config_node.sh", NODE=node, TUNABLES=scripts._words(tunables),  # noqa: SLF001
        SLOT_TRIES=slot_tries, TRIES=HEALTH_TRIES, INTERVAL=HEALTH_INTERVAL))


@dataclass(frozen=True)
class KubeletConfigRolloutArgs:
    cluster: kubeadm.KubeadmSettings
    entry: remote.ConnectionArgs  # the entry point's connection (ControlPlane.connection)
    # (host, its connection, its init or join step) per host not gone.
    hosts: Sequence[tuple[Host, remote.ConnectionArgs, pulumi.CustomResource]]
    upgrader_token: pulumi.Output[str]  # Membership.upgrader_token: a joined node's slot and its wait
    slot_tries: int  # UpgradePolicy.slot_tries: how long a node waits for the one slot (10 s each)
    # The entry point's init or join and the serving-certificate approver (before any kubelet asks it).
    after: Sequence[pulumi.Resource] = ()


class KubeletConfigRollout(pulumi.ComponentResource):
    def __init__(self, name: str, args: KubeletConfigRolloutArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:KubeletConfigRollout", name, None, opts)
        wanted = fields_json(args.cluster)
        merge = remote.Command(
            f"{name}-configmap", connection=args.entry, create=scripts.as_root(merge_script(args.cluster)),
            triggers=[wanted],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.after), delete_before_replace=True))
        upgrader: pulumi.Output[str] = pulumi.Output.secret(pulumi.Output.concat("upgrader-token: ", args.upgrader_token, "\n"))
        # Side by side in the graph (an `up` waits for the slowest node, not for their sum); the
        # restarts go one at a time through the slot each takes on the host.
        for host, connection, joined in args.hosts:
            remote.Command(
                f"{name}-node-{host.name}", connection=connection,
                create=scripts.as_root(node_script(host.name, args.slot_tries)), stdin=upgrader,
                triggers=[wanted, host.name, str(host.address), joined.id],  # again on a re-joined host
                opts=pulumi.ResourceOptions(parent=self, depends_on=[joined, merge], delete_before_replace=True))
        self.register_outputs({})
