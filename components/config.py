"""The one config model of gpu-cluster: every key, its type, default and meaning.

Stack files (Pulumi.<stack>.yaml) are parsed once, here, into a validated `StackConfig`;
components receive that model (or a piece of it), never raw `pulumi.Config`. A user error is a
`ConfigError` naming every bad key as `gpu-cluster:<path>` and what is allowed; it is raised before
any resource is registered and Pulumi prints it without a traceback (it is a `pulumi.RunError`).

Secret values (the SSH private key, a dev kubeconfig) are never part of the model: they stay
`pulumi.Output` secrets in `StackSecrets`, and the model only records that they were given.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any

import pulumi
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from components import versions

NAMESPACE = "gpu-cluster"

# Top-level keys holding secrets: read with get_secret, never parsed into the model.
SECRET_KEYS = ("sshPrivateKey", "kubeconfig")


class ConfigError(pulumi.RunError):
    """A stack config error: one line per bad key, each naming the key."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        lines = [f"{NAMESPACE}:{key}: {message}" for key, message in problems]
        super().__init__("invalid stack configuration:\n  " + "\n  ".join(lines))


class Platform(enum.StrEnum):
    LAB = "lab"  # own servers over SSH, kubeadm
    DEV = "dev"  # an existing cluster (minikube --gpus all, kind, ...)


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
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# "<type> <base64>" as in ssh-keyscan output / known_hosts, without the host column.
_HOST_KEY = re.compile(
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521) "
    r"[A-Za-z0-9+/]{40,}={0,3}$"
)
_APT_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+~:-]*$")


def _check_host_key(value: str) -> str:
    if not _HOST_KEY.match(value.strip()):
        raise ValueError(
            "must be a public host key '<type> <base64>' as printed by "
            "`ssh-keyscan -t ed25519 <host>` (without the host column); "
            "types: ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256/384/521"
        )
    return value.strip()


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
        if not _DNS_LABEL.match(v):
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
        if v is not None and not _APT_VERSION.match(v):
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
_MIG_PROFILE = re.compile(r"^all-(disabled|balanced|\d+g\.\d+gb)$")


class GpuSharing(_Model):
    """How one physical GPU is offered to pods."""

    mode: SharingMode = Field(default=SharingMode.NONE, description="none, time-slicing or mig.")
    replicas: int = Field(default=1, description="time-slicing: pods sharing each GPU (2-48).")
    mig_strategy: MigStrategy = Field(default=MigStrategy.SINGLE, description="mig: single or mixed.")
    mig_profile: str = Field(default="all-disabled", description="mig: MIG manager profile, e.g. all-1g.10gb.")

    @field_validator("mig_profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        if not _MIG_PROFILE.match(v):
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
    # dev
    kube_context: str | None = Field(
        default=None, description="dev: context of the local kubeconfig (when no kubeconfig secret)."
    )
    gpu_nodes: tuple[str, ...] = Field(
        default=(), description="dev: names of existing nodes with GPUs, labelled for GPU workloads."
    )

    _optional = field_validator("control_plane_endpoint", "bastion", "kube_context", mode="before")(
        classmethod(lambda cls, v: _empty_to_none(v))
    )

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
        if not _APT_VERSION.match(v):
            raise ValueError("must be a Debian package version such as '1.7.27-1'")
        return v

    @property
    def gpu_node_count(self) -> int:
        """Nodes with GPUs, as far as the config knows (lab: hosts with gpus > 0; dev: gpuNodes)."""
        if self.platform is Platform.DEV:
            return len(self.gpu_nodes)
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


def _describe(err: dict[str, Any]) -> str:
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
    if sharing.mode is SharingMode.MIG:
        if cfg.gpu.stack is not GpuStack.OPERATOR:
            problems.append(
                ("gpu.sharing.mode", "mig needs gpu.stack operator (its MIG manager partitions the GPUs)")
            )
        if sharing.mig_strategy is MigStrategy.MIXED and sharing.mig_profile == "all-balanced" and cfg.gpu.gate.enabled:
            problems.append(
                ("gpu.sharing.migProfile", "the GPU-ready gate needs one MIG slice type under mixed; use all-<N>g.<M>gb")
            )
        if sharing.mig_profile == "all-disabled":
            problems.append(("gpu.sharing.migProfile", "mig needs a profile such as all-1g.10gb or all-balanced"))
    return problems


def _cross_checks(
    cfg: StackConfig, secret_keys: set[str], plaintext_secrets: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = _gpu_checks(cfg)
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
    if cfg.control_plane_endpoint and not re.fullmatch(
        r"[A-Za-z0-9.-]+:\d{1,5}", cfg.control_plane_endpoint
    ):
        problems.append(("controlPlaneEndpoint", "must be 'host:port', e.g. 'k8s-api.lab.example:6443'"))
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
    if cfg.pod_cidr.overlaps(cfg.service_cidr):
        problems.append(("podCidr", f"{cfg.pod_cidr} overlaps serviceCidr {cfg.service_cidr}"))
    if cfg.pod_cidr.prefixlen > 24:
        problems.append(("podCidr", "must be /24 or larger (each node gets a /24 from it)"))
    if cfg.gpu_nodes:
        problems.append(("gpuNodes", "is a dev key; lab GPU nodes come from hosts[].gpus"))
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
_STRUCTURED_KEYS = ("hosts", "nvidiaDriver", "bastion", "gpuNodes", "gpu")


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
