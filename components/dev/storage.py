"""DevSharedStorage: the storage contract's claim (components/storage_contract.py) on an existing
cluster: a hostPath PersistentVolume bound to the claim by name (single-node clusters such as
minikube; ReadWriteMany is honest there because every pod is on the one node), a static NFS
PersistentVolume of an existing export bound the same way (storage.nfs, seed 003: shared between
nodes, so training.nodes > 1 may use it), or a claim on the cluster's default StorageClass
(storage.useDefaultClass).

Does not manage: the directory's or export's contents or backups, the NFS server, the NFS client
on the nodes (the kubelet mounts the export; the node needs mount.nfs), the cluster's StorageClasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE, SharedClaim, TeamVolumes, claim_manifest

HOST_PATH_PV = "gpu-cluster-shared-data"
# Its own name: switching between hostPath and nfs replaces the volume instead of colliding with it.
NFS_PV = "gpu-cluster-shared-nfs"
# As lab's NFS StorageClass (components/lab/nfs_storage.py): NFSv4.1, and `hard` so a server restart
# stalls I/O until it returns instead of failing a checkpoint write half way.
NFS_MOUNT_OPTIONS = ("nfsvers=4.1", "hard")


@dataclass(frozen=True)
class DevSharedStorageArgs:
    namespace: k8s.core.v1.Namespace  # the training namespace (the platform's wiring made it)
    size: str
    host_path: str | None = None
    nfs: tuple[str, str] | None = None  # (server, path) of an existing export
    # neither: a claim on the default StorageClass


def host_path_volume_manifest(path: str, size: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": HOST_PATH_PV},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": path, "type": "DirectoryOrCreate"},
            # Only this claim may bind it.
            "claimRef": {"namespace": TRAINING_NAMESPACE, "name": CLAIM_NAME},
        },
    }


def nfs_volume_manifest(server: str, path: str, size: str) -> dict[str, Any]:
    """A static PersistentVolume of an existing export, as seed 003 writes it, pre-bound to the claim."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": NFS_PV},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteMany"],
            # Deleting the stack keeps the export's datasets, caches and checkpoints.
            "persistentVolumeReclaimPolicy": "Retain",
            # "": no default class's provisioner takes the claim, and no other claim this volume.
            "storageClassName": "",
            "mountOptions": list(NFS_MOUNT_OPTIONS),
            "nfs": {"server": server, "path": path},
            "claimRef": {"namespace": TRAINING_NAMESPACE, "name": CLAIM_NAME},
        },
    }


class DevSharedStorage(pulumi.ComponentResource):
    claim: SharedClaim
    pvc: k8s.core.v1.PersistentVolumeClaim

    def __init__(self, name: str, args: DevSharedStorageArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token every platform's storage had when one component served lab and dev: kept
        # so existing stacks' URNs (and their claims) stay put.
        super().__init__("gpucluster:storage:SharedStorage", name, None, opts)
        ready: list[pulumi.Resource] = [args.namespace]
        if args.host_path is not None and args.nfs is not None:
            raise ValueError("DevSharedStorage: host_path or nfs, not both")
        if args.host_path is not None or args.nfs is not None:
            if args.nfs is not None:
                server, path = args.nfs
                pv = nfs_volume_manifest(server, path, args.size)
                backend = f"nfs://{server}{path}"
            else:
                assert args.host_path is not None
                pv = host_path_volume_manifest(args.host_path, args.size)
                backend = f"hostPath:{args.host_path}"
            volume = k8s.core.v1.PersistentVolume(
                f"{name}-volume", metadata=pv["metadata"], spec=pv["spec"], opts=pulumi.ResourceOptions(parent=self)
            )
            ready.append(volume)
            pvc = claim_manifest(args.size, "", volume_name=pv["metadata"]["name"])
            teams = TeamVolumes(size=args.size, nfs=args.nfs, host_path=args.host_path,
                                mount_options=NFS_MOUNT_OPTIONS if args.nfs else ())
        else:
            # The default class may bind only when a pod uses the claim (WaitForFirstConsumer):
            # waiting for Bound here would block `up` until its timeout.
            pvc = claim_manifest(args.size, None, annotations={"pulumi.com/skipAwait": "true"})
            backend = "default StorageClass"
            teams = TeamVolumes(size=args.size, default_class=True)
        self.pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim", metadata=pvc["metadata"], spec=pvc["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(ready)),
        )
        self.claim = SharedClaim(ready=[self.pvc], backend=backend, teams=teams)
        self.register_outputs({"claim": f"{TRAINING_NAMESPACE}/{CLAIM_NAME}", "backend": backend})
