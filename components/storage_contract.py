"""The shared-storage contract every stack honours, so the training Job never cares where it runs.

One ReadWriteMany PersistentVolumeClaim named CLAIM_NAME in TRAINING_NAMESPACE, mounted by training
pods at MOUNT_ROOT with one sub-path per purpose. lab backs it with NFS, dev with hostPath or the
cluster's default class, gke with Filestore; each platform's storage component creates the claim.
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
class SharedClaim:
    """The claim a platform's storage made: training mounts it by name and waits for `ready`."""

    ready: list[pulumi.Resource]  # what must exist before a pod can mount the claim
    name: str = CLAIM_NAME
    namespace: str = TRAINING_NAMESPACE
    backend: str = ""  # for outputs and docs: "nfs://server/path", "hostPath", "filestore", ...


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
