"""Would this connection pass the NetworkPolicies? Kubernetes' semantics, evaluated offline.

`allowed(policies, src, dst, port, protocol)` answers for one connection between two endpoints
(a pod, or something that is not a pod: a node, the API server, an address on the internet), as
a CNI that enforces NetworkPolicy must (kubernetes.io, concepts/services-networking/network-
policies, and the upstream e2e truth tables, test/e2e/network/netpol; tests/render/
test_network_policy_semantics.py holds this module to both):

- a policy applies to the pods its `podSelector` selects in its own namespace; a pod selected by
  no policy of a direction (policyTypes; without it Ingress always, Egress when the policy has
  egress rules) is not isolated in that direction and allows everything;
- an isolated pod allows what the union of its policies' rules allows: a rule matches when one of
  its peers (`from`/`to`; none: every peer) and one of its ports (none: every port) match;
- a peer's `namespaceSelector` and `podSelector` in one entry both hold (AND); a `podSelector`
  alone means the policy's namespace; selectors match pods only, so a node or the API server is
  reached through an `ipBlock` (its `cidr` minus each `except`) alone;
- a port is a number, a range (`endPort`) or a name, which is looked up in the destination pod's
  container ports (for ingress and egress alike); `protocol` defaults to TCP;
- a connection passes when the source's egress and the destination's ingress both allow it;
  replies of an allowed connection pass (policies are about connections, not packets);
- the docs' two exceptions: a pod cannot block access to itself, and traffic between a pod and
  the node it runs on is always allowed.

Addresses are as the policy sees them: a Service's address is rewritten to a backend pod's before
the policy is asked (what calico and Dataplane V2 do), so callers pass the pod. Whether an
`ipBlock` also matches pod addresses is left to each plugin by the docs ("should be
cluster-external IPs"); here it matches any endpoint's address, as calico does.

Does not model: SCTP-specific behaviour, AdminNetworkPolicy, calico's own policy kinds, hostNetwork
pods (pass them as the node they run on).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


@dataclass(frozen=True)
class Endpoint:
    """One end of a connection. A pod has a namespace; anything else (a node, the API server, the
    internet) has none, and NetworkPolicy sees only its address."""

    name: str
    ip: str
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    # Named container ports of a pod: name -> (port, protocol).
    ports: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    node: str | None = None  # the node a pod runs on; for a node, its own name

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None

    def all_namespace_labels(self) -> dict[str, str]:
        return {**self.namespace_labels, **({NAMESPACE_NAME_LABEL: self.namespace} if self.namespace else {})}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    egress: str  # why the source's side allows or denies it
    ingress: str  # why the destination's side does

    def __bool__(self) -> bool:
        return self.allowed

    def __str__(self) -> str:
        return f"{'allowed' if self.allowed else 'denied'} (egress: {self.egress}; ingress: {self.ingress})"


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions all hold; an empty one matches
    everything. (None is "not set": the caller decides what that means.)"""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"label selector operator {op!r} is not one of In, NotIn, Exists, DoesNotExist")
    return True


def policy_types(spec: Mapping[str, Any]) -> set[str]:
    """spec.policyTypes, or the API's default: Ingress always, Egress with egress rules."""
    if spec.get("policyTypes"):
        return set(spec["policyTypes"])
    return {"Ingress", *(["Egress"] if spec.get("egress") else [])}


def _peer_matches(peer: Mapping[str, Any], policy_namespace: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.ip)
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])
    if not other.is_pod:  # selectors select pods only
        return False
    namespace_selector, pod_selector = peer.get("namespaceSelector"), peer.get("podSelector")
    if namespace_selector is None and pod_selector is None:
        raise ValueError("a NetworkPolicyPeer needs podSelector, namespaceSelector or ipBlock")
    if namespace_selector is None:
        in_namespace = other.namespace == policy_namespace
    else:
        in_namespace = selector_matches(namespace_selector, other.all_namespace_labels())
    return in_namespace and (pod_selector is None or selector_matches(pod_selector, other.labels))


def _port_matches(entry: Mapping[str, Any], port: int, protocol: str, destination: Endpoint) -> bool:
    if entry.get("protocol", "TCP") != protocol:
        return False
    wanted = entry.get("port")
    if wanted is None:  # every port of the protocol
        return True
    end = entry.get("endPort")
    if isinstance(wanted, str) and not wanted.isdigit():
        if end is not None:
            raise ValueError(f"endPort needs a numeric port, not the named port {wanted!r}")
        named = destination.ports.get(wanted)  # the destination pod's port of that name
        return named is not None and named == (port, protocol)
    low = int(wanted)
    if end is not None and end < low:
        raise ValueError(f"endPort {end} is below port {low}")
    return low <= port <= (end if end is not None else low)


def _rule_matches(rule: Mapping[str, Any], peers_key: str, policy_namespace: str, other: Endpoint,
                  port: int, protocol: str, destination: Endpoint) -> bool:
    peers = rule.get(peers_key) or []
    ports = rule.get("ports") or []
    return ((not peers or any(_peer_matches(p, policy_namespace, other) for p in peers))
            and (not ports or any(_port_matches(p, port, protocol, destination) for p in ports)))


def _side(policies: Sequence[Mapping[str, Any]], pod: Endpoint, other: Endpoint, direction: str,
          port: int, protocol: str, destination: Endpoint) -> tuple[bool, str]:
    """One pod's side of a connection: (allowed, why)."""
    if not pod.is_pod:
        return True, f"{pod.name} is not a pod"
    isolating = [p for p in policies
                 if p["metadata"].get("namespace") == pod.namespace
                 and direction in policy_types(p.get("spec") or {})
                 and selector_matches((p.get("spec") or {}).get("podSelector"), pod.labels)]
    if not isolating:
        return True, f"no policy isolates {pod.name} for {direction}"
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for p in isolating:
        spec, namespace = p.get("spec") or {}, p["metadata"]["namespace"]
        for rule in spec.get(rules_key) or []:
            if _rule_matches(rule, peers_key, namespace, other, port, protocol, destination):
                return True, f"{namespace}/{p['metadata']['name']} allows it"
    names = ", ".join(sorted(p["metadata"]["name"] for p in isolating))
    return False, f"{pod.name} is isolated by {names} and no rule allows it"


def allowed(policies: Iterable[Mapping[str, Any]], src: Endpoint, dst: Endpoint, port: int,
            protocol: str = "TCP") -> Verdict:
    """Whether a connection from `src` to `dst`'s `port`/`protocol` passes `policies` (every
    NetworkPolicy of the cluster; other kinds are ignored)."""
    nps = [p for p in policies if p.get("kind") == "NetworkPolicy"]
    if src == dst:
        return Verdict(True, "a pod cannot block access to itself", "a pod cannot block access to itself")
    local = "traffic between a pod and its node is always allowed"
    if (not src.is_pod and dst.is_pod and src.node is not None and src.node == dst.node) or \
            (src.is_pod and not dst.is_pod and dst.node is not None and src.node == dst.node):
        return Verdict(True, local, local)
    egress_ok, egress_why = _side(nps, src, dst, "Egress", port, protocol, dst)
    ingress_ok, ingress_why = _side(nps, dst, src, "Ingress", port, protocol, dst)
    return Verdict(egress_ok and ingress_ok, egress_why, ingress_why)
