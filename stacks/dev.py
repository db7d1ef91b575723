"""dev: an existing cluster (e.g. `minikube start --gpus all`): no provisioning, same layers."""

from __future__ import annotations

from components.dev.existing_cluster import ExistingCluster, ExistingClusterArgs
from config import DevStack, StackSecrets
from stacks import layers


def build(cfg: DevStack, secrets: StackSecrets) -> dict[str, object]:
    cluster = ExistingCluster(
        "cluster",
        ExistingClusterArgs(kubeconfig=secrets.kubeconfig, context=cfg.kube_context, gpu_nodes=cfg.gpu_nodes),
    )
    in_cluster = layers.deploy(cfg, cluster.provider, after=list(cluster.gpu_labels))
    return {**in_cluster.outputs, "kubeContext": cfg.kube_context, "gpuNodes": list(cfg.gpu_nodes)}
