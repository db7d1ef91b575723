"""lab: one server of the lab stack (`hosts[]`) and the checks of the host list as a whole.

`rack` (optional) names the rack a GPU host stands in: node prep's NodePatch writes it as the node
label RACK_LABEL (config/scheduling_contract.py), Kueue's Topology uses it as a level, and jobs
over RDMA ask Kueue for all their pods in one rack (docs/queues.md). Either every GPU host names its
rack or none does: Kueue's topology-aware scheduling leaves a node without the level's label out.
`block` (optional, the same rule) is the level above: a block holds racks, each rack in one block.

`gpuModel` (optional, every GPU host or none) is the GPU as GPU Feature Discovery names it in
nvidia.com/gpu.product (NVML's name, spaces as '-': NVIDIA-H100-80GB-HBM3). The same NodePatch
writes it as GPU_MODEL_LABEL, and with queues each model is one Kueue ResourceFlavor
(config/queue_flavors.py says why a label of our own and not GFD's).
"""

from __future__ import annotations

import enum
import ipaddress
import re

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import DNS_LABEL, Model, check_host_key, check_posix_user, unusable_address
from config.gpu_inventory import check_gpu_count
from config.inventory import flavor_name

# A label value (Kubernetes: at most 63 characters, alphanumerics at both ends, '-', '_', '.' between).
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


class Role(enum.StrEnum):
    CONTROL_PLANE = "control-plane"
    WORKER = "worker"


