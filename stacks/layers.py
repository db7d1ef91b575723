"""The in-cluster layers every stack gets, whatever made the cluster."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.config import MigStrategy, Platform, SharingMode, StackConfig
from components.gpu_stack import GpuSoftwareStack, GpuSoftwareStackArgs
from components.ready_gate import GpuReadyGate, GpuReadyGateArgs


@dataclass(frozen=True)
class ClusterLayers:
    gpu: GpuSoftwareStack
    gate: GpuReadyGate | None  # GPU workloads depend on this

    def outputs(self) -> dict[str, object]:
        gate: object = self.gate.result if self.gate is not None else "skipped: disabled or no GPU node configured"
        return {"gpuStack": self.gpu_stack, "gpuReadyGate": gate}

    gpu_stack: str = ""


def gate_resource(cfg: StackConfig) -> str:
    """The extended resource one gate pod asks for (a MIG slice under the mixed strategy)."""
    sharing = cfg.gpu.sharing
    if sharing.mode is SharingMode.MIG and sharing.mig_strategy is MigStrategy.MIXED:
        return f"nvidia.com/mig-{sharing.mig_profile.removeprefix('all-')}"
    return "nvidia.com/gpu"


def deploy(cfg: StackConfig, provider: k8s.Provider, after: list[pulumi.Resource]) -> ClusterLayers:
    opts = pulumi.ResourceOptions(provider=provider, depends_on=after)
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
            opts=pulumi.ResourceOptions(provider=provider, depends_on=[*after, gpu, *gpu.resources]),
        )
    return ClusterLayers(gpu=gpu, gate=gate, gpu_stack=cfg.gpu.stack.value)
