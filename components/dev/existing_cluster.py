"""ExistingCluster: a Kubernetes provider for a cluster this program does not create.

The kubeconfig comes from a secret config value (gpu-cluster:kubeconfig) or, without one, from a
context of the local kubeconfig (gpu-cluster:kubeContext). Nodes named in gpu-cluster:gpuNodes
get the nvidia.com/gpu.present=true label (a server-side-apply patch this program owns and removes
on destroy) so GPU workloads find them as they do on lab and GKE nodes.

Does not manage: the cluster's lifecycle, its CNI, or drivers on its nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from config.scheduling_contract import GPU_NODE_LABEL

GPU_NODE = {GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]}


@dataclass(frozen=True)
class ExistingClusterArgs:
    kubeconfig: pulumi.Output[str] | None = None
    context: str | None = None
    gpu_nodes: tuple[str, ...] = field(default=())
    # The labels written on each GPU node (the dev inventory's, config/inventory.py); default: the GPU label.
    gpu_node_labels: dict[str, dict[str, str]] = field(default_factory=dict)


class ExistingCluster(pulumi.ComponentResource):
    provider: k8s.Provider
    gpu_labels: list[k8s.core.v1.NodePatch]

    def __init__(self, name: str, args: ExistingClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:dev:ExistingCluster", name, None, opts)
        if args.kubeconfig is None and not args.context:
            raise ValueError("ExistingCluster needs a kubeconfig or a context")
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=args.kubeconfig,
            context=None if args.kubeconfig is not None else args.context,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.gpu_labels = [
            k8s.core.v1.NodePatch(
                f"{name}-gpu-label-{node}",
                metadata=k8s.meta.v1.ObjectMetaPatchArgs(name=node, labels=args.gpu_node_labels.get(node, GPU_NODE)),
                opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
            )
            for node in args.gpu_nodes
        ]
        self.register_outputs({"context": args.context, "gpuNodes": list(args.gpu_nodes)})
