"""GpuReadyGate: a Job that completes only when every GPU node ran a GPU check.

One pod per GPU node (required anti-affinity on the hostname, completions = parallelism = the
number of GPU nodes), each asking for one GPU and running `nvidia-smi -L` and a CUDA vector add
(pinned image). They tolerate the GPU and control-plane taints: a control plane with a GPU is
counted in gpu_nodes, so the gate must reach it (config/scheduling_contract.py). Pods restart
in place (restartPolicy OnFailure) while a node's driver is still being installed, so the gate
turns green as soon as the last node is really usable; Pulumi waits for the Job to complete up to
gpu.gate.timeoutMinutes (the operator's driver container alone can take 10+ minutes). GPU
workloads depend on this resource, not on nodes merely being Ready.

Does not manage: NCCL or multi-node checks (the training layer's acceptance test).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from components.namespaces import pod_security_namespace
from config.scheduling_contract import GPU_NODE_SELECTOR_TERMS, GPU_RESOURCE, gpu_tolerations

GATE_NAMESPACE = "gpu-cluster-system"
GATE_LABEL = {"app.kubernetes.io/name": "gpu-ready-gate"}


@dataclass(frozen=True)
class GpuReadyGateArgs:
    gpu_nodes: int
    timeout_minutes: int = 30
    gpu_resource: str = GPU_RESOURCE
    image: str = versions.CUDA_VECTORADD_IMAGE


def job_manifest(name: str, args: GpuReadyGateArgs) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": GATE_NAMESPACE, "labels": GATE_LABEL},
        "spec": {
            "completions": args.gpu_nodes,
            "parallelism": args.gpu_nodes,
            "backoffLimit": 6 * args.gpu_nodes,
            "activeDeadlineSeconds": args.timeout_minutes * 60,
            "template": {
                "metadata": {"labels": GATE_LABEL},
                "spec": {
                    "restartPolicy": "OnFailure",
                    # Pod Security "restricted": the check needs no privilege, only a GPU.
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65534,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": GPU_NODE_SELECTOR_TERMS
                            }
                        },
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": GATE_LABEL},
                                 "topologyKey": "kubernetes.io/hostname"}
                            ]
                        },
                    },
                    "tolerations": gpu_tolerations(),
                    "containers": [
                        {
                            "name": "gpu-check",
                            "image": args.image,
                            "command": ["/bin/sh", "-c", "nvidia-smi -L && /cuda-samples/vectorAdd"],
                            "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
                            "resources": {
                                "limits": {args.gpu_resource: 1, "cpu": "500m", "memory": "512Mi"},
                                "requests": {"cpu": "100m", "memory": "128Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


class GpuReadyGate(pulumi.ComponentResource):
    job: k8s.batch.v1.Job
    result: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, args: GpuReadyGateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gpu:ReadyGate", name, None, opts)
        if args.gpu_nodes < 1:
            raise ValueError("GpuReadyGate needs at least one GPU node")
        # The check needs a GPU and nothing else: the strictest level.
        ns = pod_security_namespace(f"{name}-ns", GATE_NAMESPACE, "restricted", pulumi.ResourceOptions(parent=self))
        manifest = job_manifest(name, args)
        self.job = k8s.batch.v1.Job(
            name,
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[ns],
                custom_timeouts=pulumi.CustomTimeouts(create=f"{args.timeout_minutes}m",
                                                      update=f"{args.timeout_minutes}m"),
            ),
        )
        # After `up`, passed == gpuNodes: Pulumi only finishes the Job once it has completed. The
        # count is read through the status Output itself: Output.all hands nested output types over
        # as plain dicts, where an attribute read finds nothing (the real engine showed passed: 0).
        succeeded = self.job.status.apply(lambda status: (status.succeeded if status else None) or 0)
        self.result = pulumi.Output.all(self.job.metadata.name, succeeded).apply(
            lambda ns: {"job": f"{GATE_NAMESPACE}/{ns[0]}", "gpuNodes": args.gpu_nodes, "passed": ns[1]}
        )
        self.register_outputs({"result": self.result})
