"""The one config model of gpu-cluster: every key, its type, default and meaning.

Stack files (Pulumi.<stack>.yaml) are parsed once, here, into a validated `StackConfig`;
components receive that model (or a piece of it), never raw `pulumi.Config`. A user error is a
`ConfigError` naming every bad key as `gpu-cluster:<path>` and what is allowed; it is raised before
any resource is registered and Pulumi prints it without a traceback (it is a `pulumi.RunError`).

Secret values (the SSH private key, a dev kubeconfig) are never part of the model: they stay
`pulumi.Output` secrets in `StackSecrets`, and the model only records that they were given.
"""

from __future__ import annotations

import base64
import binascii
import enum
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pulumi
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from components import versions

# These tables import nothing else of the project (no cycle with the components that import this).
from components.gke import accelerators, locations, machine_types, node_labels

NAMESPACE = "gpu-cluster"

# Top-level keys holding secrets: read with get_secret, never parsed into the model.
SECRET_KEYS = ("sshPrivateKey", "kubeconfig")


class ConfigError(pulumi.RunError):
    """A stack config error: one line per bad key, each naming the key."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        lines = [f"{self.qualified_key(key)}: {message}" for key, message in problems]
        super().__init__("invalid stack configuration:\n  " + "\n  ".join(lines))

    @staticmethod
    def qualified_key(key: str) -> str:
        """The key as `pulumi config` names it (subclasses may admit other namespaces)."""
        return f"{NAMESPACE}:{key}"


class Platform(enum.StrEnum):
    LAB = "lab"  # own servers over SSH, kubeadm
    DEV = "dev"  # an existing cluster (minikube --gpus all, kind, ...)
    GKE = "gke"  # Google Kubernetes Engine, created by this program


class Cni(enum.StrEnum):
    FLANNEL = "flannel"
    CALICO = "calico"


class Role(enum.StrEnum):
    CONTROL_PLANE = "control-plane"
    WORKER = "worker"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


# RFC 1123 label: what Kubernetes accepts as a node name and we accept as a host name.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# RFC 1123 subdomain (at most 253 characters): node, StorageClass and most Kubernetes object names.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# The name part of a label key, and a non-empty label value (at most 63 characters each).
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def _check_dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a DNS subdomain name (lowercase a-z, 0-9, '-' and '.', "
                         "starting and ending alphanumeric, at most 253 characters)")
    return value


def label_problems(labels: Mapping[str, str]) -> list[str]:
    """What is wrong with these Kubernetes labels (key: [prefix/]name, value: name or empty)."""
    problems = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if not _LABEL_NAME.fullmatch(name) or (
            "/" in key and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))
        ):
            problems.append(f"label key {key!r} must be [<DNS subdomain>/]<name>, the name at most 63 characters of "
                            "A-Z a-z 0-9 - _ . starting and ending alphanumeric")
        if value and not _LABEL_NAME.fullmatch(value):
            problems.append(f"label value {value!r} of {key!r} must be empty or at most 63 characters of "
                            "A-Z a-z 0-9 - _ . starting and ending alphanumeric")
    return problems
# "<type> <base64>" as in ssh-keyscan output / known_hosts, without the host column.
_HOST_KEY = re.compile(
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521) "
    r"([A-Za-z0-9+/]{40,}={0,3})"
)
_APT_VERSION = re.compile(r"[0-9][A-Za-z0-9.+~:-]*")
# A POSIX portable user name as useradd takes it: it ends up in SSH and shell command lines.
_POSIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# Length of the EC point (uncompressed, 0x04 || X || Y) per curve of ecdsa-sha2-<curve>.
_EC_POINT_BYTES = {"nistp256": 65, "nistp384": 97, "nistp521": 133}


def _ssh_wire_fields(blob: bytes) -> list[bytes]:
    """The length-prefixed strings of an SSH public key blob (RFC 4253 6.6); ValueError if torn."""
    fields, i = [], 0
    while i < len(blob):
        size = int.from_bytes(blob[i:i + 4], "big")
        if i + 4 + size > len(blob):
            raise ValueError("truncated")
        fields.append(blob[i + 4:i + 4 + size])
        i += 4 + size
    return fields


def _host_key_problem(key_type: str, b64: str) -> str | None:
    """Why the base64 blob is not a `key_type` public key, or None."""
    try:
        fields = _ssh_wire_fields(base64.b64decode(b64, validate=True))
    except (ValueError, binascii.Error):
        return "its base64 part does not decode to an SSH public key"
    if not fields or fields[0] != key_type.encode():
        found = fields[0][:40].decode("ascii", "replace") if fields else "nothing"
        return f"its base64 part holds a {found!r} key, not {key_type}"
    if key_type == "ssh-ed25519":
        ok = len(fields) == 2 and len(fields[1]) == 32
    elif key_type == "ssh-rsa":  # e, n
        ok = len(fields) == 3 and all(fields[1:])
    else:
        curve = key_type.removeprefix("ecdsa-sha2-")
        ok = len(fields) == 3 and fields[1] == curve.encode() and len(fields[2]) == _EC_POINT_BYTES[curve]
    return None if ok else f"its base64 part is not a well-formed {key_type} key"


def _check_host_key(value: str) -> str:
    # No strip(): a key with a newline or extra words is refused rather than cut into shape.
    m = _HOST_KEY.fullmatch(value)
    if not m:
        raise ValueError(
            "must be a public host key '<type> <base64>' as printed by "
            "`ssh-keyscan -t ed25519 <host>` (without the host column); "
            "types: ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256/384/521"
        )
    problem = _host_key_problem(m.group(1), m.group(2))
    if problem:
        raise ValueError(f"{problem}; paste the line `ssh-keyscan -t ed25519 <host>` prints, from the key type on")
    return value


def _check_posix_user(value: str) -> str:
    if not _POSIX_USER.fullmatch(value):
        raise ValueError("must be a POSIX user name: [a-z_][a-z0-9_-]*, at most 32 characters (e.g. 'ubuntu')")
    return value


def _unusable_address(addr: ipaddress.IPv4Address, loopback_ok: bool = False) -> str | None:
    """Why other machines cannot reach `addr` as a host's own address, or None."""
    for kind, bad in (
        ("loopback", addr.is_loopback and not loopback_ok),
        ("unspecified", addr.is_unspecified),
        ("multicast", addr.is_multicast),
        ("link-local", addr.is_link_local),
        ("broadcast/reserved", addr.is_reserved),
    ):
        if bad:
            return (f"{addr} is a {kind} address; use the unicast address the other machines reach it at "
                    "(not loopback, unspecified, multicast, link-local or broadcast)")
    return None


# A DNS name: labels of letters, digits and '-', at most 63 each and 253 in all.
_HOSTNAME_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?")


def _check_remote_host(value: str, loopback_ok: bool = False) -> str:
    """An IPv4 address others can reach, or a DNS name."""
    if re.fullmatch(r"[0-9.]+", value):  # looks like an address: must be one
        try:
            addr = ipaddress.IPv4Address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a valid IPv4 address") from None
        problem = _unusable_address(addr, loopback_ok)
        if problem:
            raise ValueError(problem)
        return value
    labels = value.split(".")
    if len(value) > 253 or not all(_HOSTNAME_LABEL.fullmatch(label) for label in labels):
        raise ValueError("must be an IPv4 address or a DNS name (letters, digits, '-' and '.', "
                         "labels of at most 63 characters)")
    if not loopback_ok and labels[-1].lower() == "localhost":
        raise ValueError("localhost is this machine, not a server the cluster reaches")
    return value


