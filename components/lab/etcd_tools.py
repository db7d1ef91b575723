"""Which etcd tools the lab's host scripts run (host_steps/etcd/etcd_tool.sh): the etcd release
kubeadm runs for a Kubernetes minor, the fallback where a host's etcd manifest names none, and the
values etcd_tool.sh is filled in with. One home for the snapshot job, the restore, the
defragmentation, the removal of gone hosts and the snapshot before an upgrade."""

from __future__ import annotations

from components import versions


def etcd_version(kubernetes_minor: str) -> str:
    """The etcd release kubeadm runs for this minor (3.6.5 of registry.k8s.io/etcd:3.6.5-0)."""
    return versions.ETCD_KUBEADM[kubernetes_minor].split("-")[0]


def etcd_tool_values(kubernetes_minor: str) -> dict[str, str | int]:
    """What host_steps/etcd/etcd_tool.sh is filled in with, for a cluster of this minor."""
    return {"TOOLS_REPOSITORY": versions.ETCD_TOOLS_IMAGE_REPOSITORY, "ETCD_VERSION": etcd_version(kubernetes_minor)}
