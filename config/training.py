"""training, acceptance, network: the distributed training job, the NCCL acceptance Job that holds
the network to its declared rate, and that declaration (every platform). Whether the jobs fit the
nodes is the platform's check (addons.Addons._capacity_problems)."""

from __future__ import annotations

import enum
import ipaddress
import re
from decimal import Decimal
from typing import Any

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import Model, check_pinned_image, check_quantity, empty_to_none
from config.gpu import GpuConfig, SharingMode
from config.quantities import format_bytes, parse_quantity

# NCCL_SOCKET_IFNAME: interface names or prefixes (at most 15 characters, IFNAMSIZ), '=' for an exact
# match, the list optionally '^'-negated.
_IFNAME = re.compile(r"\^?=?[A-Za-z0-9_.-]{1,15}(,=?[A-Za-z0-9_.-]{1,15})*")


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
            raise ValueError("must be interface names or prefixes (at most 15 characters of A-Z a-z 0-9 _ . -, '=' "
                             "before one for an exact match), comma separated, optionally '^'-negated ('eth0', '^lo,docker')")
        return v


class Dataset(enum.StrEnum):
    """What trainer.train reads (--dataset)."""

    AUTO = "auto"  # today's behaviour: train.pt/train.npz in the data mount when present, else synthetic
    SYNTHETIC = "synthetic"
    CIFAR10 = "cifar10"  # <data mount>/cifar-10-batches-py/ (the python version of the archive)
    FASHION_MNIST = "fashion-mnist"  # <data mount>/fashion-mnist/*-ubyte.gz

    @property
    def downloadable(self) -> bool:
        """A public dataset that trainer.prepare can fetch (training.prepareData)."""
        return self in (Dataset.CIFAR10, Dataset.FASHION_MNIST)


class ModelKind(enum.StrEnum):
    MLP = "mlp"
    # ResNet-18 with the small-image stem: built from the samples' shape (channels included), so
    # it takes CIFAR-10 (3x32x32) and Fashion-MNIST (1x28x28) alike.
    RESNET18 = "resnet18"


# The trainer's own default learning rate (workloads/trainer/train.py --lr).
DEFAULT_LEARNING_RATE = 0.05


class ElasticConfig(Model):
    """pytorchjob: torch elastic (the job keeps running with between minNodes and nodes pods)."""

    enabled: bool = Field(default=False, description="pytorchjob: torch elastic between minNodes and nodes pods.")
    min_nodes: int = Field(default=1, ge=1, description="Fewest pods the job runs with.")


# Floors of a training pod's resources (each refused below, naming the key):
# - cpu 10m: the kubelet enforces a CFS quota of at least 1 ms per 100 ms period (kubelet
#   cm/helpers_linux.go MinQuotaPeriod, the kernel's minimum), so a smaller limit is not the one applied.
# - memory 1Gi besides /dev/shm: the pod runs torchrun's agent (it imports PyTorch) and a worker per
#   GPU. Measured (torch 2.11+cu130 on an H200): `import torch` 491 MiB resident, 614 MiB with the CUDA
#   context, 774 MiB after a first forward and backward pass; agent and one worker already pass 1Gi,
#   so below it the pod is OOM-killed as it starts. memoryRequest has the same floor, so the
#   scheduler does not place the pod where that memory is not.
# - shmSize 64Mi: the container runtime's default /dev/shm, which already kills DataLoader workers
#   (components/training/job.py); a smaller volume would be worse than none.
MIN_CPU = Decimal("0.01")
MIN_MEMORY = Decimal(2**30)
MIN_SHM = Decimal(64 * 2**20)


def _at_least(floor: Decimal, what: str) -> Any:
    """A field validator: a quantity of at least `floor`."""
    def check(cls: type, v: object) -> str:
        text = check_quantity(v)
        if parse_quantity(text) < floor:
            raise ValueError(f"{text!r} is below {what}")
        return text
    return classmethod(check)


