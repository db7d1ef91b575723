"""The cluster contract: what each platform's wiring (stacks/lab.py, dev.py, gke.py) hands the
in-cluster add-ons (stacks/addons.py), so those never ask which platform they run on.

After pulumi-eks, where a node group takes the cluster object and uses its provider: the platform
builds the cluster, its GPU nodes, the training namespace and the shared claim its storage
backs (lab: NFS, dev: hostPath or the default class, gke: Filestore); the add-ons take this object
and the add-ons config, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.gpu_stack import DriverSource
from components.storage_contract import BucketData, SharedClaim
from components.training.gpudirect_pod import PodGpuDirect


@dataclass(frozen=True)
class Cluster:
    # Every in-cluster object is created through this provider.
    provider: k8s.Provider
    # Where the GPU nodes' NVIDIA driver comes from; it picks the GPU software's shape.
    driver: DriverSource
    # What every in-cluster layer waits for: lab the CNI, dev the GPU node labels, gke the Cloud NAT of
    # a private cluster, else nothing (GKE's own network and labels exist with the cluster).
    ready: list[pulumi.Resource] = field(default_factory=list)
    # A bucket as the training pods' data mount (gke gcsData), or None: the shared claim's data sub-path.
    data_bucket: BucketData | None = None
    # Whether the program's DCGM exporter runs on the GPU nodes: false where the platform's own managed
    # exporter reads them (gke gpuMetrics gkeManaged), so that no GPU is exported twice.
    dcgm_exporter: bool = True
    # GPU nodes known by name (lab hosts with GPUs, dev gpuNodes); gke's come and go with the
    # autoscaler: none.
    gpu_nodes: tuple[str, ...] = ()
    # GPU nodes present after `up` (gke: every pool's minimum): the GPU-ready gate checks each.
    gpu_node_count: int = 0
    # Steps that finish when the GPU nodes are Ready (lab: the joins; gke: the pools and Google's
    # driver installers): the gate's deadline starts after them.
    gpu_nodes_ready: list[pulumi.Resource] = field(default_factory=list)
    # The training namespace, created once by the platform (its claim lives there); None when the
    # stack runs no job and has no shared storage.
    training_namespace: k8s.core.v1.Namespace | None = None
    # The ReadWriteMany claim of the storage contract, or None without shared storage.
    shared_claim: SharedClaim | None = None
    # GPUs per GPU node where the platform knows them (lab: each host's `gpus`); others: empty.
    gpu_counts: dict[str, int] = field(default_factory=dict)
    # The cluster's own pod and service ranges where the platform knows them (lab), so egress to
    # the internet can leave them out; others: empty (private ranges are left out everywhere).
    internal_cidrs: tuple[str, ...] = ()
    # lab's scheduled etcd snapshots: the longest gap of their schedule, for monitoring's metrics
    # and alert (components/monitoring/etcd_backup.py); None: none.
    etcd_backup_interval_seconds: int | None = None
    # etcd's metrics are scraped (lab: kubeadm binds them on the node addresses): monitoring links
    # the chart's etcd alerts to this program's runbook (components/monitoring/etcd.py).
    etcd_metrics: bool = False
    # gke: the GPUDirect network multi-node jobs attach to (components/training/gpudirect_pod.py); None: none.
    gpudirect: PodGpuDirect | None = None
    # lab's control planes write their certificates' expiry as textfile metrics
    # (components/lab/certificates.py): monitoring alerts on them (components/monitoring/certificates.py).
    certificate_expiry_metrics: bool = False
