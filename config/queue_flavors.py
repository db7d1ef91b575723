"""`queues`: the GPU flavors (one per group of the stack's GPU inventory, config/inventory.py), the
Kueue Topology, the level RDMA jobs require (`queues.rdmaTopologyLevel`), and the teams' GPU quotas
against the flavors. Everything here reads the Inventory; what differs by platform is its data.

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
  Ultra VMs (config/gcp/machines.py topology_labelled), the block being "the reserved block in
  which the VM is located": a pool of those machine types with provisioning reservation is a
  labelled pool here. The level is refused on gke without one; with one, render warns that whether
  a job's nodes land in one domain is Google's placement, which no offline check knows;
- dev: none.
`rdmaTopologyLevel` (block | rack | host; on gke rack is Google's sub-block, host its physical host):
the level whose one domain must hold every pod of a job over RDMA (lab) or of a multi-node job
(gke). Default: rack where racks exist, else block where blocks do; unset on gke and dev.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from config.errors import Problems
from config.inventory import (
    HOSTNAME_LABEL,
    TOPOLOGY_NAME,
    Inventoried,
    QueuesChoice,
    TopologyLevel,
    flavor_name,
)
from config.scheduling_contract import GKE_BLOCK_LABEL, GKE_HOST_LABEL, GKE_SUBBLOCK_LABEL

__all__ = ["GKE_LEVELS", "HOSTNAME_LABEL", "TOPOLOGY_NAME", "Flavor", "TopologyLevel", "flavor_name"]

GKE_LEVELS = (GKE_BLOCK_LABEL, GKE_SUBBLOCK_LABEL, GKE_HOST_LABEL, HOSTNAME_LABEL)


@dataclass(frozen=True)
class Flavor:
    """One ResourceFlavor: a GPU kind, the node labels that pick its nodes, its GPUs (None: unknown)."""

    name: str
    node_labels: dict[str, str]
    gpus: int | None
    key: str  # the config key its size comes from, for messages
    # Kueue's Topology for this flavor's nodes (topology-aware scheduling): its name and node-label
    # levels, top first; None: no topology (jobs are admitted on quota alone).
    topology: tuple[str, tuple[str, ...]] | None = None
    model: str | None = None  # the GPU model (lab) or accelerator type (gke) a team's quota mapping names
    # What one of `gpus` is: the covered GPU resource's unit (config/queue_units.py), for messages.
    unit: str = "GPUs"


class _Team(Protocol):
    @property
    def gpus(self) -> int | dict[str, int]: ...


def rdma_level(stack: Inventoried) -> TopologyLevel | None:
    """queues.rdmaTopologyLevel, or the inventory's default (lab: its rack, else its block, where named)."""
    level = stack.queues.rdma_topology_level
    return level if level is not None else stack.inventory.default_level


def topology(stack: Inventoried) -> tuple[str, tuple[str, ...]] | None:
    """The cluster's Kueue Topology: (name, node-label levels top first), or None."""
    labels, level = stack.inventory.topology_labels, rdma_level(stack)
    if labels is None or level is None:
        return None
    return TOPOLOGY_NAME, (*labels, HOSTNAME_LABEL)


def required_topology(stack: Inventoried) -> str | None:
    """The node label of the level a job over RDMA (lab) or across nodes (gke) must fit in one domain of."""
    level = rdma_level(stack) if stack.queues.enabled else None
    if level is None or topology(stack) is None:
        return None
    return stack.inventory.level_labels[level]


def flavors(stack: Inventoried) -> tuple[Flavor, ...]:
    """The GPU flavors: one per flavor of the inventory's groups, in their order, sized by their units."""
    inv, topo = stack.inventory, topology(stack)
    out: dict[str, Flavor] = {}
    for g in inv.groups:
        size = None if isinstance(g.units, str) else g.units
        have = out.get(g.flavor)
        if have is not None:
            size = None if have.gpus is None or size is None else have.gpus + size
        out[g.flavor] = Flavor(g.flavor, g.node_labels, size, g.size_key, topo if g.in_topology else None,
                               model=g.gpu_model, unit=inv.unit)
    return tuple(out.values())


def team_gpus(t: _Team, f: Flavor) -> int:
    """A team's nominal GPUs in a flavor as configured (in the covered resource's units): a number is
    for every flavor, a mapping GPU model -> count for every flavor of the models it names (gke: an
    on-demand and a flexStart pool of one accelerator type are two flavors of one model)."""
    if isinstance(t.gpus, dict):
        return int(t.gpus.get(f.model, 0)) if f.model is not None else 0
    return int(t.gpus)


def capped_gpus(t: _Team, f: Flavor) -> int:
    """team_gpus, capped at the flavor's size where known: what the team's ClusterQueue holds there."""
    gpus = team_gpus(t, f)
    return min(gpus, f.gpus) if f.gpus is not None else gpus


def level_problems(q: QueuesChoice, stack: Inventoried) -> Problems:
    """queues.rdmaTopologyLevel names a level the cluster's GPU nodes carry."""
    level = q.rdma_topology_level
    if level is None:
        return []
    key = "queues.rdmaTopologyLevel"
    if not q.enabled:
        return [(key, "is set but queues.enabled is false")]
    inv = stack.inventory
    return [] if level in inv.levels_present else [(key, inv.missing_level.replace("{level}", level.value))]


class _Job(Protocol):
    @property
    def enabled(self) -> bool: ...
    @property
    def nodes(self) -> int: ...


class _Acceptance(Protocol):
    @property
    def nccl(self) -> bool: ...


class Trained(Inventoried, Protocol):
    @property
    def training(self) -> _Job: ...
    @property
    def acceptance(self) -> _Acceptance: ...


def topology_warnings(stack: Trained) -> list[str]:
    """render's warnings: where the nodes' level values are not known offline (gke), the multi-node
    jobs require one domain of the level, and which domain each labelled node lands in is the
    provider's placement: the check cannot see it."""
    label = required_topology(stack)
    if stack.inventory.values_known or label is None:
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
            f"in one {label} domain; Google writes that label on {g.placement} but its values are not known "
            f"offline: the check judged the jobs on quota and per-node fit, whether their {nodes} nodes land in "
            f"one {label} domain depends on Google's placement and is not checked offline (`kubectl get nodes -L "
            f"{label}`)" for g in sorted(stack.inventory.groups, key=lambda g: g.config_index) if g.topology_labelled]


def _count(n: int, f: Flavor) -> str:
    return f"{n} GPUs" if f.unit == "GPUs" else f"{n} {f.unit}"


def quota_problems(teams: Sequence[_Team], flavors: tuple[Flavor, ...]) -> Problems:
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
