"""lab: one server of the lab stack (`hosts[]`) and the checks of the host list as a whole.

`rack` (optional) names the rack a GPU host stands in: node prep's NodePatch writes it as the node
label RACK_LABEL (components/scheduling_contract.py), Kueue's Topology uses it as a level, and jobs
over RDMA ask Kueue for all their pods in one rack (docs/queues.md). Either every GPU host names its
rack or none does: Kueue's topology-aware scheduling leaves a node without the level's label out.
"""

from __future__ import annotations

import enum
import ipaddress

from pydantic import Field, field_validator

from config.errors import Problems
from config.fields import DNS_LABEL, Model, check_host_key, check_posix_user, unusable_address
from config.gpu_inventory import check_gpu_count


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

    @field_validator("name", "rack")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and not DNS_LABEL.fullmatch(v):
            raise ValueError("must be a lowercase RFC 1123 label (a-z, 0-9, '-', at most 63 characters)")
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
    """Names and addresses unique; racks named on every GPU host or on none."""
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
    with_rack = [i for i, h in gpu_hosts if h.rack]
    if with_rack and len(with_rack) < len(gpu_hosts):
        missing = [i for i, h in gpu_hosts if not h.rack]
        problems += [(f"hosts[{i}].rack", f"hosts[{with_rack[0]}] names its rack: every GPU host must name one "
                                          "(Kueue's topology leaves a node without the label out)") for i in missing]
    return problems
