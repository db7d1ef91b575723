"""dev: an existing cluster (e.g. `minikube start --gpus all`): no provisioning, same add-ons."""

from __future__ import annotations

import pulumi

from components.dev.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.dev.storage import DevSharedStorage, DevSharedStorageArgs
from components.gpu_stack import DriverSource
from components.training_namespace import training_namespace
from config import DevStack, StackSecrets
from stacks import addons
from stacks.contract import Cluster


def build(cfg: DevStack, secrets: StackSecrets) -> dict[str, object]:
    existing = ExistingCluster(
        "cluster",
        ExistingClusterArgs(kubeconfig=secrets.kubeconfig, context=cfg.kube_context, gpu_nodes=cfg.gpu_nodes,
                            gpu_node_labels=cfg.inventory.labels_written),
    )
    labels: list[pulumi.Resource] = list(existing.gpu_labels)
    namespace, claim = None, None
    st = cfg.storage
    if cfg.needs_training_namespace:
        namespace = training_namespace(existing.provider, depends_on=labels, rdma=cfg.network.roce is not None)
    if st.configured:
        assert namespace is not None
        storage = DevSharedStorage(
            "shared-storage",
            # hostPath: single-node clusters; nfs: an existing export (seed 003); otherwise a claim on
            # the cluster's default class
            DevSharedStorageArgs(namespace=namespace, size=st.size, host_path=st.host_path,
                                 nfs=(st.nfs.server, st.nfs.path) if st.nfs else None),
            opts=pulumi.ResourceOptions(provider=existing.provider, depends_on=labels),
        )
        claim = storage.claim
    cluster = Cluster(
        provider=existing.provider,
        driver=DriverSource.HOST,  # an existing cluster's nodes bring their own driver
        ready=labels,
        gpu_nodes=tuple(cfg.gpu_nodes),
        gpu_node_count=cfg.gpu_node_count,
        training_namespace=namespace,
        shared_claim=claim,
        # gpuNodeGpus where declared: the diagnostic asks for them all, the NCCL pair check pairs them
        gpu_counts=cfg.gpu_counts,
        internal_cidrs=(str(cfg.service_cidr), str(cfg.node_cidr)),
    )
    return {**addons.deploy(cfg, cluster, secrets), "kubeContext": cfg.kube_context, "gpuNodes": list(cfg.gpu_nodes)}
