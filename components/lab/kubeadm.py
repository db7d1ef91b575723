"""kubeadm configuration files for the lab stack, built from the cluster's kubeadm settings.

kubeadm reads a config file rather than flags so every setting (version, CIDRs, endpoint, node
name and IP, labels, taints, cgroup driver) is in one reviewable document. The init file goes to
the control plane on stdin; the join file is a template whose secret fields (@TOKEN@, @CA_HASH@,
@CERT_KEY@) the node fills from the freshly minted token it receives on stdin.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import yaml

from components.scheduling_contract import CONTROL_PLANE_TAINT, GPU_NODE_LABEL, GPU_TAINT
from config.lab import Host, Role

API_VERSION = "kubeadm.k8s.io/v1beta4"  # kubeadm 1.31+; every supported minor
CRI_SOCKET = "unix:///run/containerd/containerd.sock"


@dataclass(frozen=True)
class KubeadmSettings:
    """What the kubeadm files say of the cluster (stacks/lab.py fills it from the lab config).
    Changing any of the init file's settings rebuilds the cluster (see control_plane.py)."""

    kubernetes_version: str  # "1.34.2", installed by NodePrep
    api_endpoint: str  # host:port of the API server every node joins through
    pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network
    gpu_taint: bool  # taint GPU workers nvidia.com/gpu=present:NoSchedule


def _node_registration(cluster: KubeadmSettings, host: Host, control_plane: bool) -> dict[str, Any]:
    extra = [{"name": "node-ip", "value": str(host.address)}]
    taints: list[dict[str, str]] = []
    if control_plane:
        taints.append(CONTROL_PLANE_TAINT.as_kubernetes())
    if host.is_gpu:
        # kubelet may set labels under nvidia.com/ itself; GPU workloads select on this one.
        extra.append({"name": "node-labels", "value": "=".join(GPU_NODE_LABEL)})
        if cluster.gpu_taint and not control_plane:
            taints.append(GPU_TAINT.as_kubernetes())
    return {
        "name": host.name,
        "criSocket": CRI_SOCKET,
        "kubeletExtraArgs": extra,
        "taints": taints,
    }


def _dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True)


def init_config(cluster: KubeadmSettings, first: Host) -> str:
    """The init file of the first control plane, `first`."""
    init = {
        "apiVersion": API_VERSION,
        "kind": "InitConfiguration",
        # The init token is only what kubeadm's bootstrap-token phase needs; every join mints
        # its own 15-minute token, so this one expires quickly.
        "bootstrapTokens": [{"ttl": "15m0s", "usages": ["signing", "authentication"],
                             "groups": ["system:bootstrappers:kubeadm:default-node-token"]}],
        "localAPIEndpoint": {"advertiseAddress": str(first.address), "bindPort": 6443},
        "nodeRegistration": _node_registration(cluster, first, control_plane=True),
    }
    cluster_doc = {
        "apiVersion": API_VERSION,
        "kind": "ClusterConfiguration",
        "kubernetesVersion": f"v{cluster.kubernetes_version}",
        "clusterName": "gpu-cluster",
        "controlPlaneEndpoint": cluster.api_endpoint,
        "networking": {
            "podSubnet": str(cluster.pod_cidr),
            "serviceSubnet": str(cluster.service_cidr),
        },
    }
    kubelet = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
    }
    return _dump([init, cluster_doc, kubelet])


def join_config_template(cluster: KubeadmSettings, host: Host) -> str:
    control_plane = host.role is Role.CONTROL_PLANE
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": cluster.api_endpoint,
                "token": "@TOKEN@",
                "caCertHashes": ["@CA_HASH@"],
            }
        },
        "nodeRegistration": _node_registration(cluster, host, control_plane=control_plane),
    }
    if control_plane:
        doc["controlPlane"] = {
            "localAPIEndpoint": {"advertiseAddress": str(host.address), "bindPort": 6443},
            "certificateKey": "@CERT_KEY@",
        }
    return _dump([doc])
