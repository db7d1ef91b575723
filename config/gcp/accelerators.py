"""Which NVIDIA accelerators each Compute Engine machine family takes, and how many.

A GPU node pool names a machine type and an accelerator {type, count}; GKE rejects a wrong pair
only after minutes of provisioning (or, for a count a2/a3/g2 machines do not come with, with an
error naming neither the pool nor the fix). `check` rejects it before anything is registered.

Accelerator-optimized families (a2, a3, a4, g2) come with a fixed number of GPUs per machine type; the
general-purpose n1 family takes attachable GPUs in the counts Compute Engine allows. Not modelled:
per-count vCPU/memory ceilings of n1 machines, per-zone availability and quota (GKE reports those).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from config.gcp.machine_types import check_general_purpose
from config.gcp.machines import GPU_MACHINES, REFUSED_FAMILIES


@dataclass(frozen=True)
class Accelerator:
    type: str  # the Compute Engine accelerator type
    product: str
    # MIG partition sizes GKE accepts for gpu_partition_size (empty: no MIG)
    mig_partitions: tuple[str, ...] = ()
    memory_gb: int = 0  # memory of one GPU (Google, "GPU machine types": the GPU models' table)


ACCELERATORS: dict[str, Accelerator] = {
    a.type: a
    for a in (
        Accelerator("nvidia-tesla-a100", "A100 40GB", ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"), 40),
        Accelerator("nvidia-a100-80gb", "A100 80GB", ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"), 80),
        Accelerator("nvidia-h100-80gb", "H100 80GB", ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
                    80),
        # A3 Mega; GKE's multi-instance GPU page lists A100 and H100 (80GB), not H100 Mega: no MIG here.
        Accelerator("nvidia-h100-mega-80gb", "H100 Mega 80GB", memory_gb=80),
        # A3 Ultra and A4 (Google, "GPU machine types", cloud.google.com/compute/docs/gpus: "A4: NVIDIA
        # B200 Blackwell GPUs (nvidia-b200)", "A3 Ultra: NVIDIA H200 SXM GPUs (nvidia-h200-141gb)").
        # MIG: GKE's "Running multi-instance GPUs" (cloud.google.com/kubernetes-engine/docs/how-to/gpus-multi;
        # read from a mirror, retrosearch.org, 2026-11-28) partitions "an NVIDIA A100, H100, H200, or B200"
        # GPU, each of 7 compute and 8 memory units, sizes written [compute]g.[memory]gb. GKE's API defines
        # the field's values as NVIDIA's: AcceleratorConfig.gpuPartitionSize "Valid values are described
        # in the NVIDIA mig user guide" (container v1 API reference; pulumi_gcp 10.2.0's
        # NodePoolNodeConfigGuestAcceleratorArgs.gpu_partition_size says the same), and older versions of
        # the how-to page sent readers to NVIDIA's partitioning table. So the sizes below are NVIDIA's
        # profiles of those GPUs ("Supported MIG Profiles", H200 141GB and B200 180GB tables,
        # config/mig_profiles.py). The how-to page's own per-GPU table could not be read from any copy
        # here; a third-party summary of it lists no 4g size (not confirmed either way).
        Accelerator("nvidia-h200-141gb", "H200 141GB",
                    ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"), 141),
        Accelerator("nvidia-b200", "B200",
                    ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"), 180),
        Accelerator("nvidia-l4", "L4", memory_gb=24),
        Accelerator("nvidia-tesla-t4", "T4", memory_gb=16),
        Accelerator("nvidia-tesla-v100", "V100", memory_gb=16),
        Accelerator("nvidia-tesla-p4", "P4", memory_gb=8),
        Accelerator("nvidia-tesla-p100", "P100", memory_gb=16),
    )
}

# Accelerator-optimized machine types: type -> (accelerator, the fixed GPU count), from the one table.
FIXED: dict[str, tuple[str, int]] = {m.name: (m.accelerator, m.gpus) for m in GPU_MACHINES.values()}

# n1 machines take attachable GPUs: accelerator -> allowed counts per machine.
N1_ATTACHABLE: dict[str, tuple[int, ...]] = {
    "nvidia-tesla-t4": (1, 2, 4),
    "nvidia-tesla-v100": (1, 2, 4, 8),
    "nvidia-tesla-p4": (1, 2, 4),
    "nvidia-tesla-p100": (1, 2, 4),
}
_N1 = re.compile(r"n1-(standard|highmem|highcpu)-[0-9]+")


def check(machine_type: str, accelerator_type: str, count: int) -> list[tuple[str, str]]:
    """Problems with this combination, as (sub-key of the pool, message); empty when it is valid."""
    if (refused := REFUSED_FAMILIES.get(machine_type.split("-", 1)[0])) is not None:
        return [("machineType", f"{machine_type}: {refused}")]
    if accelerator_type not in ACCELERATORS:
        return [("accelerator.type", f"unknown accelerator {accelerator_type!r}; known: {', '.join(ACCELERATORS)}")]
    if machine_type in FIXED:
        fixed_type, fixed_count = FIXED[machine_type]
        problems = []
        if accelerator_type != fixed_type:
            problems.append(
                ("accelerator.type", f"{machine_type} comes with {fixed_type} ({ACCELERATORS[fixed_type].product}), "
                                     f"not {accelerator_type}")
            )
        if count != fixed_count:
            problems.append(
                ("accelerator.count", f"{machine_type} comes with exactly {fixed_count} {fixed_type}; got {count}")
            )
        return problems
    if _N1.fullmatch(machine_type):
        if shape_problem := check_general_purpose(machine_type):
            return [("machineType", shape_problem)]
        if accelerator_type not in N1_ATTACHABLE:
            return [("accelerator.type", f"n1 machines take {', '.join(N1_ATTACHABLE)}; {accelerator_type} needs "
                                         f"its own machine family ({_family_of(accelerator_type)})")]
        allowed = N1_ATTACHABLE[accelerator_type]
        if count not in allowed:
            return [("accelerator.count", f"n1 machines take {', '.join(map(str, allowed))} {accelerator_type}; "
                                          f"got {count}")]
        return []
    family = machine_type.split("-", 1)[0]
    if family in {t.split("-", 1)[0] for t in FIXED}:
        known = ", ".join(t for t in FIXED if t.startswith(family + "-"))
        return [("machineType", f"{machine_type} is not a GPU machine type of {family}; known: {known}")]
    return [("machineType", f"{machine_type!r} is not a GPU machine type this program knows: {', '.join(FIXED)}, "
                            "n1-(standard|highmem|highcpu)-* (config/gcp/machines.py: a machine type without a row "
                            "there has no known size)")]


def _family_of(accelerator_type: str) -> str:
    types = sorted({t for t, (acc, _) in FIXED.items() if acc == accelerator_type})
    return ", ".join(types) or "none"
