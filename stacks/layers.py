"""The in-cluster layers every stack gets, whatever made the cluster.

Order: (monitoring: its CRDs come first) -> GPU software stack -> GPU-ready gate -> (shared storage,
training). Each
platform's wiring (stacks/lab.py, dev.py, gke.py) builds the cluster and its provider, then calls
deploy() with what the cluster must finish first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
from pulumi_command import remote

from components import scheduling
from components.gpu_stack import GpuSoftwareStack, GpuSoftwareStackArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.ready_gate import GpuReadyGate, GpuReadyGateArgs
from components.storage_contract import SharedClaim
from components.training import layer as training_layer
from config import DevStack, GkeStack, LabStack, StackConfig
from config.gke import GkeDriver
from config.gpu import MigStrategy, SharingMode


@dataclass
class ClusterLayers:
    gpu: GpuSoftwareStack
    gate: GpuReadyGate | None  # GPU workloads depend on this
    monitoring: Monitoring | None = None
    outputs: dict[str, object] = field(default_factory=dict)


def gate_resource(cfg: StackConfig) -> str:
    """The extended resource one gate pod asks for (a MIG slice under the mixed strategy)."""
    sharing = cfg.gpu.sharing
    mixed = sharing.mode is SharingMode.MIG and sharing.mig_strategy is MigStrategy.MIXED
    return scheduling.gpu_resource(sharing.mig_profile if mixed else None)


def gpu_node_names(cfg: StackConfig) -> tuple[str, ...]:
    """GPU nodes the config names: lab hosts with GPUs, dev gpuNodes (gke's come and go: none)."""
    if isinstance(cfg, DevStack):
        return tuple(cfg.gpu_nodes)
    if isinstance(cfg, LabStack):
        return tuple(h.name for h in cfg.hosts if h.is_gpu)
    return ()


def deploy(
    cfg: StackConfig,
    provider: k8s.Provider,
    after: list[pulumi.Resource],
    nodes_ready: list[pulumi.Resource] | None = None,
    shared_claim: SharedClaim | None = None,
    nfs_connection: remote.ConnectionArgs | None = None,
    nfs_after: list[pulumi.Resource] | None = None,
) -> ClusterLayers:
    """`after`: what must exist before any in-cluster layer (the CNI, node labels).
    `nodes_ready`: steps that finish when GPU nodes are Ready; the gate waits for them so its
    deadline does not run while drivers are still being installed on the hosts."""
    opts = pulumi.ResourceOptions(provider=provider, depends_on=after)

    # --- monitoring (first: the DCGM exporter's ServiceMonitor needs the prometheus-operator CRDs) ---
    monitoring = None
    if cfg.monitoring.enabled:
        monitoring = Monitoring("monitoring", MonitoringArgs(monitoring=cfg.monitoring), opts=opts)

    # --- GPU software stack and the GPU-ready gate ---
    # dev clusters' nodes bring their own driver, like lab hosts with nvidiaDriver.preinstalled.
    driver_on_host = isinstance(cfg, DevStack) or (isinstance(cfg, LabStack) and cfg.nvidia_driver.preinstalled)
    gke = isinstance(cfg, GkeStack)
    if isinstance(cfg, GkeStack):  # GKE's driver install or Google's installer DaemonSet, unless the operator owns drivers
        driver_on_host = all(p.driver is not GkeDriver.NONE for p in cfg.gke.gpu_pools)
    gpu = GpuSoftwareStack(
        "gpu",
        GpuSoftwareStackArgs(gpu=cfg.gpu, driver_on_host=driver_on_host, service_monitor=monitoring is not None,
                             device_plugin=not gke, gke=gke, gpu_nodes=gpu_node_names(cfg),
                             nodes_ready=tuple(nodes_ready or ())),
        opts=opts if monitoring is None else pulumi.ResourceOptions(
            provider=provider, depends_on=[*after, monitoring.release]
        ),
    )
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

    # --- monitoring --- (deployed above, before the GPU stack)
    if monitoring is not None:
        layers.monitoring = monitoring
        layers.outputs["grafanaAdminPassword"] = monitoring.grafana_admin_password
        layers.outputs["grafanaPortForward"] = monitoring.grafana_port_forward

    # --- shared storage and training ---
    # `shared_claim`: a claim the platform made itself (gke: Filestore); lab and dev get theirs
    # from storage config. `nfs_connection`: lab, storage.provision (the control plane's SSH);
    # `nfs_after`: that host's NodePrep.done, so the NFS server's apt-get does not race node prep.
    training = training_layer.deploy(
        cfg, provider, after, layers.gate, shared_claim=shared_claim, nfs_connection=nfs_connection,
        nfs_after=nfs_after,
    )
    layers.outputs.update(training.outputs or {})

    return layers
