"""`queues`: the GPU flavors of lab (one per GPU model), the Kueue Topology of each platform, the
level RDMA jobs require (`queues.rdmaTopologyLevel`), and the teams' GPU quotas against the flavors.

Flavors on lab: one ResourceFlavor per `hosts[].gpuModel`, in the order the hosts first name them
(Kueue tries a ClusterQueue's flavors in order), selecting GPU_MODEL_LABEL, which node prep's
NodePatch writes from the config. Not GFD's own nvidia.com/gpu.product: GFD runs on every lab GPU
stack, but it rewrites that label with the sharing mode ("<model>-SHARED" under time-slicing,
"<model>-MIG-<profile>" under MIG's single strategy, none at all on a GPU fully split under the
mixed one: NVIDIA/k8s-device-plugin internal/lm/resource.go, productLabel), and only once its pod
runs; a flavor selecting it would match no node in those modes. Without models: one flavor `gpu`.

Topology (Kueue "Topology Aware Scheduling", kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling):
levels are node labels, top first, kubernetes.io/hostname only ever last; Kueue leaves a node that
lacks any level's label out of the flavor (pkg/cache/scheduler/tas_flavor.go: the flavor's nodes
are found by its nodeLabels and the levels). So:
- lab: block -> rack -> hostname, only the levels every GPU host names (config/lab_hosts.py);
- gke: Google's own labels, cloud.google.com/gce-topology-block -> -subblock -> -host ->
  kubernetes.io/hostname (Google, "Schedule GKE workloads with Topology Aware Scheduling",
  cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas, "Topology of GKE
  nodes on A4 and A3 Ultra VMs": the four labels it lists for a node's physical place). GKE writes
  them only on some capacity (docs/queues.md), and Kueue's Topology page
  (kueue.sigs.k8s.io/docs/concepts/topology) says each level is "a node label that nodes in your
  cluster must have", so the GPU flavors name the Topology only when `queues.rdmaTopologyLevel`
  is set: on nodes without the labels it would admit nothing. Google documents them for A4 and A3
  Ultra VMs (config/gcp/accelerators.py TOPOLOGY_LABELLED), the block being "the reserved block in
  which the VM is located": a pool of those machine types with provisioning reservation is a
  labelled pool here. The level is refused on gke without one; with one, render warns that whether
  a job's nodes land in one domain is Google's placement, which no offline check knows;
- dev: none.
`rdmaTopologyLevel` (block | rack | host; on gke rack is Google's sub-block, host its physical host):
the level whose one domain must hold every pod of a job over RDMA (lab) or of a multi-node job
(gke). Default: rack where racks exist, else block where blocks do; unset on gke and dev.
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Any

from components.scheduling_contract import (
    BLOCK_LABEL,
    GKE_BLOCK_LABEL,
    GKE_HOST_LABEL,
    GKE_SUBBLOCK_LABEL,
    GPU_MODEL_LABEL,
    GPU_NODE_LABEL,
    RACK_LABEL,
)
from config.errors import Problems
from config.gcp.accelerators import TOPOLOGY_LABELLED

if TYPE_CHECKING:
    from config.queues import Flavor

TOPOLOGY_NAME = "gpu-cluster-topology"  # the one Topology of a cluster, when it has one
HOSTNAME_LABEL = "kubernetes.io/hostname"  # Kueue: only ever the lowest level


class TopologyLevel(enum.StrEnum):
    BLOCK = "block"
    RACK = "rack"
    HOST = "host"


LAB_LEVEL_LABEL = {TopologyLevel.BLOCK: BLOCK_LABEL, TopologyLevel.RACK: RACK_LABEL, TopologyLevel.HOST: HOSTNAME_LABEL}
GKE_LEVEL_LABEL = {TopologyLevel.BLOCK: GKE_BLOCK_LABEL, TopologyLevel.RACK: GKE_SUBBLOCK_LABEL,
                   TopologyLevel.HOST: GKE_HOST_LABEL}
GKE_LEVELS = (GKE_BLOCK_LABEL, GKE_SUBBLOCK_LABEL, GKE_HOST_LABEL, HOSTNAME_LABEL)


def _gpu_hosts(stack: Any) -> list[Any]:
    return [h for h in stack.hosts if h.is_gpu]


def _lab_named(stack: Any, field: str) -> bool:
    """Every GPU host names its `field` (config/lab_hosts.py refuses some-but-not-all)."""
    gpu = _gpu_hosts(stack)
    return bool(gpu) and all(getattr(h, field) for h in gpu)


def rdma_level(stack: Any) -> TopologyLevel | None:
    """queues.rdmaTopologyLevel, or its default: lab's rack, else its block, where hosts name them."""
    level: TopologyLevel | None = stack.queues.rdma_topology_level
    if level is not None or str(stack.platform) != "lab":
        return level
    if _lab_named(stack, "rack"):
        return TopologyLevel.RACK
    return TopologyLevel.BLOCK if _lab_named(stack, "block") else None


