"""gpu: the GPU software stack, how a GPU is shared, and the GPU-ready gate (every platform)."""

from __future__ import annotations

import enum
import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model
from config.mig_profiles import layout_problem


class GpuStack(enum.StrEnum):
    DEVICE_PLUGIN = "device-plugin"  # drivers on the hosts; device plugin, GFD, DCGM exporter
    OPERATOR = "operator"  # the NVIDIA GPU Operator owns driver, toolkit and the rest


class SharingMode(enum.StrEnum):
    NONE = "none"
    TIME_SLICING = "time-slicing"
    MIG = "mig"


class MigStrategy(enum.StrEnum):
    SINGLE = "single"
    MIXED = "mixed"


# Layouts of the MIG manager's default config (all GPUs of a node partitioned alike); which profiles
# exist is config/mig_profiles.py's table.
_MIG_PROFILE = re.compile(r"all-(disabled|balanced|\d+g\.\d+gb)")


class GpuSharing(Model):
    """How one physical GPU is offered to pods."""

    mode: SharingMode = Field(default=SharingMode.NONE, description="none, time-slicing or mig (device-plugin: GPUs partitioned beforehand; operator: by its MIG manager).")
    replicas: int = Field(default=1, description="time-slicing: pods sharing each GPU (2-48).")
    mig_strategy: MigStrategy = Field(default=MigStrategy.SINGLE, description="mig: single or mixed.")
    mig_profile: str = Field(
        default="all-disabled",
        description="mig with gpu.stack operator: the MIG manager profile, e.g. all-1g.10gb or all-balanced "
                    "(all-disabled on the device-plugin path); it must exist on some GPU (gke: on each MIG pool's).",
    )

    @field_validator("mig_profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        if not _MIG_PROFILE.fullmatch(v):
            raise ValueError("must be a MIG manager profile: all-disabled, all-balanced or all-<N>g.<M>gb")
        if problem := layout_problem(v):
            raise ValueError(problem)
        return v


class GpuGate(Model):
    """The GPU-ready gate: a Job that must pass on every GPU node before GPU workloads start."""

    enabled: bool = Field(default=True, description="Run the GPU-ready gate (skipped when no GPU node is configured).")
    timeout_minutes: int = Field(default=30, ge=5, le=240, description="How long `up` waits for every GPU node to pass the gate.")


class GpuConfig(Model):
    stack: GpuStack = Field(
        default=GpuStack.DEVICE_PLUGIN,
        description="device-plugin (drivers on the hosts) or operator (the NVIDIA GPU Operator).",
    )
    sharing: GpuSharing = Field(default_factory=GpuSharing, description="How pods share a GPU: whole, time-sliced or MIG.")
    gate: GpuGate = Field(default_factory=GpuGate, description="The GPU-ready gate: `up` waits until every GPU node passes.")


def gpu_problems(gpu: GpuConfig) -> Problems:
    """The sharing settings against each other and the GPU stack."""
    problems: Problems = []
    sharing = gpu.sharing
    if sharing.mode is SharingMode.TIME_SLICING and not 2 <= sharing.replicas <= 48:
        problems.append(("gpu.sharing.replicas", "time-slicing needs 2 to 48 replicas per GPU"))
    if sharing.mode is not SharingMode.TIME_SLICING and sharing.replicas != 1:
        problems.append(("gpu.sharing.replicas", "applies only to mode time-slicing; leave it at 1"))
    # Read only in mode mig (components/gpu_stack.py: mig_layout, device_plugin_mig_strategy).
    if sharing.mode is not SharingMode.MIG and sharing.mig_strategy is not MigStrategy.SINGLE:
        problems.append(("gpu.sharing.migStrategy", f"does nothing with mode {sharing.mode.value}: it applies to "
                                                    "mode mig only; leave it unset"))
    if sharing.mode is not SharingMode.MIG and sharing.mig_profile != "all-disabled":
        problems.append(("gpu.sharing.migProfile", f"does nothing with mode {sharing.mode.value}: GPUs are "
                                                   "partitioned in mode mig only; leave it unset"))
    if sharing.mode is SharingMode.MIG and gpu.stack is GpuStack.OPERATOR:
        # The operator's MIG manager partitions the GPUs by migProfile.
        if sharing.mig_strategy is MigStrategy.MIXED and sharing.mig_profile == "all-balanced" and gpu.gate.enabled:
            problems.append(
                ("gpu.sharing.migProfile", "the GPU-ready gate needs one MIG slice type under mixed; use all-<N>g.<M>gb")
            )
        if sharing.mig_profile == "all-disabled":
            problems.append(("gpu.sharing.migProfile", "mig needs a profile such as all-1g.10gb or all-balanced"))
    elif sharing.mode is SharingMode.MIG:
        # device-plugin: the GPUs are already partitioned (nvidia-smi mig); the plugin and GFD
        # only advertise the MIG devices by migStrategy.
        if sharing.mig_profile != "all-disabled":
            problems.append(("gpu.sharing.migProfile", "the device-plugin path cannot partition GPUs; partition them "
                                                       "with nvidia-smi mig or use gpu.stack operator"))
        if sharing.mig_strategy is MigStrategy.MIXED and gpu.gate.enabled:
            problems.append(("gpu.sharing.migStrategy", "the GPU-ready gate needs one MIG slice type under mixed, "
                                                        "unknown for GPUs partitioned by hand: use single or "
                                                        "gpu.gate.enabled false"))
    return problems
