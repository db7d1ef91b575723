"""A team's shared storage: a ReadWriteMany claim named like the training namespace's
(storage_contract.CLAIM_NAME) in the team's namespace, so a team's job mounts `shared-data` exactly
as the program's own jobs and the W&B Launch runs do, on the same storage, in a directory of its own.

How the platform's storage gives it (storage_contract.TeamVolumes, set by each storage component):

* lab (the NFS CSI driver's StorageClass gpu-cluster-nfs): a claim on that class. The driver makes
  one directory per claim on the export (`<share>/pvc-<uid>`), and a bound volume serves its one
  claim: a team mounts its own directory only. Reclaim policy Retain, as the training claim's.
* dev, the cluster's default class: a claim on it (its provisioner makes a volume per claim).
* dev storage.nfs and gke's Filestore share (static volumes, no provisioner): a PersistentVolume of
  the team's subdirectory `<path>/teams/<namespace>`, pre-bound to the team's claim (claimRef) and
  the claim to it (volumeName), storageClassName "": no other claim can bind it, and the team's
  pods can reach no other directory (a pod's subPath stays inside the volume). The export's root
  stays the training namespace's only. NFS makes no directory on mount: a one-shot Job makes every
  team's (components/queues/team_directories.py), and each team's volume waits for it.
* dev storage.hostPath: a hostPath volume of `<hostPath>/teams/<namespace>` (DirectoryOrCreate:
  the kubelet makes it), pre-bound the same way.

NetworkPolicy: nothing to open. The kubelet (or the CSI node plugin, on the host network) mounts
the volume, not the pod, so the team's default deny does not apply to NFS traffic; it does keep the
team's pods from reaching the NFS server themselves (tests/components/queues/test_team_storage.py).

Does not manage: the size of a team's share (NFS enforces no claim's size: `storage.size` is what
the claim asks), backups, the subdirectories of a static export.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.queues.team_directories import JOB_PREFIX, TEAMS_DIR
from components.storage_contract import CLAIM_NAME, TeamVolumes


def volume_name(namespace: str) -> str:
    """The static volume of a team's directory (cluster-scoped: named after the namespace)."""
    return f"gpu-cluster-team-{namespace}-data"


def team_directory(root: str, namespace: str) -> str:
    return f"{root.rstrip('/')}/{TEAMS_DIR}/{namespace}"


def is_static(v: TeamVolumes) -> bool:
    return v.nfs is not None or v.host_path is not None


def volume_manifest(v: TeamVolumes, namespace: str) -> dict[str, Any] | None:
    """The team's own PersistentVolume (static storage), or None where a StorageClass makes it."""
    if v.nfs is not None:
        server, root = v.nfs
        source: dict[str, Any] = {"nfs": {"server": server, "path": team_directory(root, namespace)}}
    elif v.host_path is not None:
        source = {"hostPath": {"path": team_directory(v.host_path, namespace), "type": "DirectoryOrCreate"}}
    else:
        return None
    spec: dict[str, Any] = {
        "capacity": {"storage": v.size},
        "accessModes": ["ReadWriteMany"],
        "persistentVolumeReclaimPolicy": "Retain",  # deleting the team keeps its data
        "storageClassName": "",  # no provisioner takes it, no other claim binds it
        **source,
        "claimRef": {"namespace": namespace, "name": CLAIM_NAME},
    }
    if v.mount_options:
        spec["mountOptions"] = list(v.mount_options)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume_name(namespace)},
            "spec": spec}


def claim_manifest(v: TeamVolumes, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": v.size}}}
    metadata: dict[str, Any] = {"name": CLAIM_NAME, "namespace": namespace}
    if is_static(v):
        spec["storageClassName"] = ""
        spec["volumeName"] = volume_name(namespace)
    elif v.default_class:
        # The default class may bind only when a pod uses the claim (WaitForFirstConsumer).
        metadata["annotations"] = {"pulumi.com/skipAwait": "true"}
    else:
        spec["storageClassName"] = v.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def where(v: TeamVolumes, namespace: str) -> str:
    """For the stack outputs: the claim and where its data lives."""
    claim = f"{namespace}/{CLAIM_NAME}"
    if v.nfs is not None:
        return f"{claim}: {TEAMS_DIR}/{namespace} of the NFS export {v.nfs[1]} (made by the Job training/{JOB_PREFIX}-*)"
    if v.host_path is not None:
        return f"{claim}: {team_directory(v.host_path, namespace)} on the node"
    if v.default_class:
        return f"{claim}: a volume of the cluster's default StorageClass"
    return f"{claim}: its own directory of StorageClass {v.storage_class}"


def needs_directories(v: TeamVolumes) -> bool:
    """A static NFS export: nothing makes the teams' directories but the Job (team_directories.py)."""
    return v.nfs is not None


def team_claim(prefix: str, v: TeamVolumes, namespace: str, opts: pulumi.ResourceOptions,
               directories: pulumi.Resource | None = None) -> k8s.core.v1.PersistentVolumeClaim:
    """Register the team's volume (static storage) and claim; `opts` carry the parent and the
    team's Namespace; `directories`: the Job that made the team's directory, which the volume waits for."""
    after: list[pulumi.Resource] = list(v.ready)
    pv = volume_manifest(v, namespace)
    if pv is not None:
        pv_after = [*v.ready, *([directories] if directories is not None else [])]
        after.append(k8s.core.v1.PersistentVolume(f"{prefix}-data-volume", metadata=pv["metadata"], spec=pv["spec"],
                                                  opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                                                      depends_on=pv_after))))
    pvc = claim_manifest(v, namespace)
    return k8s.core.v1.PersistentVolumeClaim(f"{prefix}-data", metadata=pvc["metadata"], spec=pvc["spec"],
                                             opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                                                 depends_on=after)))
