"""NfsSharedStorage: the storage contract's claim (components/storage_contract.py) on lab, backed
by NFS: an existing export (storage.nfs), or one set up on the control plane (storage.provision: a
remote step installs nfs-kernel-server and exports storage.exportPath to the cluster's hosts). The
NFS CSI driver (pinned chart, kube-system; its node plugin carries mount.nfs, so hosts need no
nfs-common) provisions one directory per claim through a StorageClass with reclaimPolicy Retain:
deleting the stack keeps checkpoints.

Does not manage: the NFS server's disks, backups or quotas; an existing export's server side;
volume snapshots (the CSI driver's snapshotter is switched off: no snapshot CRDs are installed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_command import remote

from components import versions
from components.lab import scripts
from components.lab.host_steps import Shell, fill
from components.storage_contract import CLAIM_NAME, TRAINING_NAMESPACE, SharedClaim, TeamVolumes, claim_manifest
from config.chart_source import ChartSource

CSI_DRIVER = "nfs.csi.k8s.io"
STORAGE_CLASS = "gpu-cluster-nfs"
CSI_NAMESPACE = "kube-system"  # the chart's pods use system-cluster-critical, admitted only here


# The NFS server's host scripts (host_steps/storage/).


def nfs_server(export_path: str, clients: list[str], backup_dir: str = "", backup_clients: Iterable[str] = ()) -> str:
    """Install nfs-kernel-server (once), export `export_path` read-write to the cluster's nodes.

    no_root_squash: the NFS CSI driver creates one directory per volume as root, and training
    images run as root. Only the listed node addresses may mount (the CSI node plugin mounts from
    the node's network, not the pod's). `backup_dir` (the etcd snapshots' shared copy, a sibling of
    the export, never inside it: a parent export opens every folder below it) is exported to
    `backup_clients` only, the control planes: a snapshot holds every Secret of the cluster.
    """
    if not clients:
        raise ValueError("nfs_server needs at least one client address")
    line = export_path + " " + " ".join(f"{c}(rw,sync,no_subtree_check,no_root_squash)" for c in clients)
    if backup_dir:
        line += "\n" + backup_dir + " " + " ".join(f"{c}(rw,sync,no_subtree_check,no_root_squash)"
                                                   for c in backup_clients)
    return scripts._script(  # noqa: SLF001 - the host scripts' common prelude
        fill("storage/nfs_server.sh", EXPORT_DIR=export_path, EXPORT_PATH=Shell(export_path),
             EXPORTS_LINE=Shell(line), BACKUP_DIR=backup_dir))


def nfs_server_delete(export_path: str) -> str:
    """Stop exporting; remove nfs-kernel-server only if this program installed it and nothing
    else is exported. The directory and its data (checkpoints, datasets) are kept."""
    return scripts._script(  # noqa: SLF001 - the host scripts' common prelude
        fill("storage/nfs_server_delete.sh", EXPORT_PATH=Shell(export_path)))


@dataclass(frozen=True)
class NfsServerArgs:
    """storage.provision: the NFS server this component sets up (on the first control plane)."""

    connection: remote.ConnectionArgs
    clients: tuple[str, ...]  # the hosts' addresses, allowed to mount the export
    # What must be done on that host first (its NodePrep.done): the server's apt-get must not race
    # node prep, and on destroy the export goes before the host's packages.
    after: list[pulumi.Resource] = field(default_factory=list)
    # The etcd snapshots' shared copy (etcd_backup.shared_dir: beside the export, not in it), exported
    # to the control planes only; "" for none.
    backup_dir: str = ""
    backup_clients: tuple[str, ...] = ()


@dataclass(frozen=True)
class NfsSharedStorageArgs:
    namespace: k8s.core.v1.Namespace  # the training namespace (the platform's wiring made it)
    server: str
    share: str
    size: str
    provision: NfsServerArgs | None = None
    charts: ChartSource = ChartSource()  # gpu-cluster:chartsDir: where the chart comes from


def csi_driver_nfs_values() -> dict[str, Any]:
    # No VolumeSnapshot CRDs in these clusters: the snapshotter sidecar would only log errors.
    # Scheduling left to the chart: its controller already tolerates the control-plane taint (on
    # lab every node is tainted; tests/stacks/test_control_plane_taint.py renders the chart to check),
    # its node plugin every taint. A preferred-only `controller.affinity` would be dropped: the
    # chart renders that value only when it holds nodeSelectorTerms.
    return {"controller": {"enableSnapshotter": False}}


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


class NfsSharedStorage(pulumi.ComponentResource):
    claim: SharedClaim
    pvc: k8s.core.v1.PersistentVolumeClaim

    def __init__(self, name: str, args: NfsSharedStorageArgs, opts: pulumi.ResourceOptions | None = None):
        # The type token every platform's storage had when one component served lab and dev: kept
        # so existing stacks' URNs (and their claims) stay put.
        super().__init__("gpucluster:storage:SharedStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ready: list[pulumi.Resource] = [args.namespace]
        if args.provision is not None:
            server = args.provision
            ready.append(remote.Command(
                f"{name}-nfs-server",
                connection=server.connection,
                create=scripts.as_root(nfs_server(args.share, list(server.clients), server.backup_dir,
                                                          server.backup_clients)),
                delete=scripts.as_root(nfs_server_delete(args.share)),
                # No triggers, so nothing replaces the step while pods mount the share: a new
                # client list, share or host is an update, and the update runs create again, which
                # rewrites the one exports file and re-exports (host_steps/storage/nfs_server.sh).
                # A replacement would run the delete (un-export, maybe purge the server) under
                # running training pods. ignore_changes keeps the triggers an older version of
                # this program recorded ([share, *clients]) from replacing it at the first `up`
                # after an upgrade (docs/operations/nodes.md).
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(server.after),
                                            ignore_changes=["triggers"]),
            ))
        driver = k8s.helm.v3.Release(
            f"{name}-csi-driver-nfs",
            name="csi-driver-nfs",
            **args.charts.args(versions.CSI_DRIVER_NFS_CHART, versions.CSI_DRIVER_NFS_CHART_VERSION,
                               versions.CSI_DRIVER_NFS_CHART_REPO),
            namespace=CSI_NAMESPACE,
            values=csi_driver_nfs_values(),
            timeout=600,
            opts=child,
        )
        sc = storage_class_manifest(args.server, args.share)
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
        # The claim binds once the driver made its directory on the export: waiting for Bound
        # proves server, export and driver work before training pods need them.
        pvc = claim_manifest(args.size, STORAGE_CLASS)
        ready += [driver, storage_class]
        backend = f"nfs://{args.server}{args.share}"
        self.pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim", metadata=pvc["metadata"], spec=pvc["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(ready)),
        )
        # A team's claim on the same class: the driver makes it a directory of its own.
        teams = TeamVolumes(size=args.size, storage_class=STORAGE_CLASS, ready=(driver, storage_class))
        self.claim = SharedClaim(ready=[self.pvc], backend=backend, teams=teams)
        self.register_outputs({"claim": f"{TRAINING_NAMESPACE}/{CLAIM_NAME}", "backend": backend})
