"""DevSharedStorage: the storage contract's claim (components/storage_contract.py) on an existing
cluster: a hostPath PersistentVolume bound to the claim by name (single-node clusters such as
minikube; ReadWriteMany is honest there because every pod is on the one node), or a claim on the
cluster's default StorageClass (storage.useDefaultClass).

Does not manage: the directory's contents or backups, the cluster's StorageClasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE, SharedClaim, claim_manifest

HOST_PATH_PV = "gpu-cluster-shared-data"


@dataclass(frozen=True)
class DevSharedStorageArgs:
    namespace: k8s.core.v1.Namespace  # the training namespace (the platform's wiring made it)
    size: str
    host_path: str | None = None  # None: a claim on the default StorageClass


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


class DevSharedStorage(pulumi.ComponentResource):
    claim: SharedClaim
    pvc: k8s.core.v1.PersistentVolumeClaim

    def __init__(self, name: str, args: DevSharedStorageArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token every platform's storage had when one component served lab and dev: kept
        # so existing stacks' URNs (and their claims) stay put.
        super().__init__("gpucluster:storage:SharedStorage", name, None, opts)
        ready: list[pulumi.Resource] = [args.namespace]
        if args.host_path is not None:
            pv = host_path_volume_manifest(args.host_path, args.size)
            volume = k8s.core.v1.PersistentVolume(
                f"{name}-volume", metadata=pv["metadata"], spec=pv["spec"], opts=pulumi.ResourceOptions(parent=self)
            )
            ready.append(volume)
            pvc = claim_manifest(args.size, "", volume_name=HOST_PATH_PV)
            backend = f"hostPath:{args.host_path}"
        else:
            # The default class may bind only when a pod uses the claim (WaitForFirstConsumer):
            # waiting for Bound here would block `up` until its timeout.
            pvc = claim_manifest(args.size, None, annotations={"pulumi.com/skipAwait": "true"})
            backend = "default StorageClass"
        self.pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim", metadata=pvc["metadata"], spec=pvc["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(ready)),
        )
        self.claim = SharedClaim(ready=[self.pvc], backend=backend)
        self.register_outputs({"claim": f"{TRAINING_NAMESPACE}/{CLAIM_NAME}", "backend": backend})
