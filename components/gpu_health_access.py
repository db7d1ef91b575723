"""Who may reach the GPU health service (components/gpu_health.py), whose webhook takes nodes out.

* A bearer token: generated (pulumi-random, a Pulumi secret from end to end: never in a Helm value,
  an output or a log), stored in a Secret `gpu-health-webhook-token` (key `token`) in two
  namespaces: `gpu-health`, mounted read-only into the service's pod (--webhook-token-file), and
  `monitoring`, mounted by the prometheus-operator into the Alertmanager pod through
  `alertmanager.alertmanagerSpec.secrets` (at /etc/alertmanager/secrets/<secret>/<key>), whose
  webhook receiver sends it with `http_config.authorization.credentials_file`
  (components/monitoring/gpu_health.py). The service answers a request without it 401.
* NetworkPolicies in `gpu-health`: every pod's ingress denied by default; the service's pods admit
  Alertmanager (the webhook) and Prometheus (/metrics) of the `monitoring` namespace on the one
  port they share, so the token, not the policy, keeps Prometheus off the webhook path. Egress is
  not restricted: the service calls the API server, the diagnostic's pods the API server too.
  Kubernetes admits the kubelet's probes from the node whatever the policy; a CNI without
  NetworkPolicy support (flannel) ignores them, and the token still holds.

Does not manage: NetworkPolicies of other namespaces, rotation of the token (replace the
RandomPassword: `pulumi up --replace <its URN>`; the service re-reads its file, Alertmanager reads
its file on every notification).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

WEBHOOK_TOKEN_SECRET = "gpu-health-webhook-token"
WEBHOOK_TOKEN_KEY = "token"
# Where the service's pod mounts it (the flag --webhook-token-file names the file).
TOKEN_MOUNT_DIR = "/etc/gpu-health/webhook-token"
TOKEN_FILE = f"{TOKEN_MOUNT_DIR}/{WEBHOOK_TOKEN_KEY}"
# ... and where the operator mounts alertmanagerSpec.secrets in the Alertmanager pod (the
# Alertmanager CRD: "mounted into /etc/alertmanager/secrets/<secret-name>").
ALERTMANAGER_CREDENTIALS_FILE = f"/etc/alertmanager/secrets/{WEBHOOK_TOKEN_SECRET}/{WEBHOOK_TOKEN_KEY}"

# The monitoring layer (components/monitoring: namespace and Helm release `monitoring`): the
# prometheus-operator labels the pods of an Alertmanager / Prometheus resource with its name, which
# kube-prometheus-stack makes <release>-kube-prometheus-<kind>: these are the labels the pinned
# chart's own pod anti-affinity selects them by (a test compares them with its rendering).
MONITORING_NAMESPACE = "monitoring"
ALERTMANAGER_POD_LABELS = {"app.kubernetes.io/name": "alertmanager",
                           "alertmanager": "monitoring-kube-prometheus-alertmanager"}
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus",
                         "app.kubernetes.io/instance": "monitoring-kube-prometheus-prometheus"}
DEFAULT_DENY = "default-deny-ingress"


def webhook_token(name: str, opts: pulumi.ResourceOptions | None = None) -> pulumi.Output[str]:
    """A new random token, secret (pulumi-random marks `result` secret; made sure here)."""
    password = random.RandomPassword(name, length=48, special=False, opts=opts)
    return pulumi.Output.secret(password.result)


def token_secret(name: str, namespace: str, token: pulumi.Input[str],
                 opts: pulumi.ResourceOptions | None = None) -> k8s.core.v1.Secret:
    """The Secret holding the token in `namespace` (the SDK keeps string_data secret)."""
    return k8s.core.v1.Secret(
        name,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=WEBHOOK_TOKEN_SECRET, namespace=namespace,
                                            labels={"app.kubernetes.io/part-of": "gpu-cluster"}),
        type="Opaque",
        string_data={WEBHOOK_TOKEN_KEY: pulumi.Output.secret(token)},
        opts=opts,
    )


def _from_monitoring(pod_labels: dict[str, str]) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}},
            "podSelector": {"matchLabels": dict(pod_labels)}}


def network_policies(namespace: str, service_labels: dict[str, str], port: int,
                     labels: dict[str, str]) -> list[dict[str, Any]]:
    """Default-deny ingress for every pod of `namespace`, and the service's one opening."""
    meta = {"namespace": namespace, "labels": dict(labels)}
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": DEFAULT_DENY, **meta},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "gpu-health-from-monitoring", **meta},
         "spec": {
             "podSelector": {"matchLabels": dict(service_labels)},
             "policyTypes": ["Ingress"],
             # One port serves /webhook (Alertmanager, with the token) and /metrics (Prometheus).
             "ingress": [{"from": [_from_monitoring(ALERTMANAGER_POD_LABELS), _from_monitoring(PROMETHEUS_POD_LABELS)],
                          "ports": [{"protocol": "TCP", "port": port}]}],
         }},
    ]