def topology(stack: Any) -> tuple[str, tuple[str, ...]] | None:
    """The cluster's Kueue Topology: (name, node-label levels top first), or None."""
    platform, level = str(stack.platform), rdma_level(stack)
    if platform == "gke":
        return (TOPOLOGY_NAME, GKE_LEVELS) if level is not None else None
    if platform != "lab":
        return None
    levels = [label for field, label in (("block", BLOCK_LABEL), ("rack", RACK_LABEL)) if _lab_named(stack, field)]
    if levels or level is TopologyLevel.HOST:
        return TOPOLOGY_NAME, (*levels, HOSTNAME_LABEL)
    return None


def required_topology(stack: Any) -> str | None:
    """The node label of the level a job over RDMA (lab) or across nodes (gke) must fit in one domain of."""
    level = rdma_level(stack) if stack.queues.enabled else None
    if level is None or topology(stack) is None:
        return None
    return (GKE_LEVEL_LABEL if str(stack.platform) == "gke" else LAB_LEVEL_LABEL)[level]


def flavor_name(model: str) -> str:
    """A GPU model as a ResourceFlavor name (an RFC 1123 label): NVIDIA-H100-80GB-HBM3 -> nvidia-h100-80gb-hbm3."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:63].rstrip("-")


def lab_flavors(stack: Any) -> tuple[Flavor, ...]:
    """One flavor per GPU model of the hosts (first named first), or one `gpu` flavor without models."""
    from config.queue_units import describe, units_per_gpu
    from config.queues import Flavor

    gpu, topo, unit = _gpu_hosts(stack), topology(stack), describe(stack.gpu)

    def size(hosts: list[Any], model: str | None) -> int | None:
        """The hosts' GPUs in the covered resource's units (config/queue_units.py); None: unknown."""
        per_gpu = units_per_gpu(stack.gpu, model)
        return None if isinstance(per_gpu, str) else sum(h.gpus for h in hosts) * per_gpu

    models = list(dict.fromkeys(h.gpu_model for h in gpu if h.gpu_model))
    if not models:
        return (Flavor("gpu", {GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]}, size(gpu, None), "hosts[].gpus", topo,
                       unit=unit),)
    return tuple(Flavor(flavor_name(m), {GPU_MODEL_LABEL: m}, size([h for h in gpu if h.gpu_model == m], m),
                        f"hosts[].gpus of the {m} hosts", topo, model=m, unit=unit) for m in models)


def team_gpus(t: Any, f: Flavor) -> int:
    """A team's nominal GPUs in a flavor as configured (in the covered resource's units): a number is
    for every flavor, a mapping GPU model -> count for every flavor of the models it names (gke: an
    on-demand and a flexStart pool of one accelerator type are two flavors of one model)."""
    if isinstance(t.gpus, dict):
        return int(t.gpus.get(f.model, 0)) if f.model is not None else 0
    return int(t.gpus)


def capped_gpus(t: Any, f: Flavor) -> int:
    """team_gpus, capped at the flavor's size where known: what the team's ClusterQueue holds there."""
    gpus = team_gpus(t, f)
    return min(gpus, f.gpus) if f.gpus is not None else gpus


def level_problems(q: Any, stack: Any) -> Problems:
    """queues.rdmaTopologyLevel names a level the cluster has."""
    level: TopologyLevel | None = q.rdma_topology_level
    if level is None:
        return []
    key = "queues.rdmaTopologyLevel"
    if not q.enabled:
        return [(key, "is set but queues.enabled is false")]
    platform = str(stack.platform)
    if platform == "dev":
        return [(key, "dev's nodes have no topology levels: leave it unset")]
    if platform == "lab" and level is not TopologyLevel.HOST and not _lab_named(stack, level.value):
        return [(key, f"{level.value}: no GPU host names its {level.value} (hosts[].{level.value}); "
                      f"the levels this lab has: {', '.join(_lab_levels(stack))}")]
    if platform == "gke" and not labelled_pools(stack):
        pools = ", ".join(f"{p.name} ({p.machine_type}, {p.provisioning.value})" for p in stack.gke.gpu_pools)
        return [(key, f"{level.value}: no GPU pool carries Google's topology labels, so Kueue would leave every "
                      f"GPU node out of the flavors and admit no job that requires the level (gke.gpuPools: "
                      f"{pools or 'none'}); Google writes cloud.google.com/gce-topology-* on "
                      f"{' and '.join(TOPOLOGY_LABELLED)} nodes of a reservation (its block is 'the reserved "
                      "block in which the VM is located'): add such a pool with provisioning reservation, or "
                      "leave the level unset")]
    return []


def labelled_pools(stack: Any) -> list[Any]:
    """The gke GPU pools whose nodes Google labels with their topology: an A4 or A3 Ultra machine
    type (config/gcp/accelerators.py TOPOLOGY_LABELLED) consuming a reservation."""
    from config.gke_provisioning import GkeProvisioning

    return [p for p in stack.gke.gpu_pools
            if p.machine_type in TOPOLOGY_LABELLED and p.provisioning is GkeProvisioning.RESERVATION]


def topology_warnings(stack: Any) -> list[str]:
    """render's warnings: on gke, the multi-node jobs require one domain of the level, and which
    domain each node of a labelled pool lands in is Google's placement: the check cannot see it."""
    label = required_topology(stack)
    if str(stack.platform) != "gke" or label is None:
        return []
    level = rdma_level(stack)
    assert level is not None
    nodes = stack.training.nodes
    jobs = [name for name, on in (("the NCCL acceptance", stack.acceptance.nccl), ("training", stack.training.enabled))
            if on]
    if nodes < 2 or not jobs:
        return []
    verb = "require their" if len(jobs) > 1 else "requires its"
    return [f"gpu-cluster:queues.rdmaTopologyLevel {level.value}: {' and '.join(jobs)} {verb} {nodes} nodes "
            f"in one {label} domain; Google writes that label on gke.gpuPools[{stack.gke.gpu_pools.index(p)}] "
            f"({p.name}, {p.machine_type}, reservation {p.reservation}) but its values are not known offline: the "
            f"check judged the jobs on quota and per-node fit, whether their {nodes} nodes land in one {label} "
            "domain depends on Google's placement and is not checked offline (`kubectl get nodes -L "
            f"{label}`)" for p in labelled_pools(stack)]


