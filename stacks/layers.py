"""The in-cluster layers every stack gets, whatever made the cluster.

Order: GPU software stack -> GPU-ready gate -> (monitoring) -> (shared storage, training). Each
platform's wiring (stacks/lab.py, dev.py, gke.py) builds the cluster and its provider, then calls
deploy() with what the cluster must finish first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.config import MigStrategy, Platform, SharingMode, StackConfig
from components.gpu_stack import GpuSoftwareStack, GpuSoftwareStackArgs
from components.ready_gate import GpuReadyGate, GpuReadyGateArgs


@dataclass
class ClusterLayers:
    gpu: GpuSoftwareStack
    gate: GpuReadyGate | None  # GPU workloads depend on this
    outputs: dict[str, object] = field(default_factory=dict)


def gate_resource(cfg: StackConfig) -> str:
    """The extended resource one gate pod asks for (a MIG slice under the mixed strategy)."""
    sharing = cfg.gpu.sharing
    if sharing.mode is SharingMode.MIG and sharing.mig_strategy is MigStrategy.MIXED:
        return f"nvidia.com/mig-{sharing.mig_profile.removeprefix('all-')}"
    return "nvidia.com/gpu"


def deploy(
    cfg: StackConfig,
    provider: k8s.Provider,
    after: list[pulumi.Resource],
    nodes_ready: list[pulumi.Resource] | None = None,
) -> ClusterLayers:
    """`after`: what must exist before any in-cluster layer (the CNI, node labels).
    `nodes_ready`: steps that finish when GPU nodes are Ready; the gate waits for them so its
    deadline does not run while drivers are still being installed on the hosts."""
    opts = pulumi.ResourceOptions(provider=provider, depends_on=after)

    # --- GPU software stack and the GPU-ready gate ---
    # dev clusters' nodes bring their own driver, like lab hosts with nvidiaDriver.preinstalled.
    driver_on_host = cfg.platform is Platform.DEV or cfg.nvidia_driver.preinstalled
    gpu = GpuSoftwareStack("gpu", GpuSoftwareStackArgs(gpu=cfg.gpu, driver_on_host=driver_on_host), opts=opts)
    gate = None
    if cfg.gpu.gate.enabled and cfg.gpu_node_count > 0:
        gate = GpuReadyGate(
            "gpu-ready",
            GpuReadyGateArgs(
                gpu_nodes=cfg.gpu_node_count,
                timeout_minutes=cfg.gpu.gate.timeout_minutes,
                gpu_resource=gate_resource(cfg),
            ),
            opts=pulumi.ResourceOptions(
                provider=provider, depends_on=[*after, *(nodes_ready or []), gpu, *gpu.resources]
            ),
        )
    layers = ClusterLayers(gpu=gpu, gate=gate)
    layers.outputs["gpuStack"] = cfg.gpu.stack.value
    layers.outputs["gpuReadyGate"] = (
        gate.result if gate is not None else "skipped: disabled or no GPU node configured"
    )

    # --- monitoring ---

    # --- shared storage and training ---

    return layers
