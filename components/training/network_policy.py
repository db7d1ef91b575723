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

Does not manage: egress to the internet (datasets are read from the shared volume, never
downloaded at run time), to a metrics or experiment-tracking endpoint (add a policy if the
workload needs one).
"""

from __future__ import annotations

from typing import Any

from components.scheduling_contract import JOB_LABEL
from components.storage_contract import TRAINING_NAMESPACE
from components.training import launch

RDZV_PORT = launch.RDZV_PORT
# NCCL (bootstrap, socket transport) and gloo bind ephemeral ports the kernel picks.
EPHEMERAL_PORTS = (1024, 65535)
# NodeLocal DNSCache listens on this link-local address on every node (the Kubernetes docs' and
# GKE's default); pods then send DNS there instead of to a kube-system pod, which a
# namespaceSelector alone would not match.
NODE_LOCAL_DNS = "169.254.20.10/32"
DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


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