class TrainingConfig(Model):
    """The distributed training job (torchrun) and its pods."""

    enabled: bool = Field(default=False, description="Submit the distributed training job.")
    launcher: Launcher = Field(default=Launcher.INDEXED_JOB, description="indexed-job (Job + headless Service) or pytorchjob (Kubeflow training operator, pinned).")
    image: str | None = Field(default=None, description="Workload image (workloads/), pinned by tag or digest; required when training or acceptance runs.")
    nodes: int = Field(default=1, ge=1, le=512, description="Pods, one per GPU node (at most the GPU nodes configured).")
    gpus_per_node: int = Field(default=1, ge=1, le=16, description="GPUs per pod = torchrun nproc_per_node.")
    cpu_request: str = Field(default="4", description="CPU request per pod, a quantity (at least 10m, at most cpuLimit).")
    cpu_limit: str = Field(default="8", description="CPU limit per pod, a quantity.")
    memory_request: str = Field(default="16Gi", description="Memory request per pod (at least 1Gi, at most memoryLimit).")
    memory_limit: str = Field(default="32Gi", description="Memory limit per pod (at least shmSize + 1Gi).")
    max_restarts: int = Field(default=3, ge=0, le=100, description="torchrun --max-restarts: workers restarted in place before the pod fails.")
    backoff_limit_per_index: int = Field(default=2, ge=0, le=100, description="indexed-job: new pods per index after a failure (pytorchjob: backoffLimit = this x nodes).")
    epochs: int = Field(default=10, ge=1, description="Training epochs.")
    batch_size: int = Field(default=64, ge=1, description="Per-rank batch size.")
    checkpoint_every: int = Field(default=1, ge=1, description="Checkpoint interval in epochs.")
    checkpoint_every_steps: int = Field(default=0, ge=0, description="Also checkpoint every N steps (0: off).")
    shm_size: str = Field(default="8Gi", description="Memory-backed /dev/shm for DataLoader workers (counts against memoryLimit; at least 64Mi).")
    dataset: Dataset = Field(
        default=Dataset.AUTO,
        description="auto (train.pt/train.npz in the data mount when present, else synthetic), synthetic, "
                    "cifar10 or fashion-mnist (read from the data mount).",
    )
    model: ModelKind = Field(default=ModelKind.RESNET18, description="mlp or resnet18 (CIFAR variant; input channels from the data).")
    learning_rate: float = Field(
        default=DEFAULT_LEARNING_RATE, description="Peak learning rate (trainer --lr), in (0, 10]."
    )
    warmup_epochs: float | None = Field(
        default=None,
        description="Linear warm-up to learningRate over this many epochs, then cosine decay to 0; less than "
                    "epochs (unset: a constant learningRate, today's behaviour).",
    )
    weight_decay: float | None = Field(
        default=None, description="Weight decay in [0, 1) (unset: the trainer's default)."
    )
    prepare_data: bool = Field(
        default=False,
        description="cifar10, fashion-mnist: a Job downloads the dataset into the data mount before training "
                    "(false: copy the files in yourself).",
    )
    elastic: ElasticConfig = Field(default_factory=ElasticConfig, description="pytorchjob: torch elastic.")
    nccl: NcclConfig = Field(default_factory=NcclConfig, description="NCCL settings of the training pods.")

    _optional = field_validator("image", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    _cpu = field_validator("cpu_request", "cpu_limit", mode="before")(
        _at_least(MIN_CPU, "10m, the least CPU a pod's limit can enforce (one 1 ms CFS quota per 100 ms)"))
    _memory = field_validator("memory_request", "memory_limit", mode="before")(
        _at_least(MIN_MEMORY, "1Gi: torchrun and a PyTorch worker holding a CUDA context need more host memory"))
    _shm = field_validator("shm_size", mode="before")(
        _at_least(MIN_SHM, "64Mi, the container default /dev/shm that already fails DataLoader workers"))

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return None if v is None else check_pinned_image(v)

    @field_validator("learning_rate")
    @classmethod
    def _learning_rate(cls, v: float) -> float:
        # NaN fails both comparisons; above 10 is a typo for any optimizer this trainer has.
        if not 0 < v <= 10:
            raise ValueError("must be in (0, 10], e.g. 0.05 (SGD) or 0.001 (Adam-like)")
        return v

    _optional_schedule = field_validator("warmup_epochs", "weight_decay", mode="before")(
        classmethod(lambda cls, v: empty_to_none(v))
    )

    @field_validator("warmup_epochs")
    @classmethod
    def _warmup(cls, v: float | None) -> float | None:
        if v is not None and not 0 <= v < float("inf"):
            raise ValueError("must be a number of epochs >= 0 (0: cosine decay from the first step; unset: constant)")
        return v

    @field_validator("weight_decay")
    @classmethod
    def _weight_decay(cls, v: float | None) -> float | None:
        if v is not None and not 0 <= v < 1:
            raise ValueError("must be in [0, 1), e.g. 0.0005 (or leave it unset)")
        return v

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


# acceptance.minBusbwFraction when unset, by the transport network.rdma declares. Both are held to
# seed 002's healthy run: 2 A100 nodes on 25GbE RoCE, ib_write_bw 23.14 Gbit/s (92.6% of the link:
# RoCE's own ceiling), nccl-tests all_reduce busbw 2.81 GB/s = 22.48 Gbit/s (89.9% of the link).
# - RDMA 0.8 (20 Gbit/s on 25GbE): 11% under that healthy result; 0.9 failed it (22.48 < 22.5).
# - Sockets 0.25 (6.25 Gbit/s on 25GbE, busbw 0.78 GB/s): NCCL's socket transport stages through
#   host memory over TCP and reaches ~30-60% of the wire on bare hosts (NVIDIA/nccl#209, #450);
#   lab pods cross the CNI's overlay (calico's VXLANCrossSubnet between subnets, flannel's VXLAN
#   everywhere: 50 bytes of every 1500, pod MTU 1450, encapsulation on the CPU). A healthy socket lab measures ~0.3-0.5 of the link; 0.25 passes it and
#   still fails a broken path (0.5 GB/s = 4 Gbit/s, or traffic over a 1GbE management NIC).
RDMA_MIN_BUSBW_FRACTION = 0.8
SOCKET_MIN_BUSBW_FRACTION = 0.25


class AcceptanceConfig(Model):
    """The NCCL acceptance Job: an all-reduce sweep checked against network.linkGbps."""

    nccl: bool = Field(default=False, description="Run the NCCL all-reduce acceptance Job before training (needs training.nodes >= 2 and network.linkGbps).")
    min_busbw_fraction: float | None = Field(
        default=None,
        description=f"Pass when busbw >= this x linkGbps (default {RDMA_MIN_BUSBW_FRACTION} with network.rdma, "
                    f"{SOCKET_MIN_BUSBW_FRACTION} over sockets).",
    )
    max_bytes: int = Field(default=2**30, ge=2**30, le=2**34, description="Largest all-reduce size in bytes, 1-16 GiB.")

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


# A Linux interface name (IFNAMSIZ 16 with the NUL), a PCI address in sysfs form, an RDMA device
# name and a kernel module name: each reaches host scripts and CNI configs.
_LINUX_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
# RDMA device names are at most 63 characters (IB_DEVICE_NAME_MAX 64 with the NUL) and lowercase as
# every driver names them (mlx5_0, irdma0, bnxt_re0, efa_0, rxe0) and as rdma-core's udev renaming
# does (rocep59s0f0, ibp59s0f0): an uppercase name is a typo, or text meant for something else.
_RDMA_DEVICE = re.compile(r"[a-z][a-z0-9_.-]{0,62}")
_KERNEL_MODULE = re.compile(r"[a-z0-9_]{1,55}")
_NCCL_VAR = re.compile(r"NCCL_[A-Z0-9_]{1,60}")
# What the program sets itself from network.roce (and training.nccl.debug): named elsewhere.
ROCE_MANAGED_NCCL = {
    "NCCL_SOCKET_IFNAME": "the pods' secondary interface (net1) is set from network.roce",
    "NCCL_IB_HCA": "set network.roce.hca",
    "NCCL_IB_GID_INDEX": "set network.roce.gidIndex",
    "NCCL_DEBUG": "set training.nccl.debug",
}
# The secondary interface Multus gives the first network a pod asks for.
POD_RDMA_INTERFACE = "net1"
# ib_write_bw's average over the declared link rate that passes the RDMA link test, unset: seed 002
# measured 23.14 Gbit/s on 25GbE RoCE (0.926 of the link, RoCE v2's headers and the NIC's ceiling);
# 0.8 passes that with 13% to spare and fails a link that negotiated 10GbE or runs without PFC/ECN
# losses recovered (go-back-N retransmits halve it).
ROCE_MIN_LINK_FRACTION = 0.8


class RoceConfig(Model):
    """network.rdma on lab and dev: the RoCE NIC every GPU node hands its training pod (seed 002).

    The host-device CNI moves `interface` into the pod as net1 with an address from `range`
    (whereabouts); the rdma CNI moves the RDMA device of `pciAddress` with it (the RDMA subsystem
    in exclusive network-namespace mode). Every GPU node must have the same interface name and
    PCI address: one NetworkAttachmentDefinition serves them all (lab node prep checks each host)."""

    interface: str = Field(description="Host netdev of the RoCE NIC on every GPU node, e.g. 'ens192' (seed 002).")
    pci_address: str = Field(description="Its PCI address in sysfs form, e.g. '0000:3b:00.0' (the rdma CNI moves this device's RDMA link).")
    hca: str = Field(description="Its RDMA device (NCCL_IB_HCA, ib_write_bw -d), e.g. 'irdma0' or 'mlx5_0'.")
    driver: str = Field(description="Its kernel driver, e.g. 'ice' (Intel E810) or 'mlx5_core': the RDMA device plugin selects by it.")
    gid_index: int = Field(default=1, ge=0, le=255, description="RoCE v2 GID index of the pod's IPv4 address (NCCL_IB_GID_INDEX, ib_write_bw -x); seed 002: 1.")
    range: ipaddress.IPv4Network = Field(
        description="Addresses whereabouts gives the pods' net1, e.g. '10.100.100.0/24' (at least /29 and training.nodes "
                    "addresses; clear of podCidr, serviceCidr, nodeCidr, the hosts, the API endpoint and the NFS server)."
    )
    nccl_env: dict[str, str] = Field(default_factory=dict, description="Further NCCL_* variables for training pods, e.g. {NCCL_IB_TC: '106'}.")
    min_link_fraction: float = Field(
        default=ROCE_MIN_LINK_FRACTION, gt=0, le=1,
        description=f"RDMA link test: pass when ib_write_bw's average >= this x network.linkGbps (default {ROCE_MIN_LINK_FRACTION}).",
    )

    @field_validator("interface")
    @classmethod
    def _interface(cls, v: str) -> str:
        if not _LINUX_IFNAME.fullmatch(v) or v in (".", ".."):
            raise ValueError("must be a Linux interface name: 1-15 characters of A-Z a-z 0-9 _ . -")
        if v == POD_RDMA_INTERFACE:
            raise ValueError(f"{POD_RDMA_INTERFACE!r} is the name the pods' secondary interface gets: name the host's NIC")
        return v

    @field_validator("pci_address", mode="before")
    @classmethod
    def _pci(cls, v: str) -> str:
        v = str(v).lower()
        if not _PCI_ADDRESS.fullmatch(v):
            raise ValueError("must be a PCI address as sysfs writes it, domain included: '0000:3b:00.0'")
        return v

    @field_validator("hca")
    @classmethod
    def _hca(cls, v: str) -> str:
        if not _RDMA_DEVICE.fullmatch(v):
            raise ValueError("must be an RDMA device name as `rdma link` prints it: a lowercase letter, then lowercase "
                             "letters, digits, '_', '.' or '-', at most 63 characters (e.g. 'irdma0', 'mlx5_0', "
                             "'rocep59s0f0')")
        return v

    @field_validator("driver")
    @classmethod
    def _driver(cls, v: str) -> str:
        if not _KERNEL_MODULE.fullmatch(v):
            raise ValueError("must be a kernel driver name as /sys/class/net/<if>/device/driver names it, e.g. 'ice', 'mlx5_core'")
        return v

    @field_validator("range", mode="before")
    @classmethod
    def _range(cls, v: object) -> ipaddress.IPv4Network:
        try:
            net = ipaddress.IPv4Network(str(v), strict=True)
        except ValueError as err:
            raise ValueError(f"must be an IPv4 network with its host bits zero, e.g. '10.100.100.0/24' ({err})") from None
        if net.prefixlen > 29:
            raise ValueError("must be a /29 or larger (whereabouts hands out its host addresses, one per pod)")
        return net

    @field_validator("nccl_env")
    @classmethod
    def _nccl_env(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _NCCL_VAR.fullmatch(name):
                raise ValueError(f"{name!r} is not an NCCL variable: names are NCCL_ followed by A-Z 0-9 _")
            if name in ROCE_MANAGED_NCCL:
                raise ValueError(f"{name} is set by the program: {ROCE_MANAGED_NCCL[name]}")
            if not isinstance(value, str) or "\n" in value or len(value) > 1024:
                raise ValueError(f"{name}: the value must be one line of text (quote numbers: '106')")
        return v


class NetworkConfig(Model):
    """The network between GPU nodes, as declared (what the acceptance test holds it to)."""

    link_gbps: float | None = Field(default=None, gt=0, le=3200, description="Per-node link rate in Gbit/s.")
    rdma: bool = Field(default=False, description="NCCL must use RDMA (IB/RoCE): a socket fallback fails the acceptance Job (lab, dev: needs network.roce; gke: refused).")
    roce: RoceConfig | None = Field(
        default=None,
        description="lab, dev with network.rdma: the RoCE NIC moved into training pods (interface, pciAddress, hca, "
                    "driver, gidIndex, range, ncclEnv, minLinkFraction).",
    )

    _optional = field_validator("link_gbps", "roce", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))


def training_problems(t: TrainingConfig, acc: AcceptanceConfig, network: NetworkConfig, gpu: GpuConfig) -> Problems:
    """training and acceptance against each other, the declared network and GPU sharing."""
    problems: Problems = []
    runs = t.enabled or acc.nccl
    for req, lim, key in ((t.cpu_request, t.cpu_limit, "cpu"), (t.memory_request, t.memory_limit, "memory")):
        if parse_quantity(req) > parse_quantity(lim):
            problems.append((f"training.{key}Request", f"{req} is more than training.{key}Limit {lim}"))
    # What the pod writes to /dev/shm (a memory-backed emptyDir) is charged to its memory limit.
    shm, limit = parse_quantity(t.shm_size), parse_quantity(t.memory_limit)
    if shm > limit:
        problems.append(("training.shmSize", f"{t.shm_size} exceeds training.memoryLimit {t.memory_limit} (shm counts as memory)"))
    elif limit - shm < MIN_MEMORY:
        problems.append(("training.memoryLimit",
                         f"{t.memory_limit} leaves {format_bytes(limit - shm)} besides training.shmSize {t.shm_size} "
                         "(shm counts as memory): the processes need at least 1Gi of their own"))
    if t.warmup_epochs is not None and t.warmup_epochs >= t.epochs:
        problems.append(("training.warmupEpochs",
                         f"{t.warmup_epochs:g} is not less than training.epochs {t.epochs}: the run would end in warm-up"))
    if t.prepare_data and not t.dataset.downloadable:
        problems.append(("training.prepareData",
                         f"downloads a public dataset: set training.dataset cifar10 or fashion-mnist (is {t.dataset.value})"))
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
    if network.roce is not None:
        roce = network.roce
        if not network.rdma:
            problems.append(("network.roce", "moves an RDMA NIC into training pods: set network.rdma true with it"))
        if t.nccl.socket_ifname is not None:
            problems.append(("training.nccl.socketIfname",
                             f"with network.roce the pods' NCCL and Gloo traffic uses {POD_RDMA_INTERFACE}: leave it unset"))
        if t.image is None:
            problems.append(("training.image", "network.roce runs the RDMA exporter and link test from the workload image, "
                                               "pinned ('registry/trainer:1.0.0')"))
        hosts = roce.range.num_addresses - 2
        if runs and t.nodes > hosts:
            problems.append(("network.roce.range", f"{roce.range} has {hosts} host addresses for training.nodes {t.nodes} pods"))
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
