"""training, acceptance, network: the distributed training job, the NCCL acceptance Job that holds
the network to its declared rate, and that declaration (every platform). Whether the jobs fit the
nodes is the platform's check (addons.Addons._capacity_problems)."""

from __future__ import annotations

import enum
import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model, check_pinned_image, check_quantity, empty_to_none, quantity_value
from config.gpu import GpuConfig, SharingMode

_IFNAME = re.compile(r"\^?[A-Za-z0-9_.=-]+(,[A-Za-z0-9_.=-]+)*")


class Launcher(enum.StrEnum):
    INDEXED_JOB = "indexed-job"  # batch/v1 Indexed Job + headless Service (seed 000)
    PYTORCHJOB = "pytorchjob"  # Kubeflow training operator PyTorchJob (seed 004)


class NcclDebug(enum.StrEnum):
    NONE = "NONE"
    VERSION = "VERSION"
    WARN = "WARN"
    INFO = "INFO"
    TRACE = "TRACE"


class NcclConfig(Model):
    """NCCL environment of training pods."""

    debug: NcclDebug = Field(default=NcclDebug.WARN, description="NCCL_DEBUG level.")
    socket_ifname: str | None = Field(
        default=None, description="NCCL_SOCKET_IFNAME, e.g. 'eth0' or '^lo,docker' (unset: NCCL picks)."
    )

    _optional = field_validator("socket_ifname", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))

    @field_validator("socket_ifname")
    @classmethod
    def _ifname(cls, v: str | None) -> str | None:
        if v is not None and not _IFNAME.fullmatch(v):
            raise ValueError("must be interface names or prefixes, comma separated, optionally '^'-negated ('eth0', '^lo,docker')")
        return v


class ElasticConfig(Model):
    """pytorchjob: torch elastic (the job keeps running with between minNodes and nodes pods)."""

    enabled: bool = Field(default=False)
    min_nodes: int = Field(default=1, ge=1, description="Fewest pods the job runs with.")


