"""The shared-storage contract every stack honours, so the training Job never cares where it runs.

One ReadWriteMany PersistentVolumeClaim named CLAIM_NAME in TRAINING_NAMESPACE, mounted by training
pods at MOUNT_ROOT with one sub-path per purpose. lab backs it with NFS, dev with hostPath or the
cluster's default class, gke with Filestore; each platform's storage component creates the claim.
A team's namespace (queues.teams) gets its own claim of the same name on the same storage, in its
own directory (TeamVolumes says how; components/queues/team_storage.py makes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

TRAINING_NAMESPACE = "training"
CLAIM_NAME = "shared-data"
MOUNT_ROOT = "/mnt/shared"
# purpose -> (sub-path on the volume, mount path in training pods)
MOUNTS = {
    "cache": ("cache", f"{MOUNT_ROOT}/cache"),
    "data": ("data", f"{MOUNT_ROOT}/data"),
    "checkpoints": ("checkpoints", f"{MOUNT_ROOT}/checkpoints"),
}


@dataclass(frozen=True)
class TeamVolumes:
    """How a team's namespace gets a claim of its own on the platform's storage: on a StorageClass
    that makes one directory per claim (`storage_class`; "" with `default_class`: the cluster's
    default), or a static volume of the team's subdirectory of an NFS export (`nfs`) or node
    directory (`host_path`)."""

    size: str
    storage_class: str | None = None
    default_class: bool = False
    nfs: tuple[pulumi.Input[str], str] | None = None  # (server, the export's path)
    host_path: str | None = None
    mount_options: tuple[str, ...] = ()
    ready: tuple[pulumi.Resource, ...] = ()  # what a team's claim waits for (the class, its driver)


@dataclass(frozen=True)
class SharedClaim:
    """The claim a platform's storage made: training mounts it by name and waits for `ready`."""

    ready: list[pulumi.Resource]  # what must exist before a pod can mount the claim
    name: str = CLAIM_NAME
    namespace: str = TRAINING_NAMESPACE
    backend: str = ""  # for outputs and docs: "nfs://server/path", "hostPath", "filestore", ...
    teams: TeamVolumes | None = None  # how a team's namespace gets its own claim (None: it cannot)


# GKE's Cloud Storage FUSE CSI driver (config/gke_gcs_data.py cites the page): the CSI ephemeral
# volume's driver, and the pod annotation that has GKE inject the FUSE sidecar.
GCS_FUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCS_FUSE_ANNOTATION = "gke-gcsfuse/volumes"


@dataclass(frozen=True)
class BucketData:
    """An object-store bucket as the training pods' data mount (gke: gke.gcsData), instead of the
    claim's data sub-path: the pods run as `service_account` and wait for `ready` (its identity)."""

    bucket: str
    read_only: bool
    service_account: str
    ready: tuple[pulumi.Resource, ...] = ()

    def volume(self, name: str) -> dict[str, Any]:
        return {"name": name, "csi": {"driver": GCS_FUSE_DRIVER, "readOnly": self.read_only,
                                      "volumeAttributes": {"bucketName": self.bucket, "mountOptions": "implicit-dirs"}}}


def claim_manifest(size: str, storage_class: str | None, volume_name: str | None = None,
                   annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume_name is not None:
        spec["volumeName"] = volume_name
    metadata: dict[str, Any] = {"name": CLAIM_NAME, "namespace": TRAINING_NAMESPACE}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}