class Host(Model):
    """One server of the lab stack."""

    name: str = Field(description="Kubernetes node name (RFC 1123 label).")
    address: ipaddress.IPv4Address = Field(description="IPv4 address used for SSH and as the node IP (unique, unicast).")
    role: Role = Field(description="control-plane or worker.")
    gpus: int = Field(
        default=0,
        description="NVIDIA GPUs in the host (0-16; 0: a CPU node); more than 0 installs the driver and toolkit, "
                    "labels and taints the node.",
    )
    ssh_user: str = Field(default="ubuntu", description="SSH user with passwordless sudo.")
    ssh_port: int = Field(default=22, ge=1, le=65535, description="SSH port.")
    host_key: str = Field(description="Pinned SSH host key ('ssh-ed25519 AAAA...').")
    rack: str | None = Field(default=None, description="The rack the host stands in (an RFC 1123 label), written "
                             "as a node label; with queues, jobs over RDMA are admitted into one rack. Every GPU "
                             "host names one, or none.")
    block: str | None = Field(default=None, description="The block (a group of racks on one network fabric) the "
                              "host stands in (an RFC 1123 label), written as a node label and a Kueue topology "
                              "level above the rack. Every GPU host names one, or none; a rack is in one block.")
    gpu_model: str | None = Field(default=None, description="The host's GPU model as GPU Feature Discovery writes "
                                  "it in nvidia.com/gpu.product for an unshared GPU (e.g. NVIDIA-H100-80GB-HBM3); "
                                  "with queues, one ResourceFlavor per model. Every GPU host names one, or none.")
    gone: bool = Field(default=False, description="The host is dead and will not come back: `pulumi up` removes its "
                       "etcd member and Node from a healthy control plane and never connects to it; delete the "
                       "entry at the next `up` (docs/runbook.md#a-control-plane-died).")

    @field_validator("name", "rack", "block")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and not DNS_LABEL.fullmatch(v):
            raise ValueError("must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63 characters)")
        return v

    @field_validator("gpu_model")
    @classmethod
    def _gpu_model(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not _LABEL_VALUE.fullmatch(v):
            raise ValueError("must be the GPU's name as nvidia.com/gpu.product spells it: a label value (letters, "
                             "digits, '-', '_', '.', at most 63 characters; NVML's spaces as '-'), e.g. "
                             "NVIDIA-H100-80GB-HBM3")
        if v.endswith("-SHARED") or "-MIG-" in v:
            raise ValueError("names a shared or MIG device (GFD adds -SHARED or -MIG-<profile> under "
                             "gpu.sharing): give the GPU's own name, e.g. NVIDIA-A100-SXM4-80GB")
        return v

    _gpus = field_validator("gpus")(classmethod(lambda cls, v: check_gpu_count(v)))

    _host_key = field_validator("host_key")(classmethod(lambda cls, v: check_host_key(v)))
    _ssh_user = field_validator("ssh_user")(classmethod(lambda cls, v: check_posix_user(v)))

    @field_validator("address")
    @classmethod
    def _address(cls, v: ipaddress.IPv4Address) -> ipaddress.IPv4Address:
        problem = unusable_address(v)
        if problem:
            raise ValueError(problem)
        return v

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0


def host_list_problems(hosts: tuple[Host, ...] | list[Host]) -> Problems:
    """Names and addresses unique; racks, blocks and GPU models named on every GPU host or on none;
    each rack in one block; a GPU model only on a GPU host."""
    problems: Problems = []
    seen_names: dict[str, int] = {}
    seen_addrs: dict[str, int] = {}
    for i, host in enumerate(hosts):
        if host.name in seen_names:
            problems.append((f"hosts[{i}].name", f"duplicates hosts[{seen_names[host.name]}].name {host.name!r}"))
        seen_names.setdefault(host.name, i)
        addr = str(host.address)
        if addr in seen_addrs:
            problems.append((f"hosts[{i}].address", f"duplicates hosts[{seen_addrs[addr]}].address {addr}"))
        seen_addrs.setdefault(addr, i)
    gpu_hosts = [(i, h) for i, h in enumerate(hosts) if h.is_gpu]
    for field, key in (("rack", "rack"), ("block", "block"), ("gpu_model", "gpuModel")):
        named = [i for i, h in gpu_hosts if getattr(h, field)]
        if named and len(named) < len(gpu_hosts):
            why = ("every GPU host must name one (Kueue's topology leaves a node without the label out)"
                   if field != "gpu_model" else "every GPU host must name one (a host without one would be in no "
                                                "GPU flavor)")
            problems += [(f"hosts[{i}].{key}", f"hosts[{named[0]}] names its {key}: {why}")
                         for i, h in gpu_hosts if not getattr(h, field)]
    problems += [(f"hosts[{i}].gpuModel", "is set on a host without GPUs (gpus 0)")
                 for i, h in enumerate(hosts) if h.gpu_model and not h.is_gpu]
    flavor_of: dict[str, tuple[str, int]] = {}
    for i, h in gpu_hosts:
        if h.gpu_model:
            model, first = flavor_of.setdefault(flavor_name(h.gpu_model), (h.gpu_model, i))
            if model != h.gpu_model:
                problems.append((f"hosts[{i}].gpuModel", f"{h.gpu_model!r} and hosts[{first}].gpuModel {model!r} "
                                                         "differ only in case or punctuation: name one model once"))
    block_of: dict[str, tuple[str, int]] = {}
    for i, h in gpu_hosts:
        if h.rack and h.block:
            block, first = block_of.setdefault(h.rack, (h.block, i))
            if block != h.block:
                problems.append((f"hosts[{i}].block", f"rack {h.rack!r} is in block {block!r} (hosts[{first}]): "
                                                      "every rack is in exactly one block"))
    return problems


def gone_problems(hosts: tuple[Host, ...] | list[Host]) -> Problems:
    """hosts[].gone: the control planes not gone must hold etcd's quorum, n // 2 + 1 of the n
    members, or no removal can commit (config/control_planes.py); the first of them becomes the
    program's entry point (LabStack.entry_point), whichever it is."""
    planes = [(i, h) for i, h in enumerate(hosts) if h.role is Role.CONTROL_PLANE]
    gone = [(i, h) for i, h in planes if h.gone]
    left = len(planes) - len(gone)
    if not gone or left >= len(planes) // 2 + 1:
        return []
    return [(f"hosts[{i}].gone", f"{len(gone)} of {len(planes)} control planes gone leaves {left}, fewer than etcd's "
                                 f"quorum of {len(planes) // 2 + 1}: no member removal can commit; restore from an "
                                 "etcd snapshot (docs/operations/etcd-backup.md)")
            for i, _ in gone]