class TrainingConfig(Model):
    """The distributed training job (torchrun) and its pods."""

    enabled: bool = Field(default=False, description="Submit the training job.")
    launcher: Launcher = Field(default=Launcher.INDEXED_JOB, description="indexed-job or pytorchjob.")
    image: str | None = Field(default=None, description="Workload image, pinned by tag or digest.")
    nodes: int = Field(default=1, ge=1, le=512, description="Pods (one per node).")
    gpus_per_node: int = Field(default=1, ge=1, le=16, description="GPUs per pod = torchrun nproc_per_node.")
    cpu_request: str = Field(default="4")
    cpu_limit: str = Field(default="8")
    memory_request: str = Field(default="16Gi")
    memory_limit: str = Field(default="32Gi")
    max_restarts: int = Field(default=3, ge=0, le=100, description="torchrun --max-restarts (in-pod restarts).")
    backoff_limit_per_index: int = Field(default=2, ge=0, le=100, description="indexed-job: pod retries per index.")
    epochs: int = Field(default=10, ge=1)
    batch_size: int = Field(default=64, ge=1, description="Per-rank batch size.")
    checkpoint_every: int = Field(default=1, ge=1, description="Checkpoint interval in epochs.")
    checkpoint_every_steps: int = Field(default=0, ge=0, description="Also checkpoint every N steps (0: off).")
    shm_size: str = Field(default="8Gi", description="Size of the /dev/shm memory volume (dataloader workers).")
    elastic: ElasticConfig = Field(default_factory=ElasticConfig)
    nccl: NcclConfig = Field(default_factory=NcclConfig)

    _optional = field_validator("image", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    _quantities = field_validator("cpu_request", "cpu_limit", "memory_request", "memory_limit", "shm_size", mode="before")(
        classmethod(lambda cls, v: check_quantity(v))
    )

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return None if v is None else check_pinned_image(v)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


# acceptance.minBusbwFraction when unset, by the transport network.rdma declares. Both are held to
# seed 002's healthy run: 2 A100 nodes on 25GbE RoCE, ib_write_bw 23.14 Gbit/s (92.6% of the link:
# RoCE's own ceiling), nccl-tests all_reduce busbw 2.81 GB/s = 22.48 Gbit/s (89.9% of the link).
# - RDMA 0.8 (20 Gbit/s on 25GbE): 11% under that healthy result; 0.9 failed it (22.48 < 22.5).
# - Sockets 0.25 (6.25 Gbit/s on 25GbE, busbw 0.78 GB/s): NCCL's socket transport stages through
#   host memory over TCP and reaches ~30-60% of the wire on bare hosts (NVIDIA/nccl#209, #450);
#   lab pods add flannel's VXLAN (50 bytes of every 1500, pod MTU 1450) and per-packet
#   encapsulation on the CPU. A healthy socket lab measures ~0.3-0.5 of the link; 0.25 passes it and
#   still fails a broken path (0.5 GB/s = 4 Gbit/s, or traffic over a 1GbE management NIC).
RDMA_MIN_BUSBW_FRACTION = 0.8
SOCKET_MIN_BUSBW_FRACTION = 0.25


class AcceptanceConfig(Model):
    """The NCCL acceptance Job: an all-reduce sweep checked against network.linkGbps."""

    nccl: bool = Field(default=False, description="Run the NCCL all-reduce acceptance Job.")
    min_busbw_fraction: float | None = Field(
        default=None,
        description=f"Pass when busbw >= this x linkGbps (default {RDMA_MIN_BUSBW_FRACTION} with network.rdma, "
                    f"{SOCKET_MIN_BUSBW_FRACTION} over sockets).",
    )
    max_bytes: int = Field(default=2**30, ge=2**30, le=2**34, description="Largest all-reduce size (>= 1 GiB).")

    @field_validator("min_busbw_fraction")
    @classmethod
    def _fraction(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v <= 1:
            raise ValueError("must be a fraction in (0, 1], e.g. 0.8")
        return v

    def busbw_fraction(self, rdma: bool) -> float:
        """The fraction the verdict uses: minBusbwFraction, else the declared transport's default."""
        if self.min_busbw_fraction is not None:
            return self.min_busbw_fraction
        return RDMA_MIN_BUSBW_FRACTION if rdma else SOCKET_MIN_BUSBW_FRACTION


class NetworkConfig(Model):
    """The network between GPU nodes, as declared (what the acceptance test holds it to)."""

    link_gbps: float | None = Field(default=None, gt=0, le=3200, description="Per-node link rate in Gbit/s.")
    rdma: bool = Field(default=False, description="NCCL must use RDMA (IB/RoCE), not sockets.")

    _optional = field_validator("link_gbps", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))


def training_problems(t: TrainingConfig, acc: AcceptanceConfig, network: NetworkConfig, gpu: GpuConfig) -> Problems:
    """training and acceptance against each other, the declared network and GPU sharing."""
    problems: Problems = []
    runs = t.enabled or acc.nccl
    for req, lim, key in ((t.cpu_request, t.cpu_limit, "cpu"), (t.memory_request, t.memory_limit, "memory")):
        if quantity_value(req) > quantity_value(lim):
            problems.append((f"training.{key}Request", f"{req} is more than training.{key}Limit {lim}"))
    if quantity_value(t.shm_size) > quantity_value(t.memory_limit):
        problems.append(("training.shmSize", f"{t.shm_size} exceeds training.memoryLimit {t.memory_limit} (shm counts as memory)"))
    if t.elastic.enabled and t.launcher is not Launcher.PYTORCHJOB:
        problems.append(("training.elastic.enabled", "elastic training needs training.launcher pytorchjob"))
    if runs and gpu.sharing.mode is SharingMode.MIG and t.gpus_per_node > 1:
        # A CUDA process enumerates only one MIG instance, so torchrun's local ranks cannot each
        # take a slice of one pod's several: one slice per pod, one pod per node.
        problems.append(("training.gpusPerNode", "with gpu.sharing.mode mig each pod gets one MIG slice: use 1"))
    if t.elastic.enabled and t.elastic.min_nodes > t.nodes:
        problems.append(("training.elastic.minNodes", f"{t.elastic.min_nodes} is more than training.nodes {t.nodes}"))
    if runs and t.image is None:
        what = "training.enabled" if t.enabled else "acceptance.nccl"
        problems.append(("training.image", f"{what} needs the workload image, pinned ('registry/trainer:1.0.0')"))
    if acc.nccl:
        if t.nodes < 2:
            problems.append(("acceptance.nccl", "measures the network between nodes; needs training.nodes >= 2"))
        if network.link_gbps is None:
            problems.append(("network.linkGbps", "acceptance.nccl needs the declared link rate to compare busbw with"))
        if t.enabled and t.launcher is Launcher.PYTORCHJOB:
            # `up` cannot await a PyTorchJob (a custom resource): the training run would start next
            # to the acceptance sweep, compete for its GPUs and ignore its verdict.
            problems.append((
                "training.enabled",
                "with training.launcher pytorchjob and acceptance.nccl, `up` cannot wait for the acceptance "
                "verdict before training starts (both would compete for the GPUs): run `up` with "
                "training.enabled false first, read the verdict (stack output ncclAcceptance.result), then "
                "enable training (and set acceptance.nccl false)",
            ))
    return problems
