"""kubeadm configuration files for the lab stack, built from the cluster's kubeadm settings.

kubeadm reads a config file rather than flags so every setting (version, CIDRs, endpoint, node
name and IP, labels, taints, cgroup driver) is in one reviewable document. The init file goes to
the control plane on stdin; the join file goes to the joining host on stdin, complete: the
cluster's bootstrap token, the CA's public-key hash to pin and, for a control plane, the key of the
uploaded certificates (components/lab/node_join.py). It holds the token, so the program keeps it a
Pulumi secret end to end. `join_config_template` is the same document with placeholders where
those secrets go: what the offline checks read (render/cluster/nodes.py models each node from it).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from components.lab import hardening
from config.hardening import Hardening
from config.lab import Host, Role
from config.scheduling_contract import CONTROL_PLANE_TAINT, GPU_NODE_LABEL, GPU_TAINT

API_VERSION = "kubeadm.k8s.io/v1beta4"  # kubeadm 1.31+; every supported minor
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
# etcd's plain-HTTP listener for /metrics and /health (no keys, no writes): kubeadm's default binds it
# to 127.0.0.1 only (cmd/kubeadm/app/phases/etcd/local.go), where Prometheus cannot scrape it. The
# ClusterConfiguration is one document for every member (a joining control plane reads it from the
# kubeadm-config ConfigMap), so a node's own address here would be every member's: etcd on any other
# member could not bind it and would not start. The wildcard binds each member's own addresses.
ETCD_METRICS_PORT = 2381
ETCD_METRICS_URL = f"http://0.0.0.0:{ETCD_METRICS_PORT}"
# The kernel settings the kubelet checks at start (sysctl name, value): with protectKernelDefaults it
# refuses to run when one differs, where without it the kubelet would quietly change the host's
# kernel itself. Kubernetes v1.34.2 pkg/kubelet/cm/container_manager_linux.go setupKernelTunables,
# the values from k8s.io/component-helpers v0.34.2 node/util/sysctl/sysctl.go (a test reads both).
# Node prep sets them (host_steps/node_prep/kernel_prep.sh) before the kubelet is installed.
KUBELET_KERNEL_TUNABLES = (
    ("vm.overcommit_memory", 1),  # VMOvercommitMemoryAlways
    ("vm.panic_on_oom", 0),  # VMPanicOnOOMInvokeOOMKiller: the OOM killer, not a panic
    ("kernel.panic", 10),  # KernelPanicRebootTimeout: reboot 10 s after a panic
    ("kernel.panic_on_oops", 1),  # KernelPanicOnOopsAlways
    ("kernel.keys.root_maxkeys", 1000000),  # RootMaxKeysSetting
    ("kernel.keys.root_maxbytes", 25000000),  # RootMaxBytesSetting: 25 bytes per key
)


@dataclass(frozen=True)
class KubeadmSettings:
    """What the kubeadm files say of the cluster (stacks/lab.py fills it from the lab config).
    The endpoint and the CIDRs are the cluster's identity (changing one rebuilds it, refused unless
    allowRebuild); a new version is an in-place upgrade (see control_plane.py, upgrade.py)."""

    kubernetes_version: str  # "1.34.2", installed by NodePrep
    api_endpoint: str  # host:port of the API server every node joins through
    pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network
    gpu_taint: bool  # taint GPU workers nvidia.com/gpu=present:NoSchedule
    # The audit log, Secrets encryption and kubelet access (components/lab/hardening.py).
    hardening: Hardening = Hardening()

    @classmethod
    def of(cls, lab: LabKeys) -> KubeadmSettings:
        """The settings from the lab config's keys of the same names: the program's (stacks/lab.py) and
        the check's node model (render/cluster/nodes.py) build them here alike."""
        return cls(kubernetes_version=lab.kubernetes_version, api_endpoint=lab.api_endpoint, pod_cidr=lab.pod_cidr,
                   service_cidr=lab.service_cidr, gpu_taint=lab.gpu_taint, hardening=lab.hardening)


class LabKeys(Protocol):
    """The lab config's keys the kubeadm files read (config/lab.py LabStack)."""

    @property
    def kubernetes_version(self) -> str: ...
    @property
    def api_endpoint(self) -> str: ...
    @property
    def pod_cidr(self) -> ipaddress.IPv4Network: ...
    @property
    def service_cidr(self) -> ipaddress.IPv4Network: ...
    @property
    def gpu_taint(self) -> bool: ...
    @property
    def hardening(self) -> Hardening: ...


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


