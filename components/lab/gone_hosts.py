"""Hosts marked `hosts[].gone: true`: dead servers the cluster forgets without connecting to them.

Why: every host step is a pulumi-command `remote.Command` whose `delete` (kubeadm reset, purge
the packages, remove the export) runs over SSH on that host when the step leaves the program. On a
dead host that delete cannot connect, so the `up` that drops its steps fails, and with it every
change to the cluster (docs/runbook.md#a-control-plane-died).

What `gone` does, in two `pulumi up`s:
  1. with the host still listed and marked gone: a step on the entry point (the first control
     plane not gone, LabStack.entry_point)
     (`membership-remove-gone`, host_steps/cluster/remove_gone_hosts.sh) removes its etcd member
     by name and deletes its Node; and every remote command that connects to the gone host's
     address is registered with `retainOnDelete` and every input's change ignored
     (`spare_gone_host`), so this `up` runs none of its scripts (no update, no replacement: the
     inputs the engine compares stay those of the last `up`) and the state records retainOnDelete
     (stacks/lab.py gives the host's components this transformation);
  2. with the host deleted from `hosts`: its steps leave the program and Pulumi drops them from
     its state without running their delete (retainOnDelete: the engine skips the provider's
     Delete), so nothing tries to reach the dead host.
A pulumi-command `delete` cannot be made a no-op instead: changing the `delete` input is an update,
and pulumi-command's update runs the `update` (or `create`) script on the host.

Does not manage: a gone host's disks (reinstall it before it comes back, under a new name or as a
new entry without `gone`), more gone control planes than etcd's quorum allows (config refuses;
restore from a snapshot, docs/operations/etcd-backup.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pulumi
from pulumi_command import remote

from components import versions
from components.lab import scripts
from components.lab.etcd_tools import etcd_version
from components.lab.host_steps import Shell, fill
from config.lab import Host, Role

# remote.Command's inputs (pulumi-command v1.2.1 provider/pkg/provider/common/inputs.go and
# remote/command.go, as the engine names them): a gone host's steps ignore a change of any of them.
COMMAND_INPUTS = ("addPreviousOutputInEnv", "connection", "create", "delete", "environment", "logging", "stdin",
                  "triggers", "update")
COMMAND_TYPE = "command:remote:Command"
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def remove_gone_hosts_script(gone: Sequence[Host], kubernetes_minor: str) -> str:
    """The removal step's script (host_steps/cluster/remove_gone_hosts.sh) for these gone hosts."""
    for h in gone:
        if not _NODE_NAME.fullmatch(h.name):
            raise ValueError(f"not a node name: {h.name!r}")
    members = [h.name for h in gone if h.role is Role.CONTROL_PLANE]
    return scripts._script(fill(  # noqa: SLF001 - the host scripts' common prelude
        "cluster/remove_gone_hosts.sh", GONE_MEMBERS=Shell(" ".join(members)),
        GONE_NODES=Shell(" ".join(h.name for h in gone)), TOOLS_REPOSITORY=versions.ETCD_TOOLS_IMAGE_REPOSITORY,
        ETCD_VERSION=etcd_version(kubernetes_minor)))


def remove_gone_step(name: str, parent: pulumi.Resource, connection: remote.ConnectionArgs, gone: Sequence[Host],
                     kubernetes_minor: str, triggers: Sequence[object],
                     after: Sequence[pulumi.Resource]) -> remote.Command:
    """On a healthy control plane (`connection`): removes the gone hosts' etcd members and Nodes.
    A new gone list changes its create, an update that runs it again; no delete: what it removed
    stays removed."""
    return remote.Command(
        f"{name}-remove-gone",
        connection=connection,
        create=scripts.as_root(remove_gone_hosts_script(gone, kubernetes_minor)),
        triggers=list(triggers),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after), delete_before_replace=True),
    )


def spare_gone_host(only: frozenset[str] = frozenset()) -> pulumi.ResourceTransformation:
    """A transformation for a gone host's components (NodePrep, NodeJoin, its etcd steps): every
    remote command under them (or only those named in `only`, for a component of several hosts)
    is kept as the last `up` left it (no input change is acted on) and retained on delete. By
    component, not by connection: a command's connection is a secret Output, unknown here."""

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if args.type_ != COMMAND_TYPE or (only and args.name not in only):
            return None
        opts = pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(
            retain_on_delete=True, ignore_changes=list(COMMAND_INPUTS)))
        return pulumi.ResourceTransformationResult(args.props, opts)

    return transform
