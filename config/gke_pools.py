"""The GPU node pools of the gke stack (gke.gpuPools[]): machine, accelerator, zones, autoscaling,
driver, sharing, and how the pool gets its GPUs (provisioning: onDemand, flexStart or a named
reservation; config/gke_provisioning.py checks it against the rest of the stack). config/gke.py
checks each pool against the accelerator table, gpu.stack and gcp:region.
"""

from __future__ import annotations

import enum
import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model, empty_to_none, label_problems
from config.gcp import locations
from config.gke_provisioning import GkeProvisioning, check_project, check_reservation_name
from config.gke_upgrades import GkePoolUpgrade
from config.mig_profiles import GKE_ACCELERATOR_GPU, instances_per_gpu


class GkeDriver(enum.StrEnum):
    GKE_DEFAULT = "gke-default"  # GKE installs its default driver for the node version
    GKE_LATEST = "gke-latest"  # GKE installs the latest driver for the node version
    INSTALLER_COS = "installer-cos"  # the driver-installer DaemonSet of seed 001, COS nodes
    INSTALLER_UBUNTU = "installer-ubuntu"  # the same on Ubuntu nodes
    NONE = "none"  # the GPU Operator installs it (Ubuntu nodes)

    @property
    def installer(self) -> bool:
        return self in (GkeDriver.INSTALLER_COS, GkeDriver.INSTALLER_UBUNTU)

    @property
    def gke_managed(self) -> bool:
        return self in (GkeDriver.GKE_DEFAULT, GkeDriver.GKE_LATEST)


class GkeGpuDirect(enum.StrEnum):
    """gke.gpuPools[].gpuDirect: the machine family's GPUDirect network (config/gcp/gpudirect.py)."""

    AUTO = "auto"  # on where the machine type has one (a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g...)
    OFF = "off"  # none: NCCL between nodes runs over the node's own NIC


class GkeSharingStrategy(enum.StrEnum):
    NONE = "none"
    TIME_SHARING = "time-sharing"
    MPS = "mps"


class GkeGpuSharing(Model):
    """GKE's GPU sharing on one pool (its own device plugin enforces it)."""

    strategy: GkeSharingStrategy = Field(default=GkeSharingStrategy.NONE, description="none, time-sharing or mps.")
    max_clients: int = Field(default=1, ge=1, le=48, description="Containers sharing each GPU (2-48 when shared).")


class GkeAccelerator(Model):
    type: str = Field(description="Compute Engine accelerator type, e.g. nvidia-l4.")
    count: int = Field(ge=1, le=16, description="GPUs per node.")


class GkeAutoscaling(Model):
    min_nodes: int = Field(default=0, ge=0, le=1000, description="Per zone; 0 lets the pool scale to zero.")
    max_nodes: int = Field(default=1, ge=1, le=1000, description="Per zone.")


# GKE cluster and node pool names: at most 40 characters.
_GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")


def _check_zone(v: str) -> str:
    problem = locations.check_zone(v)
    if problem:
        raise ValueError(problem)
    return v


def _check_gce_name(v: str) -> str:
    if not _GCE_NAME.fullmatch(v):
        raise ValueError("must start with a letter, use a-z, 0-9 and '-', end with a letter or digit, "
                         "at most 40 characters")
    return v


