"""Which MIG profiles each NVIDIA GPU has, and which layouts the GPU Operator's MIG manager applies.

Sources:
* NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
  (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html) and
  "Supported GPUs" (.../supported-gpus.html): the GPU instance profiles per product.
* The GPU Operator's default MIG manager config, the ConfigMap default-mig-parted-config
  (NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml, read at commit 0b0b6b15): the
  layout names a node's nvidia.com/mig.config label may take when the operator is given no config
  of its own (this program gives none: components/gpu_stack.py). Its comments name the GPUs each
  all-<profile> layout is for, which the table below follows.

Only the compute.memory profiles are listed: the +me (media extensions) and +gfx variants give one
instance per GPU, and gpu.sharing.migProfile admits all-<N>g.<M>gb layouts only (config/gpu.py).
"""

from __future__ import annotations

# GPU model -> its MIG profiles (compute slices g, memory in GB), as the user guide names them.
PROFILES_BY_GPU: dict[str, tuple[str, ...]] = {
    "A30 24GB": ("1g.6gb", "2g.12gb", "4g.24gb"),
    "A100 40GB": ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100 80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100 80GB": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100 94GB (H100 NVL)": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "H100 96GB (GH200, H20)": ("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    "H200 141GB": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "GH200 144GB": ("1g.18gb", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"),
    "B200 180GB": ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"),
    "GB200 186GB": ("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"),
    "RTX PRO 6000 Blackwell 96GB": ("1g.24gb", "2g.48gb", "4g.96gb"),
}

# GPU model (PROFILES_BY_GPU) -> MIG profile -> instances of it one GPU holds
# (NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles": the "Number of Instances" column
# of each GPU's table). A 7-slice GPU has 8 memory slices: a 1g profile with one memory slice fits
# 7 times, with two 4 times; 2g 3, 3g 2, 4g and 7g once. A30 and RTX PRO 6000 have 4 of each.
_SEVEN = (7, 4, 3, 2, 1, 1)
SLICES_PER_GPU: dict[str, dict[str, int]] = {
    "A30 24GB": dict(zip(PROFILES_BY_GPU["A30 24GB"], (4, 2, 1), strict=True)),
    **{model: dict(zip(PROFILES_BY_GPU[model], _SEVEN, strict=True))
       for model in ("A100 40GB", "A100 80GB", "H100 80GB", "H100 94GB (H100 NVL)", "H100 96GB (GH200, H20)",
                     "H200 141GB", "GH200 144GB", "B200 180GB", "GB200 186GB")},
    "RTX PRO 6000 Blackwell 96GB": dict(zip(PROFILES_BY_GPU["RTX PRO 6000 Blackwell 96GB"], (4, 2, 1), strict=True)),
}


# all-<profile> layouts of the operator's default config whose comments name no GPU of the table
# (a later memory variant); accepted where the GPU model is unknown, as the MIG manager has them.
_OPERATOR_ONLY = ("3g.95gb", "4g.95gb", "7g.189gb")

# The layouts of the operator's default config that gpu.sharing.migProfile may name (its +me/+gfx
# variants and all-enabled, which creates no instance, left out). all-balanced covers every GPU above.
OPERATOR_LAYOUTS: frozenset[str] = frozenset(
    {"all-disabled", "all-balanced"}
    | {f"all-{p}" for profiles in PROFILES_BY_GPU.values() for p in profiles}
    | {f"all-{p}" for p in _OPERATOR_ONLY}
)

# Compute Engine accelerator type -> its GPU model above (GKE's MIG-capable accelerators; the A3 Mega
# H100 is an H100 80GB, though GKE's own gpu_partition_size does not offer MIG on it). H200 (A3 Ultra)
# and B200 (A4): GKE's "Running multi-instance GPUs" page lists both beside A100 and H100.
GKE_ACCELERATOR_GPU: dict[str, str] = {
    "nvidia-tesla-a100": "A100 40GB",
    "nvidia-a100-80gb": "A100 80GB",
    "nvidia-h100-80gb": "H100 80GB",
    "nvidia-h100-mega-80gb": "H100 80GB",
    "nvidia-h200-141gb": "H200 141GB",
    "nvidia-b200": "B200 180GB",
}


def layout_problem(layout: str) -> str | None:
    """Why `layout` (all-disabled, all-balanced, all-<profile>) is no layout of the operator's default
    config, or None."""
    if layout in OPERATOR_LAYOUTS:
        return None
    profile = layout.removeprefix("all-")
    same_compute = sorted({p for ps in PROFILES_BY_GPU.values() for p in ps if p.split(".")[0] == profile.split(".")[0]})
    hint = (f"{profile.split('.')[0]} profiles: {', '.join(same_compute)}" if same_compute
            else "compute slices are 1g, 2g, 3g, 4g or 7g")
    return f"no NVIDIA GPU has MIG profile {profile} ({hint}; docs/gpu-software.md)"


def model_problem(layout: str, gpu_model: str) -> str | None:
    """Why `layout` cannot be applied to a `gpu_model` GPU, or None."""
    if layout in ("all-disabled", "all-balanced"):
        return None
    profiles = PROFILES_BY_GPU[gpu_model]
    profile = layout.removeprefix("all-")
    if profile in profiles:
        return None
    return f"{gpu_model} has no MIG profile {profile}; its profiles: {', '.join(profiles)}"


def gke_pool_problems(layout: str, accelerator_types: list[str]) -> list[tuple[str, str]]:
    """gpu.sharing.migProfile against the GPU model of each gke pool (`accelerator_types`, in pool
    order). The operator's MIG manager runs only on MIG-capable nodes, so a pool without MIG (L4)
    is left alone; at least one pool must have MIG."""
    key = "gpu.sharing.migProfile"
    models = [(i, GKE_ACCELERATOR_GPU[t]) for i, t in enumerate(accelerator_types) if t in GKE_ACCELERATOR_GPU]
    if not models and layout != "all-disabled":
        return [(key, f"no GPU pool has a MIG-capable GPU ({', '.join(accelerator_types) or 'none'}); MIG needs "
                      f"{', '.join(sorted(GKE_ACCELERATOR_GPU))}")]
    return [(key, f"gke.gpuPools[{i}]: {problem}") for i, model in models
            if (problem := model_problem(layout, model)) is not None]


def gke_partition_problem(accelerator_type: str, partitions: tuple[str, ...]) -> str | None:
    """GKE's own partition sizes for an accelerator (config/gcp/accelerators.py) that its GPU has no
    MIG profile for: the two tables must agree."""
    model = GKE_ACCELERATOR_GPU.get(accelerator_type)
    extra = [p for p in partitions if model is None or p not in PROFILES_BY_GPU[model]]
    return f"{accelerator_type}: {', '.join(extra)} not in {model}'s MIG profiles" if extra else None


def instances_per_gpu(gpu_model: str, profile: str) -> int | None:
    """How many instances of `profile` (e.g. 1g.10gb) one GPU of the table holds, or None."""
    return SLICES_PER_GPU.get(gpu_model, {}).get(profile)