class Host(_Model):
    """One server of the lab stack."""

    name: str = Field(description="Kubernetes node name (RFC 1123 label).")
    address: ipaddress.IPv4Address = Field(description="IPv4 address SSH and the cluster use.")
    role: Role = Field(description="control-plane or worker.")
    gpus: int = Field(default=0, description="NVIDIA GPUs in the host (0 = CPU node).")
    ssh_user: str = Field(default="ubuntu", description="SSH user with passwordless sudo.")
    ssh_port: int = Field(default=22, ge=1, le=65535, description="SSH port.")
    host_key: str = Field(description="Pinned SSH host key ('ssh-ed25519 AAAA...').")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _DNS_LABEL.fullmatch(v):
            raise ValueError(
                "must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63 characters)"
            )
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be 0 or more")
        return v

    _host_key = field_validator("host_key")(classmethod(lambda cls, v: _check_host_key(v)))
    _ssh_user = field_validator("ssh_user")(classmethod(lambda cls, v: _check_posix_user(v)))

    @field_validator("address")
    @classmethod
    def _address(cls, v: ipaddress.IPv4Address) -> ipaddress.IPv4Address:
        problem = _unusable_address(v)
        if problem:
            raise ValueError(problem)
        return v

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0


def _empty_to_none(value: Any) -> Any:
    # Pulumi injects the project defaults ("" and {}) for keys a stack does not set.
    return None if value in ("", {}) else value


class Bastion(_Model):
    """An SSH jump host in front of the lab servers."""

    host: str = Field(description="Address or DNS name of the jump host.")
    ssh_user: str = Field(default="ubuntu")
    ssh_port: int = Field(default=22, ge=1, le=65535)
    host_key: str = Field(description="Pinned SSH host key of the jump host.")

    _host_key = field_validator("host_key")(classmethod(lambda cls, v: _check_host_key(v)))
    _ssh_user = field_validator("ssh_user")(classmethod(lambda cls, v: _check_posix_user(v)))
    # Loopback allowed: the jump host may be a local SSH tunnel (the program connects from here).
    _host = field_validator("host")(classmethod(lambda cls, v: _check_remote_host(v, loopback_ok=True)))


class NvidiaDriver(_Model):
    """The NVIDIA driver installed on lab GPU hosts."""

    branch: str = Field(
        default=versions.NVIDIA_DRIVER_BRANCH_DEFAULT,
        description="Driver branch: installs nvidia-driver-<branch>-server and holds it.",
    )
    version: str | None = Field(
        default=None, description="Exact Debian version of that package (optional, pins fully)."
    )
    preinstalled: bool = Field(
        default=False, description="Hosts already have a working driver: do not install one."
    )

    @field_validator("branch")
    @classmethod
    def _branch(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9]{3}", v):
            raise ValueError("must be a driver branch number such as '570'")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not _APT_VERSION.fullmatch(v):
            raise ValueError("must be a Debian package version such as '570.172.08-0ubuntu0.22.04.1'")
        return v


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


# Profiles of the MIG manager's default config (all GPUs of a node partitioned alike).
_MIG_PROFILE = re.compile(r"all-(disabled|balanced|\d+g\.\d+gb)")


