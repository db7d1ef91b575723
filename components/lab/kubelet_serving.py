"""KubeletServingApprover: the lab kubelets' serving certificates, issued by the cluster CA and
rotated, with kubelet-csr-approver approving each request.

Why: kubeadm's kubelets serve :10250 (logs, exec, metrics) with a self-signed certificate unless
the KubeletConfiguration says serverTLSBootstrap: true (components/lab/kubeadm.py); then each
kubelet asks the API for its serving certificate (a CertificateSigningRequest for the signer
kubernetes.io/kubelet-serving) and rotates it before it lapses. kube-controller-manager signs only
approved requests, and Kubernetes itself approves none for this signer (the API cannot know which
names and addresses are a node's: kubernetes.io docs, "kubelet TLS bootstrapping", kubelet serving
certificates). Until a request is approved, `kubectl logs` and `exec` to that node fail.

The approver: kubelet-csr-approver of postfinance (github.com/postfinance/kubelet-csr-approver,
tag v1.2.14; its Go module is not served by the module proxy here, so it is neither built nor run in
the tests: its manifest and its flags are read from the tag's sources, tests/components/lab/upstream/).
What follows is its deploy/k8s/ (deployment.yaml, clusterrole.yaml, rolebinding.yaml,
serviceaccount.yaml) with the chart's security context (charts/kubelet-csr-approver/values.yaml) and
this cluster's values. It approves a kubelet-serving request only when (internal/controller/
csr_controller.go, regex_ip_checks.go): the requester is system:node:<name> and the subject's CN
says the same; the one DNS name starts with that name and matches PROVIDER_REGEX, here exactly the
configured host names; every IP address lies in PROVIDER_IP_PREFIXES, here exactly the configured
host addresses (/32). Any other request for this signer is denied. DNS resolution is bypassed: lab
host names need not resolve in the cluster's DNS, and the addresses are checked against the config
instead. What it cannot check: that an address is the requesting node's own rather than another
host's of the cluster (a node could obtain a serving certificate naming another host's address).

Does not manage: the move of nodes initialised before serverTLSBootstrap was set (components/lab/
kubelet_config.py does it), the kubelet's client certificate (rotated by the kubelet and approved by
kube-controller-manager's own approver).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from config.lab import Host
from config.scheduling_contract import addon_affinity, addon_tolerations

NAME = "kubelet-csr-approver"
NAMESPACE = "kube-system"  # as its deploy/k8s manifests
METRICS_PORT = 8080
PROBE_PORT = 8081
# Two replicas with leader election, as upstream: a drained node does not stop the approvals.
REPLICAS = 2
# The ClusterRole of deploy/k8s/clusterrole.yaml at v1.2.14 (a test compares it with the tag's file).
RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "update"]},
    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"],
     "verbs": ["update"]},
    {"apiGroups": ["certificates.k8s.io"], "resourceNames": ["kubernetes.io/kubelet-serving"],
     "resources": ["signers"], "verbs": ["approve"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
)


def provider_env(hosts: Sequence[Host]) -> dict[str, str]:
    """The approver's settings (its flags as environment variables, ff.WithEnvVars): only the
    configured hosts' names and addresses are approved."""
    names = "|".join(re.escape(h.name) for h in sorted(hosts, key=lambda h: h.name))
    return {
        "PROVIDER_REGEX": f"^({names})$",
        "PROVIDER_IP_PREFIXES": ",".join(f"{h.address}/32" for h in sorted(hosts, key=lambda h: int(h.address))),
        "BYPASS_DNS_RESOLUTION": "true",
    }


def deployment_spec(hosts: Sequence[Host]) -> dict[str, Any]:
    labels = {"app": NAME}
    container = {
        "name": NAME,
        "image": versions.KUBELET_CSR_APPROVER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": ["-metrics-bind-address", f":{METRICS_PORT}", "-health-probe-bind-address", f":{PROBE_PORT}",
                 "-leader-election"],
        "env": [{"name": k, "value": v} for k, v in provider_env(hosts).items()],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": PROBE_PORT}},
        "resources": {"requests": {"memory": "64Mi", "cpu": "100m"}, "limits": {"memory": "128Mi", "cpu": "500m"}},
        "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True, "privileged": False,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "seccompProfile": {"type": "RuntimeDefault"}, "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "replicas": REPLICAS,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"serviceAccountName": NAME, "containers": [container],
                     # a cluster add-on: on lab the control plane is the only untainted-for-it node
                     "tolerations": addon_tolerations(), "affinity": addon_affinity()},
        },
    }


def bodies(hosts: Sequence[Host]) -> dict[str, dict]:
    """The ClusterRole's, the ClusterRoleBinding's and the Deployment's fields, in the API's spelling."""
    return {
        "role": {"rules": [dict(r) for r in RULES]},
        "binding": {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
                    "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        "deployment": {"spec": deployment_spec(hosts)},
    }


@dataclass(frozen=True)
class KubeletServingApproverArgs:
    hosts: tuple[Host, ...]  # every host of the cluster: whose kubelets' requests are approved


class KubeletServingApprover(pulumi.ComponentResource):
    def __init__(self, name: str, args: KubeletServingApproverArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:lab:KubeletServingApprover", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        meta = k8s.meta.v1.ObjectMetaArgs(name=NAME, namespace=NAMESPACE)
        body = bodies(args.hosts)
        account = k8s.core.v1.ServiceAccount(f"{name}-account", metadata=meta, opts=child)
        role = k8s.rbac.v1.ClusterRole(f"{name}-role", metadata=k8s.meta.v1.ObjectMetaArgs(name=NAME),
                                       rules=body["role"]["rules"], opts=child)
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding", metadata=k8s.meta.v1.ObjectMetaArgs(name=NAME),
            role_ref=body["binding"]["roleRef"], subjects=body["binding"]["subjects"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[account, role]))
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", metadata=meta, spec=body["deployment"]["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[binding]))
        self.register_outputs({"image": versions.KUBELET_CSR_APPROVER_IMAGE})