def _lab_levels(stack: Any) -> list[str]:
    return [name for name in ("block", "rack") if _lab_named(stack, name)] + ["host"]


def _count(n: int, f: Flavor) -> str:
    return f"{n} GPUs" if f.unit == "GPUs" else f"{n} {f.unit}"


def quota_problems(teams: Any, flavors: tuple[Flavor, ...]) -> Problems:
    """Each team's GPUs within each flavor (a mapping's count within at least one flavor of its model:
    it is capped at each), a mapping's models among the flavors', the teams' nominal GPUs together
    within each flavor (a nominal quota is a guarantee). Counts are in the units of the GPU resource
    the ClusterQueues cover (config/queue_units.py: MIG slices, time-sliced replicas)."""
    problems: Problems = []
    by_model: dict[str, list[Flavor]] = {}
    for f in flavors:
        if f.model is not None:
            by_model.setdefault(f.model, []).append(f)
    models = ", ".join(by_model) or "none (lab: hosts[].gpuModel; gke: gke.gpuPools[].accelerator.type)"
    for i, t in enumerate(teams):
        key = f"queues.teams[{i}].gpus"
        if isinstance(t.gpus, dict):
            for model, n in t.gpus.items():
                of_model = by_model.get(model)
                if of_model is None:
                    problems.append((f"{key}.{model}", f"no GPU node has model {model!r}; the cluster's GPU models: "
                                                       f"{models}"))
                elif all(f.gpus is not None and n > f.gpus for f in of_model):
                    sizes = ", ".join(f"{f.name} has {f.gpus}" for f in of_model)
                    problems.append((f"{key}.{model}", f"{_count(n, of_model[0])} but flavor {sizes} "
                                                       f"({of_model[0].key})"))
            continue
        for f in flavors:
            if f.gpus is not None and t.gpus > f.gpus:
                hint = "; give a mapping GPU model -> count for each model" if len(by_model) > 1 else ""
                problems.append((key, f"{_count(t.gpus, f)} but flavor {f.name} has {f.gpus} ({f.key}){hint}"))
    for f in flavors:
        total = sum(capped_gpus(t, f) for t in teams)
        if f.gpus is not None and total > f.gpus:
            problems.append(("queues.teams", f"the teams' nominal GPUs add up to {total} but flavor {f.name} has "
                                             f"{f.gpus} ({f.key}); a nominal quota is a guarantee: lend with "
                                             "borrowingLimitGpus instead"))
    return problems
