"""GPUDirect on the gke stack: which pools get their family's GPU network (gke.gpuPools[].gpuDirect,
the facts in config/gcp/gpudirect.py), which network the multi-node jobs use, the bandwidth their
NCCL acceptance follows, and what is refused before any resource is registered.

Refused (exit 2): a family the table marks unsupported (none now: TCPX, TCPXO and RDMA are built);
GPUDirect pools with gke.dataplane legacy (GKE multi-networking needs Dataplane V2); an RDMA
pool over several zones, or RDMA pools in different zones (the RoCE VPC's network profile is one
zone's); multi-node jobs with GPUDirect pools of two families (a pod attaches to one family's
networks); a declared network.linkGbps above the machine's documented GPU network.
A multi-node job on such a machine without its network (gpuDirect off) is the check's exit 3
(render/cluster/gpudirect_check.py): the pool may still serve single-node jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from config.errors import Problems
from config.gcp.gpudirect import BANDWIDTH_PAGE, GPUDIRECT, MACHINE_GPUDIRECT, GpuDirect, GpuDirectKind
from config.gke_pools import GkeGpuDirect, GpuPool


def pool_gpudirect(pool: GpuPool) -> GpuDirect | None:
    """The pool's GPU network: its family's with gpuDirect auto, None with off or on other machines."""
    kind = MACHINE_GPUDIRECT.get(pool.machine_type)
    if kind is None or pool.gpu_direct is GkeGpuDirect.OFF:
        return None
    return GPUDIRECT[kind]


@dataclass(frozen=True)
class JobGpuDirect:
    """What a multi-node job's pods attach to: one family's networks, on that family's pools."""

    gpudirect: GpuDirect
    accelerators: tuple[str, ...]  # the pools' accelerator types (the pods' node selector)
    zone: str | None  # RDMA: the one zone of its pools (the RoCE VPC's profile)


class _Stack(Protocol):
    """What is read of the gke stack (config/gke.py GkeStack, which imports this module)."""

    @property
    def gke(self) -> Any: ...
    @property
    def training(self) -> Any: ...
    @property
    def acceptance(self) -> Any: ...


def multinode_jobs(stack: _Stack) -> bool:
    """A job across nodes runs: training over training.nodes > 1, or the NCCL acceptance."""
    t = stack.training
    return t.nodes > 1 and (t.enabled or stack.acceptance.nccl)


def job_gpudirect(pools: tuple[GpuPool, ...]) -> JobGpuDirect | None:
    """The GPU network of the stack's pools with one (None: none has); the first family's when
    several (refused by gpudirect_problems with multi-node jobs)."""
    on = [(p, g) for p in pools if (g := pool_gpudirect(p)) is not None and g.unsupported is None]
    if not on:
        return None
    first = on[0][1]
    same = [p for p, g in on if g.kind is first.kind]
    zones = sorted({z for p in same for z in p.zones})
    return JobGpuDirect(first, tuple(dict.fromkeys(p.accelerator.type for p in same)),
                        zones[0] if first.kind is GpuDirectKind.RDMA and zones else None)


def jobs_gpudirect(stack: _Stack) -> JobGpuDirect | None:
    """The GPU network the stack's multi-node jobs attach to: the GPUDirect pools' family when the
    jobs run across nodes and each pod takes the whole machine (training.gpusPerNode = its GPUs), as
    every one of Google's GPUDirect workloads does (the TCPXO daemon is handed all the machine's
    GPUs); None otherwise (such pods on these machines are the check's exit 3)."""
    job = job_gpudirect(stack.gke.gpu_pools)
    if job is None or not multinode_jobs(stack):
        return None
    gpus = {p.accelerator.count for p in stack.gke.gpu_pools if p.accelerator.type in job.accelerators}
    return job if gpus == {stack.training.gpus_per_node} else None


def acceptance_link_gbps(declared: float | None, stack: _Stack) -> float | None:
    """network.linkGbps where declared, else the GPU network Google documents for the machine the
    jobs attach to (4 x 200 Gbps on A3 High, 8 x 200 Gbps on A3 Mega, 8 x 400 Gbps on A3 Ultra and A4:
    BANDWIDTH_PAGE)."""
    job = jobs_gpudirect(stack)
    if declared is not None or job is None:
        return declared
    return float(job.gpudirect.gpu_gbps)


def gpudirect_problems(stack: _Stack, declared_link_gbps: float | None, dataplane_v2: bool) -> Problems:
    problems: Problems = []
    pools: tuple[GpuPool, ...] = stack.gke.gpu_pools
    kinds: dict[GpuDirectKind, int] = {}
    rdma_zones: dict[str, int] = {}
    for i, pool in enumerate(pools):
        g = pool_gpudirect(pool)
        if g is None:
            continue
        key = f"gke.gpuPools[{i}]"
        if g.unsupported:
            problems.append((f"{key}.gpuDirect", f"auto on {pool.machine_type}: {g.unsupported}"))
            continue
        kinds.setdefault(g.kind, i)
        if not dataplane_v2:
            problems.append(("gke.dataplane", f"{key} ({pool.machine_type}) uses GPUDirect {g.kind.value}, which "
                                              "needs GKE multi-networking, and that needs Dataplane V2: set "
                                              "gke.dataplane v2 (or gpuDirect: off on the pool)"))
        if g.kind is GpuDirectKind.RDMA:
            if len(set(pool.zones)) > 1:
                problems.append((f"{key}.zones", f"{pool.machine_type} with GPUDirect RDMA takes one zone: its RoCE "
                                                 "VPC has the zone's network profile (<zone>-vpc-roce)"))
            elif pool.zones and rdma_zones and pool.zones[0] not in rdma_zones:
                (zone, first), = rdma_zones.items()
                problems.append((f"{key}.zones", f"{pool.zones[0]}: the RDMA pools share one RoCE VPC, in the zone "
                                                 f"of gke.gpuPools[{first}] ({zone})"))
            elif pool.zones:
                rdma_zones.setdefault(pool.zones[0], i)
    if len(kinds) > 1 and multinode_jobs(stack):
        named = ", ".join(f"gke.gpuPools[{i}] {k.value}" for k, i in kinds.items())
        problems.append(("gke.gpuPools", f"GPUDirect pools of different families ({named}): a multi-node job's "
                                         "pods attach to one family's networks; keep one family, or set gpuDirect: "
                                         "off on the others"))
    job = job_gpudirect(pools)
    if job is not None and declared_link_gbps is not None and declared_link_gbps > job.gpudirect.gpu_gbps:
        g = job.gpudirect
        problems.append(("network.linkGbps", f"{declared_link_gbps:g} is more than the GPU network Google documents "
                                             f"for these machines ({g.gpu_nics} x {g.nic_gbps} = {g.gpu_gbps} Gbps, "
                                             f"{BANDWIDTH_PAGE}): the acceptance could never pass; leave it unset "
                                             "to follow the machine"))
    return problems
