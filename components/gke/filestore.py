"""FilestoreStorage: the storage contract's ReadWriteMany claim (components/storage_contract.py),
backed by a Filestore instance.

The instance (tier and capacity from gke.filestore) sits on the cluster's VPC; its NFS share is a
statically provisioned PersistentVolume bound to CLAIM_NAME in TRAINING_NAMESPACE only (claimRef),
reclaim policy Retain: deleting the claim never deletes checkpoints. Training pods mount the claim
exactly as on lab and dev.

Does not manage: backups and snapshots, the Filestore CSI driver (not needed for one static
volume), private service access for tiers that need it on Shared VPC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE, SharedClaim, TeamVolumes
from config.gke import GkeFilestore

SHARE_NAME = "shared"  # Filestore file share: letters, digits and '_', at most 16 characters


@dataclass(frozen=True)
class FilestoreStorageArgs:
    filestore: GkeFilestore
    project: str
    location: str  # a zone for zonal tiers, the region otherwise
    network: str
    instance_name: str
    namespace: k8s.core.v1.Namespace  # the training namespace (components/training_namespace.py)
    provider: k8s.Provider


def volume_name(instance_name: str) -> str:
    return f"{instance_name}-{CLAIM_NAME}"


def volume_manifest(name: str, server: str, capacity_gb: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"gpu-cluster/storage": "filestore"}},
        "spec": {
            "capacity": {"storage": f"{capacity_gb}Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": pv_mount_options(),
            "nfs": {"server": server, "path": f"/{SHARE_NAME}"},
            "claimRef": {"namespace": TRAINING_NAMESPACE, "name": CLAIM_NAME},
        },
    }


def pv_mount_options() -> list[str]:
    return ["hard", "nfsvers=3"]  # Filestore serves NFSv3


def claim_manifest(volume: str, capacity_gb: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM_NAME, "namespace": TRAINING_NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": f"{capacity_gb}Gi"}},
        },
    }


class FilestoreStorage(pulumi.ComponentResource):
    instance: gcp.filestore.Instance
    pvc: k8s.core.v1.PersistentVolumeClaim
    claim: SharedClaim
    server: pulumi.Output[str]

    def __init__(self, name: str, args: FilestoreStorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gke:FilestoreStorage", name, None, opts)
        fs = args.filestore
        self.instance = gcp.filestore.Instance(
            name,
            name=args.instance_name,
            project=args.project,
            location=args.location,
            tier=fs.tier.value,
            file_shares=gcp.filestore.InstanceFileSharesArgs(name=SHARE_NAME, capacity_gb=fs.capacity_gb),
            networks=[
                gcp.filestore.InstanceNetworkArgs(network=args.network, modes=["MODE_IPV4"], connect_mode="DIRECT_PEERING")
            ],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.server = self.instance.networks.apply(lambda nets: (nets[0].ip_addresses or [""])[0])
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        pv_name = volume_name(args.instance_name)
        pv = self.server.apply(lambda ip: volume_manifest(pv_name, ip, fs.capacity_gb))
        volume = k8s.core.v1.PersistentVolume(
            f"{name}-pv",
            metadata=pv["metadata"],
            spec=pv["spec"],
            opts=k8s_opts,
        )
        pvc = claim_manifest(pv_name, fs.capacity_gb)
        self.pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim",
            metadata=pvc["metadata"],
            spec=pvc["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.namespace, volume]),
        )
        teams = TeamVolumes(size=f"{fs.capacity_gb}Gi", nfs=(self.server, f"/{SHARE_NAME}"),
                            mount_options=tuple(pv_mount_options()))
        self.claim = SharedClaim(ready=[self.pvc], backend="filestore", teams=teams)
        self.register_outputs(
            {
                "instance": self.instance.name,
                "tier": fs.tier.value,
                "capacityGb": fs.capacity_gb,
                "server": self.server,
                "share": f"/{SHARE_NAME}",
                "claim": f"{TRAINING_NAMESPACE}/{CLAIM_NAME}",
            }
        )