class GpuPool(Model):
    """One GPU node pool of the gke stack."""

    name: str = Field(description="Node pool name (a-z, 0-9, '-').")
    machine_type: str = Field(description="A GPU machine type: a2-*, a3-*, a4-highgpu-8g, g2-standard-* or n1-* (e.g. g2-standard-8).")
    accelerator: GkeAccelerator = Field(description="a2/a3/a4/g2 come with fixed GPUs; n1 takes T4, P4, P100 or V100.")
    zones: tuple[str, ...] = Field(description="Zones of the pool's nodes (where the accelerator is offered).")
    autoscaling: GkeAutoscaling = Field(default_factory=GkeAutoscaling, description="Nodes per zone.")
    spot: bool = Field(default=False, description="Spot VMs (preemptible, cheaper).")
    disk_size_gb: int = Field(default=200, ge=50, le=65536, description="Boot disk size in GB.")
    disk_type: str | None = Field(
        default=None, description="Boot disk type: pd-balanced, pd-ssd, pd-standard or hyperdisk-balanced, as the "
                                  "machine family takes it (default: pd-balanced, hyperdisk-balanced on A3 Ultra and "
                                  "A4, which take Hyperdisk only).")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra Kubernetes node labels.")
    driver: GkeDriver = Field(
        default=GkeDriver.GKE_DEFAULT,
        description="Who installs the NVIDIA driver: GKE (gke-default, gke-latest), NVIDIA's installer DaemonSet "
                    "(installer-cos, installer-ubuntu) or nobody (none: the GPU Operator does).",
    )
    sharing: GkeGpuSharing = Field(default_factory=GkeGpuSharing, description="GPU sharing by GKE's device plugin.")
    mig_partition_size: str | None = Field(default=None, description="GKE MIG partition, e.g. 1g.5gb (A100, H100, H200, B200).")
    provisioning: GkeProvisioning = Field(
        default=GkeProvisioning.ON_DEMAND,
        description="How the pool gets its GPUs: onDemand (the autoscaler creates VMs when pods wait), flexStart "
                    "(queued provisioning, Dynamic Workload Scheduler: all of a queued job's nodes at once, through "
                    "Kueue's ProvisioningRequest admission check; needs queues.enabled and minNodes 0) or "
                    "reservation (only from the specific reservation named in reservation).",
    )
    reservation: str | None = Field(
        default=None, description="provisioning reservation: the name of the specific Compute Engine reservation "
                                  "the pool's nodes consume (it must match the pool's machine type and accelerator).",
    )
    reservation_project: str | None = Field(
        default=None, description="provisioning reservation: the project owning a shared reservation "
                                  "(default: the reservation is in gcp:project).",
    )
    # Node hardware and upgrades (config/gke_pool_hardware.py, config/gke_upgrades.py check them).
    reservation_block: str | None = Field(
        default=None, description="provisioning reservation: one block of the reservation the nodes consume "
                                  "(A3 Ultra and A4 reservations come in blocks).",
    )
    compact_placement: bool = Field(
        default=False, description="Place the pool's nodes close together (placement policy COMPACT): a pool in "
                                   "one zone, surge upgrades, not flexStart.",
    )
    upgrade: GkePoolUpgrade = Field(
        default_factory=GkePoolUpgrade, description="How GKE replaces the nodes in an upgrade (default: surge 0, "
                                                    "unavailable 1: no spare GPU VM needed).",
    )

    gpu_direct: GkeGpuDirect = Field(
        default=GkeGpuDirect.AUTO,
        description="auto: the machine family's GPUDirect network where it has one (TCPX on a3-highgpu-8g, TCPXO on a3-megagpu-8g, "
                    "RDMA on a3-ultragpu-8g and a4-highgpu-8g: extra VPCs, GKE multi-networking, NCCL plugin); "
                    "off: none (multi-node jobs on those machines are then refused by the check).",
    )

    _name = field_validator("name")(classmethod(lambda cls, v: _check_gce_name(v)))
    _optional = field_validator("mig_partition_size", "reservation", "reservation_project", "reservation_block",
                                "disk_type", mode="before")(
        classmethod(lambda cls, v: empty_to_none(v)))
    _reservation = field_validator("reservation")(
        classmethod(lambda cls, v: v if v is None else check_reservation_name(v)))
    _reservation_project = field_validator("reservation_project")(
        classmethod(lambda cls, v: v if v is None else check_project(v)))

    @field_validator("mig_partition_size")
    @classmethod
    def _mig_partition_form(cls, v: str | None) -> str | None:
        # The form GKE's gpu_partition_size takes (<compute slices>g.<memory>gb); which sizes the pool's
        # GPU offers is checked against the accelerator below. The slice count feeds the capacity sum.
        if v is not None and not re.fullmatch(r"[1-7]g\.[1-9][0-9]{0,2}gb", v):
            raise ValueError(f"{v[:40]!r} is not a MIG partition size of the form <1-7>g.<memory>gb, e.g. 1g.10gb")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        problems = label_problems(v)
        # GKE's API: "the kubernetes.io/ and k8s.io/ prefixes are reserved by Kubernetes Core components".
        problems += [f"label key {k!r}: the kubernetes.io/ and k8s.io/ prefixes are reserved" for k in v
                     if re.fullmatch(r"([^/]*\.)?(kubernetes\.io|k8s\.io)/.*", k)]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("zones")
    @classmethod
    def _zones(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_zone(z) for z in v)


