"""NetworkPolicies of the training namespace, as pure manifests.

- `default-deny`: every pod of the namespace, no ingress and no egress unless allowed below.
- `allow-dns`: egress to the cluster DNS (kube-system pods, and NodeLocal DNSCache's link-local
  address, port 53 UDP/TCP) for every pod.
- `<job>-peers` per job: the job's pods accept connections only from pods of the same job, on the
  rendezvous port (torchrun's c10d store, 29500) and the ports NCCL and gloo listen on (kernel-
  chosen ephemeral ports for bootstrap and the socket transport: 1024-65535); egress likewise only
  to the same job's pods.

What needs no rule: pulling images and mounting the shared claim (kubelet and the NFS CSI node
plugin do that from the node's network, not the pod's); RDMA traffic (IB verbs bypass the pod's
IP stack). Enforcement needs a CNI that implements NetworkPolicy (calico does; flannel accepts
the objects but does not enforce them).

- `<job>-internet` for the data preparation Job only (training.prepareData,
  components/training/prepare.py): egress on TCP 443 and 80 to public addresses, that is every
  IPv4 address except the private, shared and link-local ranges (the node's metadata server
  included) and the cluster's own pod and Service ranges where the platform knows them (lab).

Does not manage: egress to the internet for training pods (datasets are read from the shared
volume, prepared before the run, never downloaded at run time), to a metrics or
experiment-tracking endpoint (add a policy if the workload needs one), IPv6 egress, an HTTP proxy
on a private address (the internet policy leaves private ranges out).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from components.storage_contract import TRAINING_NAMESPACE
from components.training import launch
from config.scheduling_contract import JOB_LABEL

RDZV_PORT = launch.RDZV_PORT
# NCCL (bootstrap, socket transport) and gloo bind ephemeral ports the kernel picks.
EPHEMERAL_PORTS = (1024, 65535)
# NodeLocal DNSCache listens on this link-local address on every node (the Kubernetes docs' and
# GKE's default); pods then send DNS there instead of to a kube-system pod, which a
# namespaceSelector alone would not match.
NODE_LOCAL_DNS = "169.254.20.10/32"
DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
# Never "the internet": RFC 1918, carrier-grade NAT (RFC 6598), loopback and link-local (cloud
# metadata servers, NodeLocal DNSCache). Cluster ranges usually fall inside them; lab adds its own.
NON_PUBLIC_IPV4 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16")
INTERNET_PORTS = [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 80}]


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": TRAINING_NAMESPACE},
        "spec": spec,
    }


def default_deny() -> dict[str, Any]:
    return _policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})


def allow_dns() -> dict[str, Any]:
    return _policy(
        "allow-dns",
        {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}},
                        {"ipBlock": {"cidr": NODE_LOCAL_DNS}},
                    ],
                    "ports": DNS_PORTS,
                }
            ],
        },
    )


def job_peers(job: str) -> dict[str, Any]:
    selector = {"matchLabels": {JOB_LABEL: job}}
    ports = [
        {"protocol": "TCP", "port": RDZV_PORT},
        {"protocol": "TCP", "port": EPHEMERAL_PORTS[0], "endPort": EPHEMERAL_PORTS[1]},
    ]
    return _policy(
        f"{job}-peers",
        {
            "podSelector": selector,
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": selector}], "ports": ports}],
            "egress": [{"to": [{"podSelector": selector}], "ports": ports}],
        },
    )


def internet_except(cluster_cidrs: tuple[str, ...] = ()) -> list[str]:
    """The ranges the internet policy leaves out: NON_PUBLIC_IPV4 and the cluster's own, each
    range once (one inside another is dropped)."""
    nets = [ipaddress.IPv4Network(c) for c in (*NON_PUBLIC_IPV4, *cluster_cidrs)]
    kept = [n for i, n in enumerate(nets)
            if not any(n != m and n.subnet_of(m) for m in nets) and n not in nets[:i]]
    return [str(n) for n in kept]


def job_internet(job: str, cluster_cidrs: tuple[str, ...] = ()) -> dict[str, Any]:
    """Egress to public addresses on HTTPS and HTTP, for job `job`'s pods only."""
    return _policy(
        f"{job}-internet",
        {
            "podSelector": {"matchLabels": {JOB_LABEL: job}},
            "policyTypes": ["Egress"],
            "egress": [{
                "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": internet_except(cluster_cidrs)}}],
                "ports": INTERNET_PORTS,
            }],
        },
    )