class GpuSharing(_Model):
    """How one physical GPU is offered to pods."""

    mode: SharingMode = Field(default=SharingMode.NONE, description="none, time-slicing or mig.")
    replicas: int = Field(default=1, description="time-slicing: pods sharing each GPU (2-48).")
    mig_strategy: MigStrategy = Field(default=MigStrategy.SINGLE, description="mig: single or mixed.")
    mig_profile: str = Field(default="all-disabled", description="mig: MIG manager profile, e.g. all-1g.10gb.")

    @field_validator("mig_profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        if not _MIG_PROFILE.fullmatch(v):
            raise ValueError("must be a MIG manager profile: all-disabled, all-balanced or all-<N>g.<M>gb")
        return v


class GpuGate(_Model):
    """The GPU-ready gate: a Job that must pass on every GPU node before GPU workloads start."""

    enabled: bool = Field(default=True)
    timeout_minutes: int = Field(default=30, ge=5, le=240, description="How long `up` waits for it.")


class GpuConfig(_Model):
    stack: GpuStack = Field(default=GpuStack.DEVICE_PLUGIN, description="device-plugin or operator.")
    sharing: GpuSharing = Field(default_factory=GpuSharing)
    gate: GpuGate = Field(default_factory=GpuGate)


# --- distributed training, its acceptance test, the network it runs on, shared storage ---------

# A Kubernetes quantity as used for cpu/memory/shm sizes ("500m", "4", "16Gi", "1.5G").
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_QUANTITY_FACTOR = {
    None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
# An image reference pinned by a tag (not "latest") or by a digest.
_IMAGE_NAME = re.compile(r"[a-z0-9]+(?:(?:[._-]|__|[-]+)[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*")
_IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_IMAGE_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_IFNAME = re.compile(r"\^?[A-Za-z0-9_.=-]+(,[A-Za-z0-9_.=-]+)*")


def quantity_value(text: str) -> float:
    """The numeric value of a Kubernetes quantity (cpu in cores, memory in bytes)."""
    m = _QUANTITY.fullmatch(text)
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    return float(m.group(1)) * _QUANTITY_FACTOR[m.group(2)]


def _check_quantity(value: str) -> str:
    if not _QUANTITY.fullmatch(str(value)):
        raise ValueError("must be a Kubernetes quantity such as '500m', '4', '16Gi'")
    return str(value)


def _check_pinned_image(value: str) -> str:
    """name:tag (tag not 'latest') or name@sha256:<digest>; an untagged name is rejected."""
    name, _, digest = value.partition("@")
    if digest:
        if not _IMAGE_DIGEST.fullmatch(digest):
            raise ValueError("digest must be sha256:<64 hex digits>")
        name = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    else:
        last = name.rsplit("/", 1)[-1]
        if ":" not in last:
            raise ValueError("must be pinned by a tag or digest (e.g. 'registry/trainer:1.0.0'); untagged means latest")
        name, tag = name.rsplit(":", 1)
        if tag == "latest":
            raise ValueError("must be pinned; ':latest' moves under you")
        if not _IMAGE_TAG.fullmatch(tag):
            raise ValueError(f"tag {tag!r} is not a valid image tag")
    if not _IMAGE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid image name (lowercase, 'registry[:port]/path')")
    return value


class Launcher(enum.StrEnum):
    INDEXED_JOB = "indexed-job"  # batch/v1 Indexed Job + headless Service (seed 000)
    PYTORCHJOB = "pytorchjob"  # Kubeflow training operator PyTorchJob (seed 004)


class NcclDebug(enum.StrEnum):
    NONE = "NONE"
    VERSION = "VERSION"
    WARN = "WARN"
    INFO = "INFO"
    TRACE = "TRACE"


class NcclConfig(_Model):
    """NCCL environment of training pods."""

    debug: NcclDebug = Field(default=NcclDebug.WARN, description="NCCL_DEBUG level.")
    socket_ifname: str | None = Field(
        default=None, description="NCCL_SOCKET_IFNAME, e.g. 'eth0' or '^lo,docker' (unset: NCCL picks)."
    )

    _optional = field_validator("socket_ifname", mode="before")(classmethod(lambda cls, v: _empty_to_none(v)))

    @field_validator("socket_ifname")
    @classmethod
    def _ifname(cls, v: str | None) -> str | None:
        if v is not None and not _IFNAME.fullmatch(v):
            raise ValueError("must be interface names or prefixes, comma separated, optionally '^'-negated ('eth0', '^lo,docker')")
        return v


class ElasticConfig(_Model):
    """pytorchjob: torch elastic (the job keeps running with between minNodes and nodes pods)."""

    enabled: bool = Field(default=False)
    min_nodes: int = Field(default=1, ge=1, description="Fewest pods the job runs with.")


class TrainingConfig(_Model):
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

    _optional = field_validator("image", mode="before")(classmethod(lambda cls, v: _empty_to_none(v)))
    _quantities = field_validator("cpu_request", "cpu_limit", "memory_request", "memory_limit", "shm_size", mode="before")(
        classmethod(lambda cls, v: _check_quantity(v))
    )

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return None if v is None else _check_pinned_image(v)

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


class AcceptanceConfig(_Model):
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


class NetworkConfig(_Model):
    """The network between GPU nodes, as declared (what the acceptance test holds it to)."""

    link_gbps: float | None = Field(default=None, gt=0, le=3200, description="Per-node link rate in Gbit/s.")
    rdma: bool = Field(default=False, description="NCCL must use RDMA (IB/RoCE), not sockets.")

    _optional = field_validator("link_gbps", mode="before")(classmethod(lambda cls, v: _empty_to_none(v)))


_PATH_PART = re.compile(r"[A-Za-z0-9._-]+")


def _check_abs_path(value: str, root_ok: bool = False) -> str:
    """A normalised absolute path of safe characters (it reaches shell scripts, exports and PVs)."""
    if root_ok and value == "/":
        return value
    parts = value.split("/")
    if parts[0] != "" or not all(_PATH_PART.fullmatch(p) and p not in (".", "..") for p in parts[1:]):
        raise ValueError("must be a normalised absolute path: '/'-separated names of A-Z a-z 0-9 . _ - "
                         "(no '.', '..', '//' or trailing '/'), e.g. '/srv/gpu-cluster/shared'")
    return value


# Host directories never to export read-write (no_root_squash, chmod 0755) or mount through a
# hostPath: system trees, refused with everything under them ...
_SYSTEM_TREES = (
    "/etc", "/proc", "/sys", "/dev", "/boot", "/root", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
    "/libx32", "/snap", "/run", "/var/run", "/var/lock", "/var/lib/kubelet", "/var/lib/etcd", "/var/lib/containerd",
    "/var/lib/docker", "/var/lib/cni", "/var/lib/calico", "/var/log/pods", "/var/log/containers", "/opt/cni",
)
# ... and directories holding everyone's data, refused themselves (a directory below them is fine).
_SHARED_DIRS = ("/var/lib", "/var/log", "/var/cache", "/var/spool", "/var/tmp", "/var/mail", "/var/opt", "/var/local")


def host_dir_problem(path: str) -> str | None:
    """Why `path` (already normalised) must not be a directory this program shares from a host."""
    allowed = "use a directory of its own, two or more levels deep, e.g. /srv/gpu-cluster/shared"
    for tree in _SYSTEM_TREES:
        if path == tree or path.startswith(tree + "/"):
            return f"{path} is {'' if path == tree else 'under '}{tree}, a system directory; {allowed}"
    if path.count("/") < 2 or path in _SHARED_DIRS:
        return f"{path} is a top-level or shared system directory; {allowed}"
    return None


class NfsExport(_Model):
    server: str = Field(description="NFS server address or DNS name.")
    path: str = Field(description="Exported directory on the server, absolute.")

    # The server's own layout: '/' is allowed (an NFSv4 pseudo-root).
    _path = field_validator("path")(classmethod(lambda cls, v: _check_abs_path(v, root_ok=True)))
    _server = field_validator("server")(classmethod(lambda cls, v: _check_remote_host(v)))


class StorageConfig(_Model):
    """The shared ReadWriteMany volume (cache, data, checkpoints) training pods mount."""

    size: str = Field(default="100Gi", description="Requested size of the shared claim.")
    # lab
    nfs: NfsExport | None = Field(default=None, description="lab: an existing NFS export {server, path}.")
    provision: bool = Field(default=False, description="lab: set up an NFS server on the control plane.")
    export_path: str = Field(default="/srv/gpu-cluster/shared", description="lab provision: directory exported.")
    # dev
    host_path: str | None = Field(default=None, description="dev: a node directory (single-node clusters).")
    use_default_class: bool = Field(default=False, description="dev: a claim on the cluster's default class.")

    _optional = field_validator("nfs", "host_path", mode="before")(classmethod(lambda cls, v: _empty_to_none(v)))
    _size = field_validator("size", mode="before")(classmethod(lambda cls, v: _check_quantity(v)))

    # Syntax here; which directories are refused (host_dir_problem) is a cross-check, so that a
    # refused directory is reported together with the other storage problems.
    @field_validator("export_path", "host_path")
    @classmethod
    def _abs(cls, v: str | None) -> str | None:
        return None if v is None else _check_abs_path(v)

    @property
    def configured(self) -> bool:
        return bool(self.nfs or self.provision or self.host_path or self.use_default_class)


class MonitoringAlerts(_Model):
    """Thresholds of the GPU alert rules (components/monitoring/alerts.py)."""

    gpu_temp_celsius: int = Field(default=85, ge=60, le=110, description="GpuTemperatureHigh above this, 10 min.")
    idle_minutes: int = Field(default=30, ge=5, le=1440, description="GpuAllocatedButIdle after this long at 0%.")


class MonitoringConfig(_Model):
    """kube-prometheus-stack (Prometheus, Alertmanager, Grafana), GPU dashboards and alert rules."""

    enabled: bool = Field(default=True, description="Deploy the monitoring layer.")
    retention: str = Field(default="15d", description="Prometheus retention time, e.g. 15d, 72h.")
    storage_size: str = Field(default="50Gi", description="Prometheus volume size (PVC or emptyDir limit).")
    storage_class: str | None = Field(default=None, description="StorageClass of the PVC; none: emptyDir.")
    alerts: MonitoringAlerts = Field(default_factory=MonitoringAlerts)

    _optional = field_validator("storage_class", mode="before")(classmethod(lambda cls, v: _empty_to_none(v)))
    _class = field_validator("storage_class")(classmethod(lambda cls, v: v if v is None else _check_dns_subdomain(v)))

    @field_validator("retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        if not re.fullmatch(r"[1-9][0-9]*(h|d|w|y)", v):
            raise ValueError("must be a Prometheus duration in h, d, w or y, e.g. '15d'")
        return v

    @field_validator("storage_size")
    @classmethod
    def _storage_size(cls, v: str) -> str:
        if not re.fullmatch(r"[1-9][0-9]*(Gi|Ti)", v):
            raise ValueError("must be a size in Gi or Ti, e.g. '50Gi'")
        return v


# --- gke ---------------------------------------------------------------------------------------


class GkeLocation(enum.StrEnum):
    ZONAL = "zonal"  # control plane in gke.zone
    REGIONAL = "regional"  # control plane replicated across the zones of gcp:region


class ReleaseChannel(enum.StrEnum):
    RAPID = "RAPID"
    REGULAR = "REGULAR"
    STABLE = "STABLE"
    EXTENDED = "EXTENDED"


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


class GkeSharingStrategy(enum.StrEnum):
    NONE = "none"
    TIME_SHARING = "time-sharing"
    MPS = "mps"


class GkeGpuSharing(_Model):
    """GKE's GPU sharing on one pool (its own device plugin enforces it)."""

    strategy: GkeSharingStrategy = Field(default=GkeSharingStrategy.NONE, description="none, time-sharing or mps.")
    max_clients: int = Field(default=1, ge=1, le=48, description="Containers sharing each GPU (2-48 when shared).")


class GkeAccelerator(_Model):
    type: str = Field(description="Compute Engine accelerator type, e.g. nvidia-l4.")
    count: int = Field(ge=1, le=16, description="GPUs per node.")


class GkeAutoscaling(_Model):
    min_nodes: int = Field(default=0, ge=0, le=1000, description="Per zone; 0 lets the pool scale to zero.")
    max_nodes: int = Field(default=1, ge=1, le=1000, description="Per zone.")


# GKE cluster and node pool names: at most 40 characters; VPC networks and subnetworks: 63.
_GCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")
_GCE_NETWORK_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_GCE_PROJECT = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"


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


def _check_gce_network(v: str, kind: str) -> str:
    """A VPC network or subnetwork: its name, or its path in another project (Shared VPC)."""
    where = "global/networks" if kind == "network" else r"regions/[a-z]+-[a-z]+[0-9]+/subnetworks"
    if not re.fullmatch(rf"(projects/{_GCE_PROJECT}/{where}/)?{_GCE_NETWORK_NAME}", v):
        example = "projects/<host-project>/global/networks/<name>" if kind == "network" else \
            "projects/<host-project>/regions/<region>/subnetworks/<name>"
        raise ValueError(f"must be a {kind} name (a letter, then a-z, 0-9 and '-', ending alphanumeric, at most "
                         f"63 characters) or its path '{example}'")
    return v


class GpuPool(_Model):
    """One GPU node pool of the gke stack."""

    name: str = Field(description="Node pool name.")
    machine_type: str = Field(description="e.g. g2-standard-8, a2-highgpu-1g, n1-standard-8.")
    accelerator: GkeAccelerator
    zones: tuple[str, ...] = Field(description="Zones of the pool's nodes (where the accelerator is offered).")
    autoscaling: GkeAutoscaling = Field(default_factory=GkeAutoscaling)
    spot: bool = Field(default=False, description="Spot VMs (preemptible, cheaper).")
    disk_size_gb: int = Field(default=200, ge=50, le=65536)
    disk_type: Literal["pd-balanced", "pd-ssd", "pd-standard", "hyperdisk-balanced"] = "pd-balanced"
    labels: dict[str, str] = Field(default_factory=dict, description="Extra Kubernetes node labels.")
    driver: GkeDriver = Field(default=GkeDriver.GKE_DEFAULT)
    sharing: GkeGpuSharing = Field(default_factory=GkeGpuSharing)
    mig_partition_size: str | None = Field(default=None, description="GKE MIG partition, e.g. 1g.5gb (A100/H100).")

    _name = field_validator("name")(classmethod(lambda cls, v: _check_gce_name(v)))
    _optional = field_validator("mig_partition_size", mode="before")(classmethod(lambda cls, v: _empty_to_none(v)))

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


class GkeSystemPool(_Model):
    """The small CPU pool for cluster add-ons (DNS, metrics, the GPU stack's controllers)."""

    machine_type: str = Field(default="e2-standard-4")
    nodes_per_zone: int = Field(default=1, ge=1, le=10)
    disk_size_gb: int = Field(default=100, ge=50, le=65536)

    @field_validator("machine_type")
    @classmethod
    def _machine_type(cls, v: str) -> str:
        problem = machine_types.check_general_purpose(v)
        if problem:
            raise ValueError(problem)
        return v


class GkePrivateNodes(_Model):
    enabled: bool = Field(default=False, description="Nodes without public IPs (egress needs Cloud NAT).")
    master_cidr: ipaddress.IPv4Network = Field(default=ipaddress.IPv4Network("172.16.0.0/28"))


class AuthorizedNetwork(_Model):
    cidr: ipaddress.IPv4Network
    name: str = Field(default="")


class FilestoreTier(enum.StrEnum):
    BASIC_HDD = "BASIC_HDD"
    BASIC_SSD = "BASIC_SSD"
    ZONAL = "ZONAL"
    REGIONAL = "REGIONAL"
    ENTERPRISE = "ENTERPRISE"

    @property
    def zonal(self) -> bool:
        return self in (FilestoreTier.BASIC_HDD, FilestoreTier.BASIC_SSD, FilestoreTier.ZONAL)


# Capacity limits per tier (GiB), from the Filestore service tiers.
FILESTORE_CAPACITY: dict[FilestoreTier, tuple[int, int]] = {
    FilestoreTier.BASIC_HDD: (1024, 65434),
    FilestoreTier.BASIC_SSD: (2560, 65434),
    FilestoreTier.ZONAL: (1024, 102400),
    FilestoreTier.REGIONAL: (1024, 102400),
    FilestoreTier.ENTERPRISE: (1024, 10240),
}


class GkeFilestore(_Model):
    tier: FilestoreTier = Field(default=FilestoreTier.BASIC_HDD)
    capacity_gb: int = Field(default=1024, description="GiB; minimum per tier (BASIC_SSD 2560, others 1024).")
    zone: str | None = Field(default=None, description="Zonal tiers: its zone (default: gke.zone or the first pool's).")

    _optional = field_validator("zone", mode="before")(classmethod(lambda cls, v: _empty_to_none(v)))

    @field_validator("zone")
    @classmethod
    def _zone(cls, v: str | None) -> str | None:
        return None if v is None else _check_zone(v)


class GkeConfig(_Model):
    """The gke stack: cluster, system pool, GPU pools, Filestore. Project and region: gcp:project, gcp:region."""

    cluster_name: str = Field(default="gpu-cluster")
    location: GkeLocation = Field(default=GkeLocation.ZONAL)
    zone: str | None = Field(default=None, description="zonal: the control plane's zone.")
    release_channel: ReleaseChannel = Field(default=ReleaseChannel.REGULAR)
    deletion_protection: bool = Field(default=True)
    network: str = Field(default="default", description="VPC network.")
    subnetwork: str | None = Field(default=None, description="Subnetwork (default: the network's in the region).")
    private_nodes: GkePrivateNodes = Field(default_factory=GkePrivateNodes)
    authorized_networks: tuple[AuthorizedNetwork, ...] = Field(default=(), description="CIDRs allowed to the API.")
    system_pool: GkeSystemPool = Field(default_factory=GkeSystemPool)
    gpu_pools: tuple[GpuPool, ...] = Field(default=())
    filestore: GkeFilestore = Field(default_factory=GkeFilestore)

    _name = field_validator("cluster_name")(classmethod(lambda cls, v: _check_gce_name(v)))
    _optional = field_validator("zone", "subnetwork", mode="before")(classmethod(lambda cls, v: _empty_to_none(v)))
    _network = field_validator("network")(classmethod(lambda cls, v: _check_gce_network(v, "network")))
    _subnetwork = field_validator("subnetwork")(
        classmethod(lambda cls, v: v if v is None else _check_gce_network(v, "subnetwork"))
    )

    @field_validator("zone")
    @classmethod
    def _zone(cls, v: str | None) -> str | None:
        return None if v is None else _check_zone(v)

    @property
    def filestore_location(self) -> str | None:
        """Zonal tiers: a zone; None means the region (regional tiers)."""
        if not self.filestore.tier.zonal:
            return None
        if self.filestore.zone:
            return self.filestore.zone
        if self.zone:
            return self.zone
        return self.gpu_pools[0].zones[0] if self.gpu_pools and self.gpu_pools[0].zones else None


class StackConfig(_Model):
    """Everything a stack file says, validated. Field docs become the README config table."""

    platform: Platform = Field(description="lab (own servers over SSH) or dev (existing cluster).")
    kubernetes_version: str = Field(
        default=versions.KUBERNETES_DEFAULT,
        description="Kubernetes version (lab: installed; dev: schema version of emitted objects).",
    )
    # lab
    hosts: tuple[Host, ...] = Field(default=(), description="lab: the servers (see hosts[] keys).")
    control_plane_endpoint: str | None = Field(
        default=None,
        description="lab: stable 'host:port' of the API server (required with >1 control plane).",
    )
    pod_cidr: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("10.244.0.0/16"), description="lab: pod network."
    )
    service_cidr: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("10.96.0.0/12"), description="lab: service network."
    )
    cni: Cni = Field(default=Cni.FLANNEL, description="lab: flannel or calico.")
    containerd_version: str = Field(
        default=versions.CONTAINERD_DEFAULT, description="lab: containerd.io package version."
    )
    nvidia_driver: NvidiaDriver = Field(
        default_factory=NvidiaDriver, description="lab: NVIDIA driver (branch, version, preinstalled)."
    )
    gpu_taint: bool = Field(
        default=True,
        description="lab: taint GPU workers nvidia.com/gpu=present:NoSchedule (as GKE does).",
    )
    bastion: Bastion | None = Field(default=None, description="lab: optional SSH jump host.")
    # every platform
    gpu: GpuConfig = Field(
        default_factory=GpuConfig, description="GPU software stack, sharing and the GPU-ready gate."
    )
    # gke (project and region come from gcp:project and gcp:region)
    gke: GkeConfig = Field(
        default_factory=GkeConfig, description="gke: cluster, system pool, GPU node pools and Filestore."
    )
    monitoring: MonitoringConfig = Field(
        default_factory=MonitoringConfig, description="Prometheus, Grafana, GPU dashboards and alert rules."
    )
    training: TrainingConfig = Field(
        default_factory=TrainingConfig, description="The distributed training job (torchrun)."
    )
    acceptance: AcceptanceConfig = Field(
        default_factory=AcceptanceConfig, description="The NCCL all-reduce acceptance Job."
    )
    network: NetworkConfig = Field(
        default_factory=NetworkConfig, description="The GPU nodes' network as declared (link rate, RDMA)."
    )
    storage: StorageConfig = Field(
        default_factory=StorageConfig, description="The shared ReadWriteMany volume of training pods."
    )
    # dev
    kube_context: str | None = Field(
        default=None, description="dev: context of the local kubeconfig (when no kubeconfig secret)."
    )
    # Node names become object names and (in the offline renderer) file names: no '/' or '..'.
    gpu_nodes: tuple[Annotated[str, AfterValidator(_check_dns_subdomain)], ...] = Field(
        default=(), description="dev: names of existing nodes with GPUs, labelled for GPU workloads."
    )

    _optional = field_validator("control_plane_endpoint", "bastion", "kube_context", mode="before")(
        classmethod(lambda cls, v: _empty_to_none(v))
    )

    @field_validator("gpu_nodes")
    @classmethod
    def _gpu_nodes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("lists a node twice")
        return v

    @field_validator("kubernetes_version")
    @classmethod
    def _k8s_version(cls, v: str) -> str:
        m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", v)
        if not m:
            raise ValueError("must be a full version such as '1.34.2'")
        minor = f"{m.group(1)}.{m.group(2)}"
        if minor not in versions.KUBERNETES_SUPPORTED_MINORS:
            raise ValueError(
                f"minor {minor} is not supported; allowed: "
                + ", ".join(versions.KUBERNETES_SUPPORTED_MINORS)
            )
        return v.lstrip("v")

    @field_validator("containerd_version")
    @classmethod
    def _containerd(cls, v: str) -> str:
        if not _APT_VERSION.fullmatch(v):
            raise ValueError("must be a Debian package version such as '1.7.27-1'")
        # The lab's containerd config edit (sandbox_image, SystemdCgroup) follows the 1.x layout;
        # containerd 2.x moved those keys.
        if not re.fullmatch(r"1\.[67]\..+", v):
            raise ValueError(f"{v}: only containerd 1.6.x and 1.7.x are supported; 2.x is not supported yet")
        return v

    @property
    def gpu_node_count(self) -> int:
        """Nodes with GPUs, as far as the config knows (lab: hosts with gpus > 0; dev: gpuNodes)."""
        if self.platform is Platform.DEV:
            return len(self.gpu_nodes)
        if self.platform is Platform.GKE:  # the nodes that exist after `up`: each pool's minimum per zone
            return sum(p.autoscaling.min_nodes * len(p.zones) for p in self.gke.gpu_pools)
        return sum(1 for h in self.hosts if h.is_gpu)

    @property
    def host_installs_driver(self) -> bool:
        """lab: whether node prep installs the NVIDIA driver and toolkit on GPU hosts."""
        return self.gpu.stack is GpuStack.DEVICE_PLUGIN and not self.nvidia_driver.preinstalled

    @property
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes_version.split(".")[:2])

    @property
    def control_planes(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.role is Role.CONTROL_PLANE)

    @property
    def workers(self) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.role is Role.WORKER)

    @property
    def api_endpoint(self) -> str:
        """host:port every node and the admin kubeconfig use to reach the API server."""
        if self.control_plane_endpoint:
            return self.control_plane_endpoint
        return f"{self.control_planes[0].address}:6443"