def gke_gpus_per_node(pool: GpuPool) -> int:
    """nvidia.com/gpu a node of the pool offers: GPUs x shared clients, or x MIG slices per GPU."""
    per_gpu = pool.sharing.max_clients
    if pool.mig_partition_size:
        # NVIDIA's instances per GPU (1g.20gb: 4 per H100 80GB, not 7). A partition the pool's GPU
        # lacks is refused beside this (config/gke.py); until then count its compute slices.
        per_gpu *= (instances_per_gpu(GKE_ACCELERATOR_GPU.get(pool.accelerator.type, ""), pool.mig_partition_size)
                    or 7 // int(pool.mig_partition_size.split("g", 1)[0]))
    return pool.accelerator.count * per_gpu


def reservation_value(pool: GpuPool) -> str:
    """The reservation as GKE's reservation affinity names it: its name, or its path in its project,
    and then its block (config/gke_pool_hardware.py)."""
    assert pool.reservation is not None
    name = pool.reservation
    if pool.reservation_project:
        name = f"projects/{pool.reservation_project}/reservations/{pool.reservation}"
    return f"{name}/reservationBlocks/{pool.reservation_block}" if pool.reservation_block else name


def provisioning_problems(key: str, pool: GpuPool, queues_enabled: bool) -> Problems:
    """One pool's provisioning against its own keys and queues.enabled; `key` is gke.gpuPools[i]."""
    problems: Problems = []
    mode = pool.provisioning
    if mode is GkeProvisioning.RESERVATION and pool.reservation is None:
        problems.append((f"{key}.reservation", "is required with provisioning reservation: the name of a "
                                               "specific reservation (`gcloud compute reservations list`)"))
    if mode is not GkeProvisioning.RESERVATION:
        why = (" (queued provisioning consumes no reservation: GKE requires reservation affinity NONE)"
               if mode is GkeProvisioning.FLEX_START else "")
        if pool.reservation is not None:
            problems.append((f"{key}.reservation", f"applies to provisioning reservation only, not {mode.value}{why}"))
        if pool.reservation_project is not None:
            problems.append((f"{key}.reservationProject", f"applies to provisioning reservation only, not {mode.value}"))
    if mode is GkeProvisioning.FLEX_START:
        if not queues_enabled:
            problems.append((f"{key}.provisioning", "flexStart needs queues.enabled: true: queued provisioning creates "
                                                    "nodes only for a ProvisioningRequest, which Kueue makes for each "
                                                    "job it admits to this pool (without Kueue no pod ever gets a node)"))
        if pool.autoscaling.min_nodes != 0:
            problems.append((f"{key}.autoscaling.minNodes", f"must be 0 with provisioning flexStart (got "
                                                            f"{pool.autoscaling.min_nodes}): queued provisioning scales "
                                                            "from zero, GKE creates nodes only for a ProvisioningRequest"))
        if pool.spot:
            problems.append((f"{key}.spot", "flexStart and spot are two provisioning models; a pool uses one "
                                            "(set spot false, or provisioning onDemand)"))
    return problems
