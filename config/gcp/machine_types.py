"""General-purpose Compute Engine machine types the CPU system pool may use.

A typo (`e2-standard-5`, `n2-hignmem-8`) otherwise fails only when GKE creates the pool. Shapes
are `<family>-<standard|highmem|highcpu>-<vCPUs>` with the vCPU counts each family offers, plus
e2's shared-core types. Not modelled: custom machine types, per-zone availability, quota (GKE
reports those). GPU machine types are in accelerators.py.

Imports nothing of the project, so the config model can use it.
"""

from __future__ import annotations

import re

# family -> shape -> vCPU counts
GENERAL_PURPOSE: dict[str, dict[str, tuple[int, ...]]] = {
    "e2": {
        "standard": (2, 4, 8, 16, 32),
        "highmem": (2, 4, 8, 16),
        "highcpu": (2, 4, 8, 16, 32),
    },
    "n1": {
        "standard": (1, 2, 4, 8, 16, 32, 64, 96),
        "highmem": (2, 4, 8, 16, 32, 64, 96),
        "highcpu": (2, 4, 8, 16, 32, 64, 96),
    },
    "n2": {
        "standard": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128),
        "highmem": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128),
        "highcpu": (2, 4, 8, 16, 32, 48, 64, 80, 96),
    },
    "n2d": {
        "standard": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
        "highmem": (2, 4, 8, 16, 32, 48, 64, 80, 96),
        "highcpu": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
    },
    "n4": {
        "standard": (2, 4, 8, 16, 32, 48, 64, 80),
        "highmem": (2, 4, 8, 16, 32, 48, 64, 80),
        "highcpu": (2, 4, 8, 16, 32, 48, 64, 80),
    },
    "c3": {
        "standard": (4, 8, 22, 44, 88, 176),
        "highmem": (4, 8, 22, 44, 88, 176),
        "highcpu": (4, 8, 22, 44, 88, 176),
    },
    "t2d": {"standard": (1, 2, 4, 8, 16, 32, 48, 60)},
}
# e2 shared-core types GKE accepts for nodes (e2-micro and e2-small are too small for add-ons).
SHARED_CORE = ("e2-medium",)

_SHAPE = re.compile(r"([a-z][a-z0-9]*)-([a-z]+)-([0-9]+)")


def check_general_purpose(machine_type: str) -> str | None:
    """What is wrong with `machine_type` for the system pool, or None when it is known."""
    if machine_type in SHARED_CORE:
        return None
    families = ", ".join(f"{f}-({'|'.join(shapes)})-<vCPUs>" for f, shapes in GENERAL_PURPOSE.items())
    m = _SHAPE.fullmatch(machine_type)
    if not m or m.group(1) not in GENERAL_PURPOSE:
        return f"{machine_type!r} is not a general-purpose machine type this program knows: {families}, e2-medium"
    family, shape, cpus = m.group(1), m.group(2), int(m.group(3))
    counts = GENERAL_PURPOSE[family].get(shape)
    if counts is None:
        return f"{family} has no {shape!r} shape; shapes: {', '.join(GENERAL_PURPOSE[family])}"
    if cpus not in counts:
        return f"{family}-{shape} comes with {', '.join(map(str, counts))} vCPUs; got {cpus}"
    return None
