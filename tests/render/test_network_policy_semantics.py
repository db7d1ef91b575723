"""render/cluster/network_policy.py against the world: the examples and stated outcomes of the
Kubernetes docs (kubernetes/website content/en/docs/concepts/services-networking/
network-policies.md) and the upstream e2e truth tables (kubernetes/kubernetes
test/e2e/network/netpol/network_policy.go: namespaces x, y, z with pods a, b, c labelled pod=<name>,
every pod probing every other; "Set the nsX as false, since it has a policy that blocks traffic").

Each e2e case below is named after its `f.It(...)` and builds the same policy and the same
expected table (NewReachability(..., true), then its ExpectPeer / ExpectAllIngress / Expect
lines). Like upstream (ignoreLoopback = true), a pod probing itself is left out of the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from render.cluster.network_policy import Endpoint, allowed, policy_types, selector_matches

NAMESPACES = ("x", "y", "z")
PODS = ("a", "b", "c")
NS_LABEL = "kubernetes.io/metadata.name"


def _pod(ns: str, name: str, i: int) -> Endpoint:
    # The e2e pods serve each port under the name serve-<port>-<protocol> (kubemanager.go).
    ports = {f"serve-{p}-tcp": (p, "TCP") for p in (80, 81)}
    return Endpoint(f"{ns}/{name}", f"10.0.{i // 3}.{i % 3 + 1}", ns, {"pod": name}, ports=ports, node="n1")


ALL = {f"{ns}/{p}": _pod(ns, p, i) for i, (ns, p) in enumerate((ns, p) for ns in NAMESPACES for p in PODS)}


def np(name: str, spec: dict[str, Any], ns: str = "x") -> dict[str, Any]:
    return {"kind": "NetworkPolicy", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def spec(pod_labels: dict[str, str], **rules: Any) -> dict[str, Any]:
    """As upstream's helpers build it (policies.go): SetSpecIngressRules / SetSpecEgressRules add
    their rules and append Ingress / Egress to policyTypes."""
    types = [t for t, key in (("Ingress", "ingress"), ("Egress", "egress")) if key in rules]
    return {"podSelector": {"matchLabels": pod_labels} if pod_labels else {}, "policyTypes": types, **rules}


def pod_a(**rules: Any) -> dict[str, Any]:
    """GenNetworkPolicyWithNameAndPodMatchLabel(..., {"pod": "a"}, SetSpecIngressRules(...))."""
    return spec({"pod": "a"}, **rules)


Table = dict[tuple[str, str], bool]


def table(default: bool = True) -> Table:
    return {(s, d): default for s in ALL for d in ALL if s != d}


def expect(t: Table, src: Callable[[str], bool], dst: Callable[[str], bool], value: bool) -> None:
    for s, d in t:
        if src(s) and dst(d):
            t[(s, d)] = value


def ns(name: str) -> Callable[[str], bool]:
    return lambda p: p.startswith(f"{name}/")


def is_(pod: str) -> Callable[[str], bool]:
    return lambda p: p == pod


ANY = lambda p: True  # noqa: E731  (Peer{}: any pod)


def check(policies: list[dict[str, Any]], t: Table, port: int = 80) -> None:
    wrong = [f"{s} -> {d}: expected {want}, got {allowed(policies, ALL[s], ALL[d], port)}"
             for (s, d), want in t.items() if bool(allowed(policies, ALL[s], ALL[d], port)) != want]
    assert not wrong, "\n".join(wrong)


def test_default_deny_ingress() -> None:
    t = table()
    expect(t, ANY, ns("x"), False)
    check([np("deny-ingress", spec({}, ingress=[]))], t)


def test_default_deny_all() -> None:
    t = table()
    expect(t, ANY, ns("x"), False)
    expect(t, ns("x"), ANY, False)
    check([np("deny-all", spec({}, ingress=[], egress=[]))], t)


def test_allow_traffic_from_pods_within_server_namespace_based_on_pod_selector() -> None:
    t = table()
    expect(t, ANY, is_("x/a"), False)
    t[("x/b", "x/a")] = True
    check([np("x-a-allows-x-b", pod_a(ingress=[{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]))], t)


def test_allow_ingress_traffic_for_a_target() -> None:
    t = table()
    expect(t, ANY, is_("x/b"), False)
    expect(t, ANY, is_("x/c"), False)
    check([np("deny-all", spec({}, ingress=[])),
           np("allow-all-to-a", pod_a(ingress=[{"from": [{"podSelector": {}, "namespaceSelector": {}}]}]))], t)


def test_allow_traffic_only_from_a_different_namespace_based_on_namespace_selector() -> None:
    t = table()
    expect(t, ns("x"), is_("x/a"), False)
    expect(t, ns("z"), is_("x/a"), False)
    check([np("allow-client-a-via-ns-selector",
              pod_a(ingress=[{"from": [{"namespaceSelector": {"matchLabels": {NS_LABEL: "y"}}}]}]))], t)


def test_pod_selector_or_namespace_selector() -> None:
    # Two peers: OR. (Upstream also expects x/a -> x/a denied; loopback is ignored there and here.)
    t = table()
    t[("x/c", "x/a")] = False
    not_x = {"matchExpressions": [{"key": NS_LABEL, "operator": "NotIn", "values": ["x"]}]}
    check([np("allow-ns-y-match-selector", pod_a(ingress=[{"from": [
        {"namespaceSelector": not_x}, {"podSelector": {"matchLabels": {"pod": "b"}}}]}]))], t)


def test_pod_selector_and_namespace_selector() -> None:
    # One peer with both: AND.
    t = table()
    expect(t, ANY, is_("x/a"), False)
    t[("y/b", "x/a")] = True
    t[("z/b", "x/a")] = True
    not_x = {"matchExpressions": [{"key": NS_LABEL, "operator": "NotIn", "values": ["x"]}]}
    check([np("allow-ns-y-podselector-and-nsselector", pod_a(ingress=[{"from": [
        {"namespaceSelector": not_x, "podSelector": {"matchLabels": {"pod": "b"}}}]}]))], t)


def test_multiple_pod_selectors_and_namespace_selectors() -> None:
    t = table()
    expect(t, ns("x"), is_("x/a"), False)
    t[("y/a", "x/a")] = False
    t[("z/a", "x/a")] = False
    not_x = {"matchExpressions": [{"key": NS_LABEL, "operator": "NotIn", "values": ["x"]}]}
    b_or_c = {"matchExpressions": [{"key": "pod", "operator": "In", "values": ["b", "c"]}]}
    check([np("allow-ns-y-z-pod-b-c", pod_a(ingress=[{"from": [{"namespaceSelector": not_x, "podSelector": b_or_c}]}]))],
          t)


@pytest.mark.parametrize("port, open_from_y", [(81, True), (80, False)])
def test_multiple_stacked_policies_with_overlapping_pod_selectors(port: int, open_from_y: bool) -> None:
    t = table()
    expect(t, ANY, is_("x/a"), False)
    if open_from_y:
        expect(t, ns("y"), is_("x/a"), True)
    y = {"namespaceSelector": {"matchLabels": {NS_LABEL: "y"}}}
    check([np("allow-81", pod_a(ingress=[{"from": [y], "ports": [{"port": 81, "protocol": "TCP"}]}]))], t, port)
    # "Verifying that we can add a policy to unblock port 80": the union of both.
    both = table()
    expect(both, ns("x"), is_("x/a"), False)
    expect(both, ns("z"), is_("x/a"), False)
    check([np("allow-81", pod_a(ingress=[{"from": [y], "ports": [{"port": 81, "protocol": "TCP"}]}])),
           np("allow-80", pod_a(ingress=[{"from": [y], "ports": [{"port": 80, "protocol": "TCP"}]}]))], both, port)


@pytest.mark.parametrize("port", [80, 81])
def test_allow_all_policy(port: int) -> None:
    check([np("allow-all", spec({}, ingress=[{}]))], table(), port)


def test_allow_ingress_access_on_one_named_port() -> None:
    policy = [np("allow-all", spec({}, ingress=[{"ports": [{"port": "serve-81-tcp"}]}]))]
    check(policy, table(), 81)
    t80 = table()
    expect(t80, ANY, ns("x"), False)
    check(policy, t80, 80)


def test_allow_egress_access_on_one_named_port() -> None:
    policy = [np("allow-egress", spec({}, egress=[{"ports": [{"port": "serve-80-tcp"}]}]))]
    check(policy, table(), 80)
    t81 = table()
    expect(t81, ns("x"), ANY, False)
    check(policy, t81, 81)


# --- the docs' example policy and stated outcomes ------------------------------------------------

DOCS_EXAMPLE = np("test-network-policy", {
    "podSelector": {"matchLabels": {"role": "db"}},
    "policyTypes": ["Ingress", "Egress"],
    "ingress": [{
        "from": [{"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}},
                 {"namespaceSelector": {"matchLabels": {"project": "myproject"}}},
                 {"podSelector": {"matchLabels": {"role": "frontend"}}}],
        "ports": [{"protocol": "TCP", "port": 6379}],
    }],
    "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 5978}]}],
}, ns="default")
DB = Endpoint("db", "10.1.0.5", "default", {"role": "db"})


def _ext(ip: str) -> Endpoint:
    return Endpoint(ip, ip)


@pytest.mark.parametrize("src, port, want", [
    # "any pod in the "default" namespace with the label "role=frontend""
    (Endpoint("fe", "10.1.0.6", "default", {"role": "frontend"}), 6379, True),
    (Endpoint("fe-elsewhere", "10.1.0.7", "other", {"role": "frontend"}), 6379, False),
    # "any pod in a namespace with the label "project=myproject""
    (Endpoint("anything", "10.1.0.8", "proj", {}, {"project": "myproject"}), 6379, True),
    # "172.17.0.0–172.17.0.255 and 172.17.2.0–172.17.255.255 (ie, all of 172.17.0.0/16 except 172.17.1.0/24)"
    (_ext("172.17.0.255"), 6379, True),
    (_ext("172.17.1.9"), 6379, False),
    (_ext("172.17.2.0"), 6379, True),
    (_ext("172.18.0.1"), 6379, False),
    # "on TCP port 6379" only
    (Endpoint("fe", "10.1.0.6", "default", {"role": "frontend"}), 6380, False),
    # another pod of "default", not role=db: not isolated, nothing selects it
    (_ext("192.0.2.1"), 6379, False),
])
def test_docs_example_ingress(src: Endpoint, port: int, want: bool) -> None:
    assert bool(allowed([DOCS_EXAMPLE], src, DB, port)) is want


@pytest.mark.parametrize("dst, port, want", [
    # "allows connections from any pod ... with the label "role=db" to CIDR 10.0.0.0/24 on TCP port 5978"
    (_ext("10.0.0.200"), 5978, True),
    (_ext("10.0.1.1"), 5978, False),
    (_ext("10.0.0.200"), 5979, False),
    # selectors never match a non-pod, and a pod outside 10.0.0.0/24 is not in the ipBlock
    (Endpoint("peer", "10.1.0.9", "default", {"role": "frontend"}), 5978, False),
])
def test_docs_example_egress(dst: Endpoint, port: int, want: bool) -> None:
    assert bool(allowed([DOCS_EXAMPLE], DB, dst, port)) is want


def test_docs_unselected_pods_stay_open() -> None:
    # "Other pods in the namespace that are not selected by any NetworkPolicy will continue to accept all traffic."
    other = Endpoint("web", "10.1.0.10", "default", {"role": "web"})
    assert allowed([DOCS_EXAMPLE], _ext("203.0.113.1"), other, 1234)
    assert allowed([DOCS_EXAMPLE], other, _ext("203.0.113.1"), 1234)


@pytest.mark.parametrize("port, want", [(31999, False), (32000, True), (32768, True), (32769, False)])
def test_docs_end_port(port: int, want: bool) -> None:
    # "Targeting a range of ports": role=db pods may reach 10.0.0.0/24 over TCP "provided that the
    # target port is between the range 32000 and 32768".
    policy = np("multi-port-egress", {
        "podSelector": {"matchLabels": {"role": "db"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
                    "ports": [{"protocol": "TCP", "port": 32000, "endPort": 32768}]}]}, ns="default")
    assert bool(allowed([policy], DB, _ext("10.0.0.7"), port)) is want


def test_docs_policy_types_default() -> None:
    # "If no policyTypes are specified ... Ingress will always be set and Egress will be set if the
    # NetworkPolicy has any egress rules."
    assert policy_types({"podSelector": {}}) == {"Ingress"}
    assert policy_types({"podSelector": {}, "egress": [{}]}) == {"Ingress", "Egress"}
    assert policy_types({"podSelector": {}, "policyTypes": ["Egress"]}) == {"Egress"}


def test_docs_exceptions_self_and_own_node() -> None:
    # "a pod cannot block access to itself"; "traffic to and from the node where a Pod is running
    # is always allowed, regardless of the IP address of the Pod or the node".
    deny = [np("deny-all", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})]
    pod = ALL["x/a"]
    assert allowed(deny, pod, pod, 80)
    own_node = Endpoint("n1", "192.0.2.10", node="n1")
    other_node = Endpoint("n2", "192.0.2.11", node="n2")
    assert allowed(deny, own_node, pod, 80) and allowed(deny, pod, own_node, 10250)
    assert not allowed(deny, other_node, pod, 80) and not allowed(deny, pod, other_node, 10250)


def test_protocol_defaults_to_tcp() -> None:
    policy = [np("dns", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": 53}]}]})]
    assert allowed(policy, ALL["x/a"], ALL["y/a"], 53, "TCP")
    assert not allowed(policy, ALL["x/a"], ALL["y/a"], 53, "UDP")


def test_selector_operators() -> None:
    labels = {"pod": "a"}
    assert selector_matches({}, labels) and selector_matches(None, labels)
    assert selector_matches({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, labels)
    with pytest.raises(ValueError, match="operator"):
        selector_matches({"matchExpressions": [{"key": "pod", "operator": "Gt", "values": ["1"]}]}, labels)
