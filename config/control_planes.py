"""How many control planes a lab stack runs, the one address the API is reached at, and which
changes of the control planes etcd survives.

Every control plane runs a member of the cluster's etcd (kubeadm's stacked etcd). etcd commits a
write once a majority of its members (the quorum, n // 2 + 1) agrees, so n members survive the loss
of (n - 1) // 2: 1 and 2 members survive none, 3 and 4 survive one, 5 survive two. An even count
adds a member to fail and to wait for without surviving more, which is why etcd's FAQ ("Why an odd
number of cluster members?") recommends odd sizes; past 5 each write waits on more members for a
rare gain. So `hosts` may name 1, 3 or 5 control planes.

With more than one, every node and the admin kubeconfig need one address that reaches whichever API
server is up: either
  - kubeVip: a virtual IP that kube-vip, a static pod on every control plane, holds on the elected
    leader and announces with gratuitous ARP (components/lab/kube_vip.py). ARP reaches one layer-2
    segment only, so the VIP must sit in the control planes' own subnet; `kubeVip.subnet`, when
    given, lets the config check that. kubeVip also works with one control plane, and is the way to
    start one that may grow: the endpoint is fixed at `kubeadm init` (changing it rebuilds the cluster).
  - controlPlaneEndpoint: host:port of a load balancer the user runs in front of port 6443.
Exactly one of the two with more than one control plane.

Membership changes (LabStack.change_problems, before anything is registered): etcd's runtime
reconfiguration guide says to change membership one member at a time and that a member can be
removed only while the cluster has quorum. The program removes members one after another (on the
first control plane, before the removed hosts are reset: host_steps/cluster/drain_removed_nodes.sh)
and joins new ones one after another (stacks/lab.py), so each step is a single-member change.
Whether a removal can commit is etcd's to judge, and it does: with --strict-reconfig-check (on by
default, and kubeadm leaves it on) a member refuses a removal after which the members it sees
started would not be a quorum of those left, so the drain step fails and the `up` stops with the
cluster as it was (tests/components/lab/test_gone_hosts_real.py runs that against real etcd). A
dead control plane is marked `hosts[].gone` first (components/lab/gone_hosts.py), which removes its
member on its own; then removing live ones, even 3 -> 1 in one `up` (2 is no allowed count), always
commits: each removal leaves only started members. Until issue 34 the config refused removing more
than (n - 1) // 2 at once, assuming the removed hosts dead, which left 3 -> 1 no path at all. Any
control plane may leave, the first too, as long as one deployed control plane stays (else a new
cluster: allowRebuild, the rule in config/lab.py).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from config.address_plan import Address, Range
from config.errors import Problems
from config.fields import Model, check_remote_host, ipv4_or_none, unusable_address

if TYPE_CHECKING:
    from config.lab_hosts import Host

CONTROL_PLANE_COUNTS = (1, 3, 5)
API_SERVER_PORT = 6443  # kube-apiserver's bind port (kubeadm's default), the VIP's too
_LINUX_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # IFNAMSIZ 16 with the NUL


class KubeVip(Model):
    """A virtual IP for the API server, served by kube-vip on every control plane (ARP mode)."""

    address: ipaddress.IPv4Address = Field(
        description="The virtual IP (a free address in the control planes' subnet, no host's); the API is "
                    "reached at <address>:6443.")
    interface: str = Field(
        description="The control planes' network interface that carries it, the same name on each, e.g. 'ens18'.")
    subnet: ipaddress.IPv4Network | None = Field(
        default=None,
        description="The control planes' subnet, e.g. '192.0.2.0/24' (optional): when set, the VIP and every "
                    "control plane must be inside it (ARP reaches one layer-2 segment).")

    @field_validator("address")
    @classmethod
    def _address(cls, v: ipaddress.IPv4Address) -> ipaddress.IPv4Address:
        if problem := unusable_address(v):
            raise ValueError(problem)
        return v

    @field_validator("interface")
    @classmethod
    def _interface(cls, v: str) -> str:
        if not _LINUX_IFNAME.fullmatch(v) or v in (".", "..", "lo"):
            raise ValueError("must be the Linux interface name of the control planes' network: 1-15 characters "
                             "of A-Z a-z 0-9 _ . - (not lo)")
        return v

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{API_SERVER_PORT}"


def failures_survived(members: int) -> int:
    """How many of `members` etcd members (one per control plane) may fail while a quorum
    (members // 2 + 1) stays up to commit writes, and the API servers with it: (members - 1) // 2."""
    return (members - 1) // 2


def count_problems(control_planes: Sequence[Host], kube_vip: KubeVip | None, endpoint: str | None) -> Problems:
    """1, 3 or 5 control planes; with more than one, exactly one of kubeVip and controlPlaneEndpoint."""
    n = len(control_planes)
    problems: Problems = []
    if n and n not in CONTROL_PLANE_COUNTS:
        problems.append(("hosts", f"{n} hosts have role control-plane; use 1, 3 or 5: each runs an etcd member, "
                                  f"and {n} members survive no more failures than {n - 1} (a quorum of "
                                  f"{n // 2 + 1} must stay up) while adding one more to fail"))
    if kube_vip is not None and endpoint:
        problems.append(("kubeVip", "choose one API endpoint: kubeVip (a virtual IP kube-vip serves on the control "
                                    "planes) or controlPlaneEndpoint (your own load balancer), not both"))
    elif n > 1 and kube_vip is None and not endpoint:
        problems.append(("controlPlaneEndpoint", f"{n} control planes need one API endpoint: set gpu-cluster:kubeVip "
                                                 "{address, interface} (a virtual IP on the control planes) or "
                                                 "controlPlaneEndpoint 'host:port' (your own load balancer)"))
    return problems


def vip_problems(kube_vip: KubeVip | None, hosts: Sequence[Host], nfs_server: str | None = None) -> Problems:
    """The VIP is no host's address nor the NFS server's (one address, one job: kube-vip answers ARP
    for it on the leader, so traffic meant for the other would reach the API server's leader) and,
    with kubeVip.subnet, shares the control planes' subnet. Inside a range it is refused by the
    address plan (vip_address_plan)."""
    if kube_vip is None:
        return []
    problems: Problems = []
    for i, h in enumerate(hosts):
        if h.address == kube_vip.address:
            problems.append(("kubeVip.address", f"{kube_vip.address} is hosts[{i}].address ({h.name}): the VIP must "
                                                "be a free address, which kube-vip moves between the control planes"))
    if nfs_server and ipv4_or_none(nfs_server) == kube_vip.address:
        problems.append(("kubeVip.address", f"{kube_vip.address} is storage.nfs.server: kube-vip would claim the NFS "
                                            "server's address for the API server's leader (ARP), and the nodes' "
                                            "mounts would reach it instead of the server; the VIP must be a free "
                                            "address of its own"))
    subnet = kube_vip.subnet
    if subnet is None:
        return problems
    if kube_vip.address not in subnet or kube_vip.address in (subnet.network_address, subnet.broadcast_address):
        problems.append(("kubeVip.address", f"{kube_vip.address} is not a host address of kubeVip.subnet {subnet}: "
                                            "kube-vip announces it with ARP, which reaches only that segment"))
    for i, h in enumerate(hosts):
        if h.role.value == "control-plane" and h.address not in subnet:
            problems.append((f"hosts[{i}].address", f"control plane {h.name} {h.address} is outside kubeVip.subnet "
                                                    f"{subnet}: the VIP can move only between hosts of one segment"))
    return problems


def vip_address_plan(kube_vip: KubeVip | None) -> tuple[list[Range], list[Address]]:
    """What kubeVip adds to the address plan (config/address_plan.py): the VIP as an address no
    cluster range may hold, and the control planes' subnet as a node network no range may overlap."""
    if kube_vip is None:
        return [], []
    ranges = [Range("kubeVip.subnet", kube_vip.subnet, holds_hosts=True)] if kube_vip.subnet else []
    return ranges, [Address("kubeVip.address", kube_vip.address)]


def endpoint_address(endpoint: str | None) -> tuple[str | None, ipaddress.IPv4Address | None]:
    """controlPlaneEndpoint: (what is wrong with it or None, its address when it is an IPv4 address)."""
    if not endpoint:
        return None, None
    m = re.fullmatch(r"([^:]+):([0-9]{1,5})", endpoint)
    if not m:
        return "must be 'host:port', e.g. 'k8s-api.lab.example:6443'", None
    try:
        check_remote_host(m.group(1))
    except ValueError as exc:
        return f"host {m.group(1)!r}: {exc}", None
    if not 1 <= int(m.group(2)) <= 65535:
        return f"port {m.group(2)} is out of range: 1 to 65535 (kube-apiserver listens on 6443)", None
    return None, ipv4_or_none(m.group(1))


def endpoint_host_problems(endpoint: str | None, hosts: Sequence[Host]) -> Problems:
    """With more than one control plane, controlPlaneEndpoint must not be one host's own address: the
    nodes and the admin kubeconfig would reach every API server through that one machine and lose
    the API with it (high availability silently lost). A DNS name is not resolved here."""
    control_planes = [h for h in hosts if h.role.value == "control-plane"]
    ip = endpoint_address(endpoint)[1]
    if len(control_planes) < 2 or ip is None:
        return []
    for i, h in enumerate(hosts):
        if h.address == ip:
            return [("controlPlaneEndpoint",
                     f"{endpoint} is hosts[{i}].address ({h.name}, a {h.role.value}): with {len(control_planes)} "
                     f"control planes every node and the admin kubeconfig would reach the API only through "
                     f"{h.name} and lose it when {h.name} is down, so high availability would be lost; use "
                     "kubeVip {address, interface} (a virtual IP kube-vip moves between the control planes) or "
                     "the address of a load balancer in front of every control plane's port 6443")]
    return []


def members_of(record: str) -> list[str]:
    """The control planes of a `deployed` record ("name address, name address"), in order."""
    return [m.strip() for m in record.split(",") if m.strip()]
