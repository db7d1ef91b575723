"""What one GPU counts as in Kueue's quotas: the units of the GPU resource the ClusterQueues cover.

A ClusterQueue covers the extended resource the program's GPU pods request (stacks/addons.py
gpu_resource): nvidia.com/gpu, or under MIG's mixed strategy the slice type
nvidia.com/mig-<profile>. Kueue counts quota in that resource, so a flavor's size and a team's
`gpus` are in its units, not in physical GPUs:
- no sharing: one per GPU;
- time-slicing (gpu.sharing.replicas): the device plugin offers each GPU `replicas` times;
- MIG with the operator's MIG manager (gpu.sharing.migProfile all-<profile>): each GPU is cut into
  as many instances of the profile as it holds, and the device plugin advertises each one (single
  strategy: as nvidia.com/gpu; mixed: as nvidia.com/mig-<profile>). How many depends on the GPU:
  1g.10gb is 7 per A100 80GB or H100 80GB but 4 per A100 40GB (config/mig_profiles.py SLICES_PER_GPU);
- gke's own sharing (gke.gpuPools[].sharing.maxClients, migPartitionSize): the same, per pool.

Not sized, refused when queues are on (a quota in the wrong units would promise GPUs that are not
there, or hide ones that are): MIG on the device-plugin path (GPUs partitioned by hand: how many
slices each holds is not in the config), all-balanced (slices of several sizes: no one unit), and a
profile whose count differs between the GPUs that have it when hosts[].gpuModel does not say which.
"""

from __future__ import annotations

import re

from config.gke_pools import GpuPool, gke_gpus_per_node
from config.gpu import GpuConfig, GpuStack, MigStrategy, SharingMode
from config.mig_profiles import GKE_ACCELERATOR_GPU, SLICES_PER_GPU


def _candidates(profile: str, gpu_model: str | None) -> dict[str, int]:
    """The table's GPUs that have `profile`, narrowed by what a GFD product name says
    (NVIDIA-A100-SXM4-40GB: A100, 40GB) when that leaves any: model -> instances per GPU."""
    having = {m: s[profile] for m, s in SLICES_PER_GPU.items() if profile in s}
    if gpu_model is None:
        return having
    tokens = {t.upper() for t in re.split(r"[-_ .]", gpu_model)}
    named = {m: n for m, n in having.items() if m.split()[0].upper() in tokens}
    sized = {m: n for m, n in named.items() if m.split()[1].upper() in tokens}
    return sized or named or having


def units_per_gpu(gpu: GpuConfig, gpu_model: str | None = None, mig_model: str | None = None) -> int | str:
    """How many of the covered GPU resource one GPU offers, or why that is not known. `gpu_model`:
    lab's GFD product name (hosts[].gpuModel); `mig_model`: the table's model where it is known
    (gke: from the accelerator type), "" for a GPU without MIG (the MIG manager leaves it whole)."""
    sharing = gpu.sharing
    if sharing.mode is SharingMode.TIME_SLICING:
        return sharing.replicas
    if sharing.mode is not SharingMode.MIG:
        return 1
    if gpu.stack is GpuStack.DEVICE_PLUGIN:
        return ("with gpu.stack device-plugin the GPUs are partitioned by hand: how many MIG slices each holds is "
                "not in the config, so Kueue's quotas (counted in slices) cannot be sized; use gpu.stack operator "
                "with gpu.sharing.migProfile all-<profile>, or leave queues off")
    if mig_model == "":  # no MIG on this GPU: whole, and never a slice type of the mixed strategy
        return 0 if sharing.mig_strategy is MigStrategy.MIXED else 1
    profile = sharing.mig_profile.removeprefix("all-")
    if profile == "balanced":
        return ("all-balanced cuts each GPU into slices of several sizes, and Kueue's quotas count one resource: "
                "no one unit to size them in; with queues use one profile, all-<N>g.<M>gb")
    found = ({mig_model: SLICES_PER_GPU[mig_model][profile]} if mig_model and profile in SLICES_PER_GPU[mig_model]
             else _candidates(profile, gpu_model))
    counts = set(found.values())
    if len(counts) == 1:
        return counts.pop()
    seen = ", ".join(f"{n} per {m}" for m, n in found.items())
    which = (f"{gpu_model!r} (hosts[].gpuModel) does not say which of them it is" if gpu_model
             else "the config does not say which GPU the hosts have")
    return (f"all-{profile} gives {seen or 'no slices on any GPU known'} and {which}, so Kueue's quotas "
            "(counted in slices) cannot be sized")


def slices_by_profile(gpu_model: str | None, mig_model: str | None = None) -> dict[str, int]:
    """MIG instances of each profile one GPU holds, where the table tells which GPU it is: `mig_model`
    (gke: from the accelerator type) or a GFD product name that picks one count per profile."""
    if mig_model is not None:
        return dict(SLICES_PER_GPU.get(mig_model, {}))
    if gpu_model is None:
        return {}
    tokens = {t.upper() for t in re.split(r"[-_ .]", gpu_model)}
    named = [m for m in SLICES_PER_GPU if m.split()[0].upper() in tokens]
    sized = [m for m in named if m.split()[1].upper() in tokens]
    which = sized or named
    return dict(SLICES_PER_GPU[which[0]]) if len(which) == 1 else {}


def gke_mig_model(accelerator_type: str) -> str:
    """The MIG table's model of a gke accelerator type, "" for one without MIG (L4)."""
    return GKE_ACCELERATOR_GPU.get(accelerator_type, "")


def gke_units_per_node(pool: GpuPool, gpu: GpuConfig) -> int | str:
    """The covered GPU resource one node of a gke pool offers: what GKE's own sharing gives
    (config/gke_pools.py gke_gpus_per_node) x the operator's (gpu.sharing)."""
    units = units_per_gpu(gpu, mig_model=gke_mig_model(pool.accelerator.type))
    return units if isinstance(units, str) else gke_gpus_per_node(pool) * units


def describe(gpu: GpuConfig) -> str:
    """What a count of the covered resource is, for messages: GPUs, replicas or slices."""
    sharing = gpu.sharing
    if sharing.mode is SharingMode.TIME_SLICING:
        return f"time-sliced GPUs ({sharing.replicas} per GPU)"
    if sharing.mode is SharingMode.MIG:
        return f"MIG {sharing.mig_profile.removeprefix('all-')} slices"
    return "GPUs"


def sharing_key(gpu: GpuConfig) -> str:
    """The key that chose a sharing mode whose units cannot be sized."""
    return "gpu.sharing.mode" if gpu.stack is GpuStack.DEVICE_PLUGIN else "gpu.sharing.migProfile"
