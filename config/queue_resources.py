"""A team's CPU and memory quota against the nodes of the GPU flavors, where their size is known.

Kueue holds a team's `cpu` and `memory` as a nominal quota in every GPU flavor (components/queues/
objects.py), and a flavor's pods run on that flavor's nodes only: a quota larger than every
flavor's nodes can hold is a guarantee no flavor can keep. Read from the GPU inventory
(config/inventory.py): known on gke, where each GPU pool's machine type has a size (its row in
config/gcp/machines.py, less GKE's reservations: the node allocatable) and its maximum is maxNodes
x zones; lab hosts and dev nodes declare no CPU or memory, so nothing is claimed there. Refused, naming queues.teams[i].cpu or .memory: a team's quota beyond the
largest flavor. The teams together are not held to it: CPU and memory are not the scarce part, and
GPU jobs' pods draw on them only alongside GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from config.errors import Problems
from config.inventory import Inventory
from config.quantities import parse_quantity

_GIB = 1024**3


class _Team(Protocol):
    @property
    def cpu(self) -> str: ...
    @property
    def memory(self) -> str: ...


def flavor_resources(inv: Inventory) -> dict[str, tuple[float, float]] | None:
    """GPU flavor name -> (allocatable cores, bytes) of its nodes at their maximum; None when a
    group's node size is not known (lab and dev declare none)."""
    out: dict[str, tuple[float, float]] = {}
    for g in inv.groups:
        if g.allocatable is None:
            return None
        cpu, memory = g.allocatable
        have = out.get(g.flavor, (0.0, 0.0))
        out[g.flavor] = (have[0] + g.node_count * cpu, have[1] + g.node_count * memory)
    return out


def resource_problems(teams: Sequence[_Team], inv: Inventory) -> Problems:
    """Each team's cpu and memory within the largest GPU flavor's nodes, where their size is known."""
    sizes = flavor_resources(inv)
    if not sizes:
        return []
    problems: Problems = []
    most_cpu = max(sizes.items(), key=lambda kv: kv[1][0])
    most_memory = max(sizes.items(), key=lambda kv: kv[1][1])
    for i, t in enumerate(teams):
        cpu = float(parse_quantity(t.cpu))
        if cpu > most_cpu[1][0]:
            problems.append((f"queues.teams[{i}].cpu", f"{t.cpu} CPUs, but the nodes of the largest GPU flavor "
                                                       f"({most_cpu[0]}) have {most_cpu[1][0]:.1f} allocatable at "
                                                       "gke.gpuPools[].autoscaling.maxNodes x zones: the quota could "
                                                       "never be used in any flavor"))
        memory = float(parse_quantity(t.memory))
        if memory > most_memory[1][1]:
            problems.append((f"queues.teams[{i}].memory", f"{t.memory}, but the nodes of the largest GPU flavor "
                                                          f"({most_memory[0]}) have {most_memory[1][1] / _GIB:.1f}Gi "
                                                          "allocatable at gke.gpuPools[].autoscaling.maxNodes x "
                                                          "zones: the quota could never be used in any flavor"))
    return problems