def kubelet_configuration(cluster: KubeadmSettings) -> dict[str, Any]:
    """The KubeletConfiguration of every node: in the init file, and merged into the kubelet-config
    ConfigMap of a cluster initialised before a field was added (components/lab/kubelet_config.py)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        # The kernel settings are node prep's to set (KUBELET_KERNEL_TUNABLES), not the kubelet's to change.
        "protectKernelDefaults": True,
        # A serving certificate from the cluster CA, requested and rotated by the kubelet, approved by
        # kubelet-csr-approver (components/lab/kubelet_serving.py), instead of a self-signed one.
        "serverTLSBootstrap": True,
        **hardening.kubelet_access(cluster.hardening.kubelet),
    }


def init_config(cluster: KubeadmSettings, first: Host) -> str:
    """The init file of the first control plane, `first`."""
    init = {
        "apiVersion": API_VERSION,
        "kind": "InitConfiguration",
        # The init token is only what kubeadm's bootstrap-token phase needs; joins use the
        # cluster's join token (node_join.Membership, a Secret through the API), so this one
        # expires quickly.
        "bootstrapTokens": [{"ttl": "15m0s", "usages": ["signing", "authentication"],
                             "groups": ["system:bootstrappers:kubeadm:default-node-token"]}],
        "localAPIEndpoint": {"advertiseAddress": str(first.address), "bindPort": 6443},
        "nodeRegistration": _node_registration(cluster, first, control_plane=True),
    }
    cluster_doc: dict[str, Any] = {
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
    cluster_doc["etcd"] = {"local": {"extraArgs": [{"name": "listen-metrics-urls", "value": ETCD_METRICS_URL}]}}
    if api_server := hardening.api_server(cluster.hardening):
        # Merged, not assigned: other apiServer fields (certSANs) may be set beside these.
        cluster_doc.setdefault("apiServer", {}).update(api_server)
    # kubeadm uploads this to the cluster (ConfigMap kubelet-config): every node that joins gets it.
    kubelet = kubelet_configuration(cluster)
    return _dump([init, cluster_doc, kubelet])


# A bootstrap token "<id>.<secret>" (kubernetes.io, Authenticating with Bootstrap Tokens) and a
# CA pin "sha256:<hex of the SHA-256 of the CA's DER SubjectPublicKeyInfo>" (kubeadm join, discovery).
TOKEN_PATTERN = re.compile(r"[a-z0-9]{6}\.[a-z0-9]{16}")
CA_HASH_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
CERTIFICATE_KEY_PATTERN = re.compile(r"[0-9a-f]{64}")  # 32 bytes (AES-256), hex
# The placeholders of join_config_template.
TOKEN_PLACEHOLDER, CA_HASH_PLACEHOLDER, CERT_KEY_PLACEHOLDER = "@TOKEN@", "@CA_HASH@", "@CERT_KEY@"


def _join_document(cluster: KubeadmSettings, host: Host, token: str, ca_hash: str, certificate_key: str) -> dict[str, Any]:
    control_plane = host.role is Role.CONTROL_PLANE
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": cluster.api_endpoint,
                "token": token,
                "caCertHashes": [ca_hash],
            }
        },
        "nodeRegistration": _node_registration(cluster, host, control_plane=control_plane),
    }
    if control_plane:
        doc["controlPlane"] = {
            "localAPIEndpoint": {"advertiseAddress": str(host.address), "bindPort": 6443},
            "certificateKey": certificate_key,
        }
    return doc


def join_config(
    cluster: KubeadmSettings, host: Host, token: str, ca_hash: str, certificate_key: str | None = None
) -> str:
    """The join file `host` receives. It holds the token: callers keep it a Pulumi secret. The host
    checks the token's and the hash's form before kubeadm sees them (scripts.kubeadm_join)."""
    return _dump([_join_document(cluster, host, token, ca_hash, certificate_key or "")])


def join_config_template(cluster: KubeadmSettings, host: Host) -> str:
    """join_config with placeholders for the token, the CA hash and the certificate key."""
    return _dump([_join_document(cluster, host, TOKEN_PLACEHOLDER, CA_HASH_PLACEHOLDER, CERT_KEY_PLACEHOLDER)])