@dataclass(frozen=True)
class StackSecrets:
    """Secret config values, kept as Pulumi secrets; None when not set."""

    ssh_private_key: pulumi.Output[str] | None = None
    kubeconfig: pulumi.Output[str] | None = None


# ---------------------------------------------------------------------------------------------
# Parsing and cross-field checks


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _describe(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known key (see the README config table)"
    if kind == "enum":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"must be one of {allowed} (got {err.get('input')!r})"
    msg = str(err.get("msg", "is invalid"))
    return msg.removeprefix("Value error, ")


def _gpu_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    sharing = cfg.gpu.sharing
    if sharing.mode is SharingMode.TIME_SLICING and not 2 <= sharing.replicas <= 48:
        problems.append(("gpu.sharing.replicas", "time-slicing needs 2 to 48 replicas per GPU"))
    if sharing.mode is not SharingMode.TIME_SLICING and sharing.replicas != 1:
        problems.append(("gpu.sharing.replicas", "applies only to mode time-slicing; leave it at 1"))
    if sharing.mode is SharingMode.MIG and cfg.gpu.stack is GpuStack.OPERATOR:
        # The operator's MIG manager partitions the GPUs by migProfile.
        if sharing.mig_strategy is MigStrategy.MIXED and sharing.mig_profile == "all-balanced" and cfg.gpu.gate.enabled:
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
        if sharing.mig_strategy is MigStrategy.MIXED and cfg.gpu.gate.enabled:
            problems.append(("gpu.sharing.migStrategy", "the GPU-ready gate needs one MIG slice type under mixed, "
                                                        "unknown for GPUs partitioned by hand: use single or "
                                                        "gpu.gate.enabled false"))
    return problems


def _training_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """training, acceptance, network and storage against each other and the configured nodes."""
    problems: list[tuple[str, str]] = []
    t, acc, st = cfg.training, cfg.acceptance, cfg.storage
    runs = t.enabled or acc.nccl
    for req, lim, key in ((t.cpu_request, t.cpu_limit, "cpu"), (t.memory_request, t.memory_limit, "memory")):
        if quantity_value(req) > quantity_value(lim):
            problems.append((f"training.{key}Request", f"{req} is more than training.{key}Limit {lim}"))
    if quantity_value(t.shm_size) > quantity_value(t.memory_limit):
        problems.append(("training.shmSize", f"{t.shm_size} exceeds training.memoryLimit {t.memory_limit} (shm counts as memory)"))
    if t.elastic.enabled and t.launcher is not Launcher.PYTORCHJOB:
        problems.append(("training.elastic.enabled", "elastic training needs training.launcher pytorchjob"))
    if runs and cfg.gpu.sharing.mode is SharingMode.MIG and t.gpus_per_node > 1:
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
        if cfg.network.link_gbps is None:
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
    # The acceptance Job is sized like the training job (training.nodes x training.gpusPerNode).
    # gke is checked against what its pools can scale to (_gke_capacity_checks), not their minimum.
    if runs and cfg.platform is not Platform.GKE and cfg.gpu_node_count and t.nodes > cfg.gpu_node_count:
        where = "gpuNodes" if cfg.platform is Platform.DEV else "hosts with gpus > 0"
        problems.append(("training.nodes", f"{t.nodes} pods (one per node) but only {cfg.gpu_node_count} {where}"))
    if runs and cfg.platform is Platform.LAB:
        gpu_hosts = sorted((h.gpus for h in cfg.hosts if h.is_gpu), reverse=True)
        if gpu_hosts and t.gpus_per_node > gpu_hosts[0]:
            problems.append(("training.gpusPerNode",
                             f"{t.gpus_per_node} GPUs per pod but no host has more than {gpu_hosts[0]} (hosts[].gpus)"))
        elif gpu_hosts and t.nodes <= len(gpu_hosts) and gpu_hosts[t.nodes - 1] < t.gpus_per_node:
            problems.append(
                ("training.gpusPerNode",
                 f"{t.nodes} x {t.gpus_per_node} GPUs do not fit: only {sum(g >= t.gpus_per_node for g in gpu_hosts)} "
                 f"host(s) have {t.gpus_per_node} or more GPUs")
            )
    if runs and cfg.gpu_node_count == 0 and cfg.platform in (Platform.LAB, Platform.DEV):
        problems.append(("training.enabled", "no GPU node is configured (hosts[].gpus on lab, gpuNodes on dev)"))
    if runs and cfg.platform is Platform.GKE:
        problems += _gke_capacity_checks(cfg)
    # storage
    for key, path in (("storage.exportPath", st.export_path), ("storage.hostPath", st.host_path)):
        problem = host_dir_problem(path) if path else None
        if problem:
            problems.append((key, problem))
    if cfg.platform is Platform.LAB:
        if st.nfs and st.provision:
            problems.append(("storage.provision", "choose one: an existing export (storage.nfs) or provision: true"))
        if st.host_path or st.use_default_class:
            problems.append(("storage", "hostPath and useDefaultClass are dev keys; lab uses storage.nfs or storage.provision"))
        if runs and not (st.nfs or st.provision):
            problems.append(("storage", "training needs shared storage: set storage.nfs {server, path} or storage.provision: true"))
    elif cfg.platform is Platform.DEV:
        if st.nfs or st.provision:
            problems.append(("storage", "nfs and provision are lab keys; dev uses storage.hostPath or storage.useDefaultClass"))
        if st.host_path and st.use_default_class:
            problems.append(("storage.useDefaultClass", "choose one: storage.hostPath or useDefaultClass"))
        if runs and not (st.host_path or st.use_default_class):
            problems.append(("storage", "training needs shared storage: set storage.hostPath or storage.useDefaultClass: true"))
        if runs and st.host_path and t.nodes > 1:
            problems.append(("storage.hostPath", "a node directory is not shared between nodes; use useDefaultClass with training.nodes > 1"))
    return problems


def gke_gpus_per_node(pool: GpuPool) -> int:
    """nvidia.com/gpu a node of the pool offers: GPUs x shared clients, or x MIG slices per GPU."""
    per_gpu = pool.sharing.max_clients
    if pool.mig_partition_size:
        per_gpu *= 7 // int(pool.mig_partition_size.split("g", 1)[0])  # 7 compute slices per A100/H100
    return pool.accelerator.count * per_gpu


def _gke_capacity_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """training (and the acceptance Job) against the most the GPU pools can scale to."""
    t, pools = cfg.training, cfg.gke.gpu_pools
    if not pools:
        return []
    most = max(gke_gpus_per_node(p) for p in pools)
    if t.gpus_per_node > most:
        return [("training.gpusPerNode", f"{t.gpus_per_node} GPUs per pod but no pool's node has more than {most} "
                                         "(gke.gpuPools[].accelerator.count)")]
    room = sum(p.autoscaling.max_nodes * len(p.zones) for p in pools if gke_gpus_per_node(p) >= t.gpus_per_node)
    if t.nodes > room:
        return [("training.nodes", f"{t.nodes} pods (one per node) but the pools with {t.gpus_per_node} or more GPUs "
                                   f"per node scale to at most {room} nodes (autoscaling.maxNodes x zones)")]
    return []


def _monitoring_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    m = cfg.monitoring
    hours = int(m.retention[:-1]) * {"h": 1, "d": 24, "w": 24 * 7, "y": 24 * 365}[m.retention[-1]]
    # The idle alert needs its whole window in the TSDB (and dashboards a day of history).
    if hours * 60 < max(m.alerts.idle_minutes, 24 * 60):
        return [("monitoring.retention", f"{m.retention} is shorter than a day (or alerts.idleMinutes); use e.g. 15d")]
    return []


def _gke_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """gke: pools against the accelerator table, drivers against gpu.stack. gcp:project and
    gcp:region live outside this namespace; stacks/gke.py checks them (and zones against the region)."""
    if cfg.platform is not Platform.GKE:
        return []
    gke, problems = cfg.gke, []
    if gke.location is GkeLocation.ZONAL and not gke.zone:
        problems.append(("gke.zone", "a zonal cluster needs its zone, e.g. 'us-central1-a' (or location: regional)"))
    if gke.location is GkeLocation.REGIONAL and gke.zone:
        problems.append(("gke.zone", "applies to location zonal only; a regional cluster spans gcp:region"))
    if gke.private_nodes.enabled and gke.private_nodes.master_cidr.prefixlen != 28:
        problems.append(("gke.privateNodes.masterCidr", "must be a /28, e.g. 172.16.0.0/28"))
    low, high = FILESTORE_CAPACITY[gke.filestore.tier]
    if not low <= gke.filestore.capacity_gb <= high:
        problems.append(("gke.filestore.capacityGb", f"{gke.filestore.tier.value} takes {low} to {high} GiB"))
    if gke.filestore.zone and not gke.filestore.tier.zonal:
        problems.append(("gke.filestore.zone", f"{gke.filestore.tier.value} is regional; leave zone unset"))
    if not gke.gpu_pools:
        problems.append(("gke.gpuPools", "gke needs at least one GPU node pool"))
    for key, value in (("hosts", cfg.hosts), ("gpuNodes", cfg.gpu_nodes), ("kubeContext", cfg.kube_context)):
        if value:
            problems.append((key, "is not a gke key (GPU nodes come from gke.gpuPools)"))
    operator = cfg.gpu.stack is GpuStack.OPERATOR
    if not operator and cfg.gpu.sharing.mode is SharingMode.TIME_SLICING:
        problems.append(("gpu.sharing.mode", "on gke with gpu.stack device-plugin, GKE's device plugin shares GPUs: "
                                             "use gke.gpuPools[].sharing"))
    if not operator and cfg.gpu.sharing.mode is SharingMode.MIG:
        problems.append(("gpu.sharing.mode", "on gke with gpu.stack device-plugin, GKE partitions GPUs: "
                                             "use gke.gpuPools[].migPartitionSize"))
    seen: dict[str, int] = {}
    for i, pool in enumerate(gke.gpu_pools):
        key = f"gke.gpuPools[{i}]"
        if pool.name in seen:
            problems.append((f"{key}.name", f"duplicates gke.gpuPools[{seen[pool.name]}].name {pool.name!r}"))
        seen.setdefault(pool.name, i)
        if pool.name == "system":
            problems.append((f"{key}.name", "'system' is the CPU system pool's name"))
        problems += [(f"{key}.{sub}", msg) for sub, msg in
                     accelerators.check(pool.machine_type, pool.accelerator.type, pool.accelerator.count)]
        for label in pool.labels:
            if label == node_labels.NO_GKE_DEVICE_PLUGIN_LABEL and not operator:
                problems.append((f"{key}.labels", f"{label} switches GKE's NVIDIA device plugin off, which gpu.stack "
                                                  "device-plugin relies on on gke (no GPU would be advertised): remove "
                                                  "it, or use gpu.stack operator (which sets it itself)"))
            elif label in node_labels.OWN_LABELS:
                problems.append((f"{key}.labels", f"{label} is set by this program; remove it"))
        if not pool.zones:
            problems.append((f"{key}.zones", f"must list at least one zone where {pool.accelerator.type} is offered"))
        elif len(set(pool.zones)) != len(pool.zones):
            problems.append((f"{key}.zones", "lists a zone twice"))
        if pool.autoscaling.min_nodes > pool.autoscaling.max_nodes:
            problems.append((f"{key}.autoscaling.minNodes",
                             f"{pool.autoscaling.min_nodes} is more than maxNodes {pool.autoscaling.max_nodes}"))
        sharing = pool.sharing
        if sharing.strategy is GkeSharingStrategy.NONE and sharing.max_clients != 1:
            problems.append((f"{key}.sharing.maxClients", "applies to strategy time-sharing or mps; leave it at 1"))
        if sharing.strategy is not GkeSharingStrategy.NONE and sharing.max_clients < 2:
            problems.append((f"{key}.sharing.maxClients", f"{sharing.strategy.value} needs 2 to 48 clients per GPU"))
        acc = accelerators.ACCELERATORS.get(pool.accelerator.type)
        if pool.mig_partition_size is not None and acc is not None:
            if not acc.mig_partitions:
                problems.append((f"{key}.migPartitionSize", f"MIG needs A100 or H100; {pool.accelerator.type} has none"))
            elif pool.mig_partition_size not in acc.mig_partitions:
                problems.append((f"{key}.migPartitionSize",
                                 f"{acc.product} partitions are {', '.join(acc.mig_partitions)}"))
        if operator:
            # NVIDIA's GKE guide: GKE's driver and device plugin are switched off on the operator's
            # nodes; the driver comes from Google's installer DaemonSet or the operator (Ubuntu).
            if pool.driver.gke_managed:
                problems.append((f"{key}.driver", "gpu.stack operator needs installer-cos, installer-ubuntu or none "
                                                  f"(GKE's own driver and device plugin are disabled); got {pool.driver.value}"))
            if sharing.strategy is not GkeSharingStrategy.NONE or pool.mig_partition_size is not None:
                problems.append((f"{key}.sharing", "GKE's sharing and MIG settings need GKE's device plugin; with "
                                                   "gpu.stack operator use gpu.sharing"))
        elif pool.driver is GkeDriver.NONE:
            problems.append((f"{key}.driver", "none leaves the nodes without a driver: it needs gpu.stack operator"))
    if operator:
        installer = {p.driver.installer for p in gke.gpu_pools if not p.driver.gke_managed}
        if len(installer) > 1:
            problems.append(("gke.gpuPools", "with gpu.stack operator every pool's driver is an installer-* or every "
                                             "one is none (the operator's driver setting is cluster-wide)"))
    return problems


def _cross_checks(
    cfg: StackConfig, secret_keys: set[str], plaintext_secrets: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = _gpu_checks(cfg) + _training_checks(cfg) + _monitoring_checks(cfg) + _gke_checks(cfg)
    if cfg.platform is Platform.GKE:
        return problems
    if cfg.platform is Platform.DEV:
        if "kubeconfig" not in secret_keys and not cfg.kube_context:
            problems.append(
                ("kubeContext", "dev needs a kubeconfig secret (gpu-cluster:kubeconfig) or a kubeContext")
            )
        return problems

    # lab
    if not cfg.hosts:
        problems.append(("hosts", "lab needs at least one host with role control-plane"))
        return problems
    if not cfg.control_planes:
        problems.append(("hosts", "no host has role control-plane; exactly one is needed, or more with controlPlaneEndpoint"))
    elif len(cfg.control_planes) > 1 and not cfg.control_plane_endpoint:
        problems.append(
            (
                "controlPlaneEndpoint",
                f"{len(cfg.control_planes)} control-plane hosts need a load-balanced endpoint 'host:port'",
            )
        )
    endpoint_problem, endpoint_ip = _endpoint(cfg.control_plane_endpoint)
    if endpoint_problem:
        problems.append(("controlPlaneEndpoint", endpoint_problem))
    if "sshPrivateKey" not in secret_keys and not plaintext_secrets:
        problems.append(
            (
                "sshPrivateKey",
                "lab needs the SSH private key as a secret: "
                "`pulumi config set --secret gpu-cluster:sshPrivateKey < ~/.ssh/id_ed25519`",
            )
        )

    seen_names: dict[str, int] = {}
    seen_addrs: dict[str, int] = {}
    for i, host in enumerate(cfg.hosts):
        if host.name in seen_names:
            problems.append((f"hosts[{i}].name", f"duplicates hosts[{seen_names[host.name]}].name {host.name!r}"))
        seen_names.setdefault(host.name, i)
        addr = str(host.address)
        if addr in seen_addrs:
            problems.append((f"hosts[{i}].address", f"duplicates hosts[{seen_addrs[addr]}].address {addr}"))
        seen_addrs.setdefault(addr, i)
        for net, key in ((cfg.pod_cidr, "podCidr"), (cfg.service_cidr, "serviceCidr")):
            if host.address in net:
                problems.append((key, f"{net} contains hosts[{i}].address {addr}; pick a range no host is in"))
        if host.role is Role.CONTROL_PLANE and host.is_gpu and cfg.gpu_taint:
            pass  # a GPU control plane is fine; it is not tainted for GPUs (it has its own taint)
    nfs_ip = _ipv4_or_none(cfg.storage.nfs.server) if cfg.storage.nfs else None
    for ip, what in ((endpoint_ip, "controlPlaneEndpoint"), (nfs_ip, "storage.nfs.server")):
        for net, key in ((cfg.pod_cidr, "podCidr"), (cfg.service_cidr, "serviceCidr")):
            if ip is not None and ip in net:
                problems.append((key, f"{net} contains {what} {ip}; pick a range that leaves it out"))
    problems += _cidr_size_checks(cfg)
    if cfg.gpu_nodes:
        problems.append(("gpuNodes", "is a dev key; lab GPU nodes come from hosts[].gpus"))
    return problems


def _ipv4_or_none(text: str) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        return None


def _endpoint(endpoint: str | None) -> tuple[str | None, ipaddress.IPv4Address | None]:
    """(what is wrong with controlPlaneEndpoint or None, its address when it is an IPv4 address)."""
    if not endpoint:
        return None, None
    m = re.fullmatch(r"([^:]+):([0-9]{1,5})", endpoint)
    if not m:
        return "must be 'host:port', e.g. 'k8s-api.lab.example:6443'", None
    try:
        _check_remote_host(m.group(1))
    except ValueError as exc:
        return f"host {m.group(1)!r}: {exc}", None
    if not 1 <= int(m.group(2)) <= 65535:
        return f"port {m.group(2)} is out of range: 1 to 65535 (kube-apiserver listens on 6443)", None
    return None, _ipv4_or_none(m.group(1))


def _cidr_size_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    problems = []
    pod, svc = cfg.pod_cidr, cfg.service_cidr
    if pod.overlaps(svc):
        problems.append(("podCidr", f"{pod} overlaps serviceCidr {svc}"))
    # kube-apiserver refuses an IPv4 service range with more than 20 host bits.
    if svc.prefixlen < 12:
        problems.append(("serviceCidr", f"{svc} is larger than kube-apiserver allows: use /12 to /28, e.g. 10.96.0.0/12"))
    # kubeadm puts the cluster DNS Service at the 10th address (the API Service takes the 1st).
    if svc.prefixlen > 28:
        problems.append(("serviceCidr", f"{svc} is too small: the cluster DNS Service takes its 10th address; "
                                        "use /12 to /28, e.g. 10.96.0.0/12"))
    # Each node gets a /24 of the pod range (kube-controller-manager's default node mask, which
    # flannel and calico follow here); its allocator takes at most 16 bits between the two.
    if pod.prefixlen > 24:
        problems.append(("podCidr", "must be /24 or larger (each node gets a /24 from it)"))
    elif pod.prefixlen < 8:
        problems.append(("podCidr", f"{pod} is larger than kube-controller-manager allows with /24 per node: "
                                    "use /8 to /24, e.g. 10.244.0.0/16"))
    elif 2 ** (24 - pod.prefixlen) < len(cfg.hosts):
        needed = 24 - (len(cfg.hosts) - 1).bit_length()
        problems.append(("podCidr", f"{pod} holds {2 ** (24 - pod.prefixlen)} node /24s but there are "
                                    f"{len(cfg.hosts)} hosts; use a /{needed} or larger"))
    return problems


def parse(raw: dict[str, Any], secret_keys: set[str] | frozenset[str] = frozenset()) -> StackConfig:
    """Validate raw config (keys without the namespace, objects already decoded).

    `secret_keys` names the secret keys that are set; their values never reach this function.
    """
    problems: list[tuple[str, str]] = []
    for key in SECRET_KEYS:
        if key in raw:
            problems.append((key, "must be set as a secret (`pulumi config set --secret ...`)"))
    plain = {k: v for k, v in raw.items() if k not in SECRET_KEYS}
    try:
        cfg = StackConfig.model_validate(plain)
    except ValidationError as exc:
        for err in exc.errors():
            problems.append((_key_path(err["loc"]), _describe(err)))
        raise ConfigError(problems) from None
    problems += _cross_checks(cfg, set(secret_keys), frozenset(k for k in SECRET_KEYS if k in raw))
    if problems:
        raise ConfigError(problems)
    return cfg


# Keys whose values are structured: Pulumi hands them over as JSON text. Every other value is
# a string (pydantic reads "22" or "true" as the declared int or bool), so a version such as
# "1.34" never turns into a float.
_STRUCTURED_KEYS = ("hosts", "nvidiaDriver", "bastion", "gpuNodes", "gpu", "training", "acceptance", "network", "storage", "monitoring", "gke")


def _decode(key: str, value: Any) -> Any:
    if key not in _STRUCTURED_KEYS or not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def load(config: pulumi.Config | None = None) -> tuple[StackConfig, StackSecrets]:
    """Read the `gpu-cluster:` namespace of the running stack, validate it, return model + secrets."""
    from pulumi.runtime import config as runtime_config

    config = config or pulumi.Config(NAMESPACE)
    prefix = f"{NAMESPACE}:"
    # The engine hands config over either through set_all_config (language host, mocks) or the
    # PULUMI_CONFIG environment variable (older hosts); read both.
    everything = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret_names = set(runtime_config.get_config_secret_keys_env())
    raw: dict[str, Any] = {}
    secret_keys: set[str] = set()
    for full_key, value in everything.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix):]
        if key in SECRET_KEYS:
            if runtime_config.is_config_secret(full_key) or full_key in secret_names:
                secret_keys.add(key)
            else:
                raw[key] = "<plaintext>"  # reported by parse(); the value itself is never echoed
            continue
        raw[key] = _decode(key, value)
    cfg = parse(raw, secret_keys)
    secrets = StackSecrets(
        ssh_private_key=config.get_secret("sshPrivateKey") if "sshPrivateKey" in secret_keys else None,
        kubeconfig=config.get_secret("kubeconfig") if "kubeconfig" in secret_keys else None,
    )
    return cfg, secrets
