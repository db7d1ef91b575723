"""A team's CPU and memory quota against the nodes of the GPU flavors, where their size is known.

Kueue holds a team's `cpu` and `memory` as a nominal quota in every GPU flavor (components/queues/
objects.py), and a flavor's pods run on that flavor's nodes only: a quota larger than every
flavor's nodes can hold is a guarantee no flavor can keep. Known only on gke, where each GPU pool's
machine type has a size (config/gcp/machine_shapes.py: vCPUs and memory less GKE's reservations,
the node allocatable) and its maximum is maxNodes x zones; lab hosts and dev nodes declare no CPU
or memory, so nothing is claimed there, nor anywhere on a gke stack with a GPU pool of unknown
shape (its flavor might be the largest). Refused, naming queues.teams[i].cpu or .memory: a team's quota beyond the
largest flavor. The teams together are not held to it: CPU and memory are not the scarce part, and
GPU jobs' pods draw on them only alongside GPUs.
"""

from __future__ import annotations

from typing import Any

from config.errors import Problems
from config.gcp.machine_shapes import gke_allocatable, machine_shape
from config.quantities import parse_quantity

_GIB = 1024**3


def gke_flavor_resources(stack: Any) -> dict[str, tuple[float, float]] | None:
    """GPU flavor name -> (allocatable cores, bytes) of its nodes at their maximum; None when a
    pool's machine type has no known shape (or the stack is not gke)."""
    if str(stack.platform) != "gke":
        return None
    from config.gke_provisioning import GkeProvisioning, flex_start_flavor_name

    out: dict[str, tuple[float, float]] = {}
    for pool in stack.gke.gpu_pools:
        shape = machine_shape(pool.machine_type)
        if shape is None:
            return None
        cpu, memory = gke_allocatable(*shape)
        nodes = pool.autoscaling.max_nodes * len(pool.zones)
        name = (flex_start_flavor_name(pool) if pool.provisioning is GkeProvisioning.FLEX_START
                else pool.accelerator.type)
        have = out.get(name, (0.0, 0.0))
        out[name] = (have[0] + nodes * cpu, have[1] + nodes * memory)
    return out


def resource_problems(teams: Any, stack: Any) -> Problems:
    """Each team's cpu and memory within the largest GPU flavor's nodes, where their size is known."""
    sizes = gke_flavor_resources(stack)
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
