"""gke GPUDirect wiring: the GPU VPCs before the pools, each pool's additional node networks, the
Network objects and installer DaemonSets once the cluster answers, and the network the multi-node
jobs attach to (config/gke_gpudirect.py decides which pools and jobs; components/gke/gpudirect_*.py
and components/training/gpudirect_pod.py build them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components import versions
from components.gke.gpudirect_installers import GpuDirectKubernetes, GpuDirectKubernetesArgs
from components.gke.gpudirect_networks import GpuDirectNetworks, GpuDirectNetworksArgs
from components.training.gpudirect_pod import PodGpuDirect
from config.gcp.gpudirect import GpuDirectKind
from config.gcp.machines import GPU_MACHINES
from config.gke import GkeStack, GpuPool
from config.gke_gpudirect import job_gpudirect, jobs_gpudirect, pool_gpudirect


@dataclass
class GpuDirectPlan:
    networks: GpuDirectNetworks | None = None
    kinds: dict[GpuDirectKind, tuple[str, ...]] = field(default_factory=dict)  # kind -> accelerators

    @property
    def enabled(self) -> bool:
        return self.networks is not None

    def pool_networks(self, pool: GpuPool) -> list[gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs] | None:
        g = pool_gpudirect(pool)
        if self.networks is None or g is None or g.kind not in self.kinds:
            return None
        return self.networks.node_network_configs(g.kind)


def networks(cfg: GkeStack) -> GpuDirectPlan:
    """The GPU VPCs of the stack's GPUDirect pools (config refuses the unsupported ones before this)."""
    kinds: dict[GpuDirectKind, tuple[str, ...]] = {}
    for p in cfg.gke.gpu_pools:
        g = pool_gpudirect(p)
        if g is not None and g.unsupported is None:
            kinds[g.kind] = tuple(dict.fromkeys([*kinds.get(g.kind, ()), p.accelerator.type]))
    if not kinds:
        return GpuDirectPlan()
    job = job_gpudirect(cfg.gke.gpu_pools)
    rdma_zone = next((p.zones[0] for p in cfg.gke.gpu_pools
                      if (g := pool_gpudirect(p)) is not None and g.kind is GpuDirectKind.RDMA), None)
    net = GpuDirectNetworks("gpudirect", GpuDirectNetworksArgs(
        project=cfg.project, region=cfg.region, cluster_name=cfg.gke.cluster_name, kinds=tuple(kinds),
        rdma_zone=rdma_zone if job is None or job.zone is None else job.zone))
    return GpuDirectPlan(net, kinds)


def in_cluster(plan: GpuDirectPlan, opts: pulumi.ResourceOptions) -> GpuDirectKubernetes | None:
    """The Network objects and DaemonSets (opts: the cluster's provider)."""
    if plan.networks is None:
        return None
    families = {k: (plan.networks.attached(k), acc) for k, acc in plan.kinds.items()}
    return GpuDirectKubernetes("gpudirect", GpuDirectKubernetesArgs(families=families), opts=pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(depends_on=plan.networks.resources)))


def pod_gpudirect(cfg: GkeStack) -> PodGpuDirect | None:
    """What multi-node jobs attach to (config/gke_gpudirect.py jobs_gpudirect says when)."""
    job = jobs_gpudirect(cfg)
    if job is None:
        return None
    machine = next(GPU_MACHINES[p.machine_type] for p in cfg.gke.gpu_pools if p.accelerator.type in job.accelerators)
    return PodGpuDirect(job.gpudirect, job.accelerators, machine_gpus=machine.gpus,
                        daemon_image=_DAEMON_IMAGES.get(job.gpudirect.kind))


# The receive-datapath manager sidecar of the families that have one.
_DAEMON_IMAGES = {GpuDirectKind.TCPX: versions.GKE_TCPX_DAEMON_IMAGE,
                  GpuDirectKind.TCPXO: versions.GKE_TCPXO_DAEMON_IMAGE}
