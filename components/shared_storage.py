"""SharedStorage: the ReadWriteMany claim of the storage contract (components/storage_contract.py)
on lab and dev. gke brings its own Filestore claim and does not use this component.

lab: an NFS export, either an existing one (storage.nfs) or one this component sets up on the
  control plane (storage.provision: a remote step installs nfs-kernel-server and exports
  storage.exportPath to the cluster's nodes). The NFS CSI driver (pinned chart, kube-system; its
  node plugin carries mount.nfs, so hosts need no nfs-common) provisions one directory per claim
  through a StorageClass with reclaimPolicy Retain: deleting the stack keeps checkpoints.
dev: a hostPath PersistentVolume bound to the claim by name (single-node clusters such as
  minikube; ReadWriteMany is honest there because every pod is on the one node), or a claim on
  the cluster's default StorageClass (storage.useDefaultClass).

Does not manage: the NFS server's disks, backups or quotas; an existing export's server side;
volume snapshots (the CSI driver's snapshotter is switched off: no snapshot CRDs are installed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_command import remote

from components import versions
from components.lab import scripts
from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE, SharedClaim
from config.dev import DevStorage
from config.lab import LabStorage

CSI_DRIVER = "nfs.csi.k8s.io"
STORAGE_CLASS = "gpu-cluster-nfs"
HOST_PATH_PV = "gpu-cluster-shared-data"
CSI_NAMESPACE = "kube-system"  # the chart's pods use system-cluster-critical, admitted only here


@dataclass(frozen=True)
class SharedStorageArgs:
    storage: LabStorage | DevStorage  # the platform's storage section says where the volume comes from
    namespace: k8s.core.v1.Namespace  # the training namespace (components/training_namespace.py)
    # lab: the first control plane's address (storage.provision sets the NFS server up there) and
    # every host's (the export admits them).
    control_plane_address: str | None = None
    host_addresses: tuple[str, ...] = ()
    # lab with storage.provision: where the NFS server is set up (the first control plane).
    nfs_connection: remote.ConnectionArgs | None = None
    # ...and what must be done on that host first (its NodePrep.done): the server's apt-get must
    # not race node prep, and on destroy the export goes before the host's packages.
    nfs_after: list[pulumi.Resource] = field(default_factory=list)


def csi_driver_nfs_values() -> dict[str, Any]:
    # No VolumeSnapshot CRDs in these clusters: the snapshotter sidecar would only log errors.
    # Scheduling left to the chart: its controller already tolerates the control-plane taint (on
    # lab every node is tainted; tests/test_control_plane_taint.py renders the chart to check),
    # its node plugin every taint. A preferred-only `controller.affinity` would be dropped: the
    # chart renders that value only when it holds nodeSelectorTerms.
    return {"controller": {"enableSnapshotter": False}}


def nfs_export(storage: LabStorage, control_plane_address: str | None) -> tuple[str, str]:
    """(server, path) the StorageClass points at: the existing export, or the control plane's."""
    if storage.nfs is not None:
        return storage.nfs.server, storage.nfs.path
    if control_plane_address is None:
        raise ValueError("storage.provision needs the control plane's address")
    return control_plane_address, storage.export_path


def storage_class_manifest(server: str, share: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": CSI_DRIVER,
        "parameters": {"server": server, "share": share},
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
        "mountOptions": ["nfsvers=4.1", "hard"],
    }


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


class SharedStorage(pulumi.ComponentResource):
    claim: SharedClaim
    pvc: k8s.core.v1.PersistentVolumeClaim

    def __init__(self, name: str, args: SharedStorageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:storage:SharedStorage", name, None, opts)
        st = args.storage
        child = pulumi.ResourceOptions(parent=self)
        ready: list[pulumi.Resource] = [args.namespace]
        if isinstance(st, LabStorage):
            server, share = nfs_export(st, args.control_plane_address)
            if st.provision:
                if args.nfs_connection is None:
                    raise ValueError("storage.provision needs the control plane's SSH connection")
                ready.append(remote.Command(
                    f"{name}-nfs-server",
                    connection=args.nfs_connection,
                    create=scripts.as_root(scripts.nfs_server(share, list(args.host_addresses))),
                    delete=scripts.as_root(scripts.nfs_server_delete(share)),
                    triggers=[share, *args.host_addresses],
                    # Delete first: the old delete would otherwise remove the export (and maybe
                    # the server) the new create just set up on the same host.
                    opts=pulumi.ResourceOptions(
                        parent=self, depends_on=list(args.nfs_after), delete_before_replace=True
                    ),
                ))
            driver = k8s.helm.v3.Release(
                f"{name}-csi-driver-nfs",
                name="csi-driver-nfs",
                chart=versions.CSI_DRIVER_NFS_CHART,
                version=versions.CSI_DRIVER_NFS_CHART_VERSION,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=versions.CSI_DRIVER_NFS_CHART_REPO),
                namespace=CSI_NAMESPACE,
                values=csi_driver_nfs_values(),
                timeout=600,
                opts=child,
            )
            sc = storage_class_manifest(server, share)
            storage_class = k8s.storage.v1.StorageClass(
                f"{name}-class",
                metadata=sc["metadata"],
                provisioner=sc["provisioner"],
                parameters=sc["parameters"],
                reclaim_policy=sc["reclaimPolicy"],
                volume_binding_mode=sc["volumeBindingMode"],
                mount_options=sc["mountOptions"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[driver]),
            )
            # The claim binds once the driver made its directory on the export: waiting for
            # Bound proves server, export and driver work before training pods need them.
            pvc = claim_manifest(st.size, STORAGE_CLASS)
            ready += [driver, storage_class]
            backend = f"nfs://{server}{share}"
        elif st.host_path is not None:
            pv = host_path_volume_manifest(st.host_path, st.size)
            volume = k8s.core.v1.PersistentVolume(
                f"{name}-volume", metadata=pv["metadata"], spec=pv["spec"], opts=child
            )
            ready.append(volume)
            pvc = claim_manifest(st.size, "", volume_name=HOST_PATH_PV)
            backend = f"hostPath:{st.host_path}"
        else:
            # The default class may bind only when a pod uses the claim (WaitForFirstConsumer):
            # waiting for Bound here would block `up` until its timeout.
            pvc = claim_manifest(st.size, None, annotations={"pulumi.com/skipAwait": "true"})
            backend = "default StorageClass"
        self.pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim",
            metadata=pvc["metadata"],
            spec=pvc["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(ready)),
        )
        self.claim = SharedClaim(ready=[self.pvc], backend=backend)
        self.register_outputs({"claim": f"{TRAINING_NAMESPACE}/{CLAIM_NAME}", "backend": backend})
