"""vCPUs and memory of the Compute Engine machine types a gke stack can name, and what GKE leaves of
them to pods (node allocatable). The whole-cluster check's node model (render/cluster/nodes.py) sizes
gke nodes with them, and the queues' config check holds a team's CPU and memory quota to them
(config/queue_resources.py). GPU machine types are sized by their row in config/gcp/machines.py
(the config accepts no other accelerator-optimized type); the general-purpose families by formula.

Imports only the machine table, so the config model can use it.
"""

from __future__ import annotations

import re

from config.gcp.machines import GPU_MACHINES

GIB = 1024**3

# GiB per vCPU of the general-purpose families.
PER_CPU: dict[tuple[str, str], float] = {
    ("e2", "standard"): 4, ("e2", "highmem"): 8, ("e2", "highcpu"): 1,
    ("n1", "standard"): 3.75, ("n1", "highmem"): 6.5, ("n1", "highcpu"): 0.9,
    ("n2", "standard"): 4, ("n2", "highmem"): 8, ("n2", "highcpu"): 1,
    ("n2d", "standard"): 4, ("n2d", "highmem"): 8, ("n2d", "highcpu"): 1,
    ("c3", "standard"): 4, ("c3", "highmem"): 8, ("c3", "highcpu"): 2,
    ("n4", "standard"): 4, ("n4", "highmem"): 8, ("n4", "highcpu"): 2,
}


def machine_shape(machine_type: str) -> tuple[int, float] | None:
    """(vCPUs, memory GiB) of a Compute Engine machine type, or None if not known here."""
    if machine_type in GPU_MACHINES:
        return GPU_MACHINES[machine_type].vcpus, GPU_MACHINES[machine_type].memory_gb
    m = re.fullmatch(r"([a-z0-9]+)-(standard|highmem|highcpu)-(\d+)", machine_type)
    if m and (m.group(1), m.group(2)) in PER_CPU:
        cpus = int(m.group(3))
        return cpus, cpus * PER_CPU[(m.group(1), m.group(2))]
    return None


def gke_allocatable(cpus: int, memory_gib: float) -> tuple[float, float]:
    """GKE's node allocatable (GKE docs, "Cluster architecture: node allocatable resources"):
    CPU reserves 6% of the first core, 1% of the next, 0.5% of the next 2 and 0.25% above 4;
    memory reserves 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next
    112 and 2% above 128, plus the 100 MiB eviction threshold."""
    cpu_reserved = 0.06 * min(cpus, 1) + 0.01 * min(max(cpus - 1, 0), 1) + 0.005 * min(max(cpus - 2, 0), 2) \
        + 0.0025 * max(cpus - 4, 0)
    bands = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02))
    left, mem_reserved = memory_gib, 0.0
    for size, share in bands:
        part = min(left, size)
        mem_reserved += part * share
        left -= part
        if left <= 0:
            break
    return cpus - cpu_reserved, (memory_gib - mem_reserved) * GIB - 100 * 1024**2
