"""The address plan of a stack: every range and address the cluster uses, each with the config key that
names it, checked against each other before anything is registered.

A range is handed out, one address at a time, by someone: kube-controller-manager and the CNI (pods),
kube-apiserver (Services), whereabouts (network.roce.range: the pods' RDMA interface), minikube's
docker network (dev's nodes). Two ranges that overlap hand the same address to two things; a
range that contains a machine's address (a host, the API endpoint or kubeVip's virtual IP, the NFS
server) routes that address into the cluster, where nothing answers it. One rule covers every pair:
ranges must not overlap, and an address must lie outside every range but the node network (where
the nodes and the machines beside them, such as the docker host serving NFS on minikube, or
kubeVip.subnet, live).

Only IPv4 literals are checked: a DNS name (an NFS server, an endpoint) resolves where it is used.
The bastion is left out: only the machine running Pulumi reaches it, never a node or a pod.

The sizes kube-apiserver and kube-controller-manager take for a service and pod range are here too,
so that lab and dev judge a range by the same rules.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from config.errors import Problems


@dataclass(frozen=True)
class Range:
    """A range the cluster hands addresses out of."""

    key: str  # the config key that sets it ("podCidr", "network.roce.range")
    net: ipaddress.IPv4Network
    # Whether machines' own addresses belong in it (the node network), or only what it hands out.
    holds_hosts: bool = False
    # Why an address inside it is wrong (added to the message).
    why: str = "pick a range no host, endpoint or server address is in"


@dataclass(frozen=True)
class Address:
    """A machine the cluster reaches at a fixed address."""

    key: str  # "hosts[1].address", "controlPlaneEndpoint", "kubeVip.address", "storage.nfs.server"
    ip: ipaddress.IPv4Address


def overlap_problems(ranges: Iterable[Range], addresses: Iterable[Address]) -> Problems:
    """Every pair that collides: two overlapping ranges (reported under the later one, naming the
    earlier: list the ranges in the order a user is likelier to change the later), and an address
    inside a range that is not the node network (reported under the range, naming the address)."""
    ranges, addresses = list(ranges), list(addresses)
    problems: Problems = []
    for i, later in enumerate(ranges):
        for earlier in ranges[:i]:
            if later.net.overlaps(earlier.net):
                problems.append((later.key, f"{later.net} overlaps {earlier.key} {earlier.net}: both would hand "
                                            "out the same addresses"))
    for rng in ranges:
        if rng.holds_hosts:
            continue
        for addr in addresses:
            if addr.ip in rng.net:
                problems.append((rng.key, f"{rng.net} contains {addr.key} {addr.ip}; {rng.why}"))
    return problems


def ipv4_address(key: str, text: str | None) -> list[Address]:
    """[Address] when `text` is an IPv4 literal, else [] (a DNS name or unset)."""
    if not text:
        return []
    try:
        return [Address(key, ipaddress.IPv4Address(text))]
    except ValueError:
        return []


def service_range_problems(key: str, svc: ipaddress.IPv4Network) -> Problems:
    """A service range kube-apiserver and kubeadm take."""
    # kube-apiserver refuses an IPv4 service range with more than 20 host bits.
    if svc.prefixlen < 12:
        return [(key, f"{svc} is larger than kube-apiserver allows: use /12 to /28, e.g. 10.96.0.0/12")]
    # kubeadm puts the cluster DNS Service at the 10th address (the API Service takes the 1st).
    if svc.prefixlen > 28:
        return [(key, f"{svc} is too small: the cluster DNS Service takes its 10th address; "
                      "use /12 to /28, e.g. 10.96.0.0/12")]
    return []


def pod_range_problems(key: str, pod: ipaddress.IPv4Network, nodes: int) -> Problems:
    """A pod range for `nodes` nodes: each gets a /24 of it (kube-controller-manager's default node
    mask, which flannel and calico follow here); its allocator takes at most 16 bits between the two."""
    if pod.prefixlen > 24:
        return [(key, "must be /24 or larger (each node gets a /24 from it)")]
    if pod.prefixlen < 8:
        return [(key, f"{pod} is larger than kube-controller-manager allows with /24 per node: "
                      "use /8 to /24, e.g. 10.244.0.0/16")]
    if 2 ** (24 - pod.prefixlen) < nodes:
        needed = 24 - (nodes - 1).bit_length()
        return [(key, f"{pod} holds {2 ** (24 - pod.prefixlen)} node /24s but there are {nodes} hosts; "
                      f"use a /{needed} or larger")]
    return []
