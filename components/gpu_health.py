"""GpuHealth: the GPU health service and its scheduled diagnostic (gpuHealth, config/health.py).

* The service: `python -m gpuhealth` from the workload image (gpuHealth.image, else training.image),
  one replica in namespace `gpu-health` (Pod Security `restricted`: non-root, read-only root
  filesystem, every capability dropped). It receives Alertmanager's GPU fault alerts on
  POST /webhook (the route: components/monitoring/gpu_health.py; only with the bearer token, and
  only Alertmanager and Prometheus may connect: components/gpu_health_access.py), reads the diagnostic
  results from node annotations, and cordons and taints (gpu-cluster.io/gpu-unhealthy) a failing
  node, evicts its GPU pods through the Eviction API (PodDisruptionBudgets hold), records each
  action as an Event and a metric (GET /metrics, scraped by a ServiceMonitor with monitoring), and
  returns a node after a passing diagnostic; within its circuit breaker (maxNodesOut,
  maxPercentOut) and only reporting under dryRun. It is a cluster add-on (control-plane toleration,
  prefers a node without GPUs): it must not run on the nodes it takes out.
* Its rights, the least that contract needs (SERVICE_RULES): nodes get/list/watch/patch (cordon,
  taint, annotate), pods list (which GPU pods a node runs, every namespace), pods/eviction create
  (never pods delete: an eviction honours PodDisruptionBudgets), events create. No Secrets, no
  workloads, no wildcard.
* The diagnostic: per GPU node known by name, a CronJob `gpu-diag-<node>` (gpuHealth.diagnostic:
  schedule, level) whose pod asks for every GPU of its node, so the scheduler starts it only when
  no GPU pod (training) runs there, and the diagnostic never shares a GPU. A run that finds the
  GPUs busy waits, and gives up after diagnostic.timeoutMinutes. Its first container (NVIDIA's
  DCGM image, versions.DCGM_IMAGE) starts nv-hostengine in the pod and runs `dcgmi diag -r
  <level> -j`; the second (the workload image's Python) writes the verdict into the node's
  annotations (components/gpu_health_diag.py). Why a CronJob rather than Jobs the service
  creates: the service then needs no right to create pods or Jobs (a pod creator can run anything
  as any ServiceAccount of its namespace), and the schedule is visible and suspendable with
  kubectl. Why the diagnostic pod writes its own annotation rather than the service: the pod's
  ServiceAccount may get and patch only the GPU nodes this stack names (resourceNames), and the
  service's contract reads results from annotations.
* Level 2 on demand: a suspended CronJob `gpu-diag-l2-<node>` per node is its template:
  `kubectl -n gpu-health create job --from=cronjob/gpu-diag-l2-<node> gpu-diag-l2-<node>-$(date +%s)`.

Not run: under MIG (DCGM's diagnostic does not run on MIG-partitioned GPUs) and where no GPU node
is known by name (gke: the autoscaler's nodes come and go).

* Idle-only: the diagnostic's pods (and the NCCL pair check's, components/gpu_health_pairs.py)
  have PriorityClass IDLE_PRIORITY_CLASS: below every other pod, never preempting; a training pod
  that needs the GPUs preempts a running check instead of waiting for it.

Does not manage: the XID table and every decision of the service (workloads/gpuhealth), GPU resets
or reboots (the service recommends them in its Events), the NCCL two-node check
(components/gpu_health_pairs.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from components.gpu_health_access import (
    TOKEN_FILE,
    TOKEN_MOUNT_DIR,
    WEBHOOK_TOKEN_SECRET,
    network_policies,
    token_secret,
    webhook_token,
)
from components.manifest_resource import manifest_resource, registers_like_typed
from components.namespaces import pod_security_namespace
from components.storage_contract import TRAINING_NAMESPACE
from config.health import PAIR_ROUNDS_MAX, GpuHealthConfig
from config.scheduling_contract import (
    GPU_RESOURCE,
    addon_affinity,
    addon_tolerations,
    gpu_tolerations,
)

NAMESPACE = "gpu-health"
NAME = "gpu-health"
PORT = 8080
PORT_NAME = "http"
WEBHOOK_PATH = "/webhook"  # what gpuhealth serves (workloads/gpuhealth/service.py; a test keeps them equal)
WEBHOOK_URL = f"http://{NAME}.{NAMESPACE}.svc:{PORT}{WEBHOOK_PATH}"
TAINT_KEY = "gpu-cluster.io/gpu-unhealthy"  # set by the service (its contract), named here for docs and tests
# A cordoned node's taint (the node controller sets it with spec.unschedulable); the scheduler
# places a pod on a cordoned node only when it tolerates it.
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# /healthz fails (the liveness probe restarts the pod) and GpuHealthReconcileStale fires after this
# many reconcile intervals without a successful pass (components/monitoring/gpu_health.py).
STALE_RECONCILES = 4
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gpu-cluster"}
DIAG_NAME = "gpu-diag"
# The checks that need a node's GPUs (the diagnostic, the NCCL pair check) run below every other
# pod and never preempt one: the scheduler starts them only on idle GPUs, and a training pod that
# needs those GPUs preempts them. Value below 0, the priority of pods that name no class.
IDLE_PRIORITY_CLASS = "gpu-cluster-idle-check"
IDLE_PRIORITY = -1000
DIAG_LABELS = {"app.kubernetes.io/name": DIAG_NAME, "app.kubernetes.io/part-of": "gpu-cluster"}
DIAG_CONFIGMAP = "gpu-diag-record"
DIAG_SCRIPT = Path(__file__).with_name("gpu_health_diag.py")
# The user both pods run as: restricted needs a non-root one, and neither needs a home of its own.
RUN_AS = 65534

# The service's ClusterRole: exactly what its contract needs (module docstring).
SERVICE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
)

_RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                   "seccompProfile": {"type": "RuntimeDefault"}}
_RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                         "capabilities": {"drop": ["ALL"]}}


@dataclass(frozen=True)
class GpuHealthArgs:
    health: GpuHealthConfig
    image: str  # the workload image carrying `gpuhealth` (Addons.gpu_health_image)
    # node name -> how many of `gpu_resource` it offers: the diagnostic asks for all of them.
    # Empty: no scheduled diagnostic (gke, MIG).
    diag_nodes: dict[str, int] = field(default_factory=dict)
    gpu_resource: str = GPU_RESOURCE
    service_monitor: bool = False  # monitoring is on: its CRDs exist
    # The webhook's bearer token (components/gpu_health_access.py), the same Alertmanager is given;
    # None: a token of its own (then nothing can call the webhook: monitoring is off).
    webhook_token: pulumi.Input[str] | None = None


def service_args(h: GpuHealthConfig) -> list[str]:
    return [
        "python", "-m", "gpuhealth",
        "--port", str(PORT),
        *(["--dry-run"] if h.dry_run else []),
        "--max-nodes-out", str(h.max_nodes_out),
        "--max-percent-out", str(h.max_percent_out),
        "--reconcile-seconds", str(h.reconcile_seconds),
        "--stale-reconciles", str(STALE_RECONCILES),
        # the Secret's key, mounted (components/gpu_health_access.py): a webhook call without it is refused
        "--webhook-token-file", TOKEN_FILE,
        # the diagnostic's pods (never evicted by a drain), the NCCL pair check's pods and one run
        # of its rounds (config/health.py)
        "--diag-namespace", NAMESPACE,
        "--pair-namespace", TRAINING_NAMESPACE,
        "--pair-window-minutes", str(PAIR_ROUNDS_MAX * h.nccl_check.round_minutes),
    ]


def _meta(name: str, namespace: str | None = NAMESPACE, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or LABELS)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def service_account(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name)}


def cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": _meta(name, None), "rules": rules}


def cluster_role_binding(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(name, None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
    }


def diag_rules(nodes: list[str]) -> list[dict[str, Any]]:
    """The diagnostic pod may read and annotate the GPU nodes it runs on, and no other node."""
    return [{"apiGroups": [""], "resources": ["nodes"], "resourceNames": sorted(nodes), "verbs": ["get", "patch"]}]


def deployment(args: GpuHealthArgs) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/healthz", "port": PORT_NAME}, "periodSeconds": 10}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(NAME),
        "spec": {
            "replicas": 1,  # one actor: two would each count the nodes out against the breaker
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "serviceAccountName": NAME,
                    # fsGroup: the token file (mode 0440) is readable by the pod's group only
                    "securityContext": {**_RESTRICTED_POD, "fsGroup": RUN_AS},
                    "tolerations": addon_tolerations(),
                    "affinity": addon_affinity(),
                    "containers": [{
                        "name": NAME,
                        "image": args.image,
                        "command": service_args(args.health),
                        "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
                        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                        "readinessProbe": probe,
                        "livenessProbe": {**probe, "failureThreshold": 6},
                        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                                      "limits": {"cpu": "500m", "memory": "512Mi"}},
                        "securityContext": dict(_RESTRICTED_CONTAINER),
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                         {"name": "webhook-token", "mountPath": TOKEN_MOUNT_DIR, "readOnly": True}],
                    }],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                                {"name": "webhook-token",
                                 "secret": {"secretName": WEBHOOK_TOKEN_SECRET, "defaultMode": 0o440}}],
                },
            },
        },
    }


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(NAME),
        "spec": {"selector": dict(LABELS),
                 "ports": [{"name": PORT_NAME, "port": PORT, "targetPort": PORT_NAME, "protocol": "TCP"}]},
    }


def service_monitor() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(NAME),
        "spec": {
            "selector": {"matchLabels": dict(LABELS)},
            "namespaceSelector": {"matchNames": [NAMESPACE]},
            "endpoints": [{"port": PORT_NAME, "path": "/metrics", "interval": "30s"}],
        },
    }


def record_configmap() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(DIAG_CONFIGMAP, labels=DIAG_LABELS),
            "data": {"record.py": DIAG_SCRIPT.read_text()}}


def diag_command(level: int, results: str = "/results") -> list[str]:
    """The DCGM container: nv-hostengine in the pod, then dcgmi diag; its exit status lands in
    /results/rc, and the container itself always succeeds, so the recorder always runs."""
    script = (
        "cd /tmp; "
        "if ! nv-hostengine --pid /tmp/nv-hostengine.pid --log-filename /tmp/nv-hostengine.log; then "
        f"echo hostengine > {results}/rc; cat /tmp/nv-hostengine.log >&2; exit 0; fi; "
        "sleep 2; "
        f"dcgmi diag -r {level} -j > {results}/diag.json 2> {results}/diag.err; echo $? > {results}/rc; "
        "nv-hostengine --term --pid /tmp/nv-hostengine.pid || true"
    )
    return ["/bin/sh", "-c", script]


def _short(prefix: str, node: str, most: int = 52) -> str:
    """`prefix-node`, within a CronJob name's 52 characters (a hash keeps long names apart)."""
    name = f"{prefix}-{node}"
    if len(name) <= most:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    return f"{name[:most - 9].rstrip('-.')}-{digest}"


def diag_cronjob(node: str, gpus: int, level: int, args: GpuHealthArgs, *, on_demand: bool = False) -> dict[str, Any]:
    d = args.health.diagnostic
    name = _short(f"{DIAG_NAME}-l2" if on_demand else DIAG_NAME, node)
    results = {"name": "results", "mountPath": "/results"}
    labels = {**DIAG_LABELS, "gpu-cluster.io/diag-level": str(level)}
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": DIAG_NAME,
        "priorityClassName": IDLE_PRIORITY_CLASS,
        "securityContext": dict(_RESTRICTED_POD),
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]},
        ]}}},
        # A node the service took out is cordoned and carries its taint (whatever the effect): the
        # diagnostic that brings it back must still run there.
        "tolerations": [*gpu_tolerations(), {"key": TAINT_KEY, "operator": "Exists"},
                        {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "initContainers": [{
            "name": "dcgm-diag",
            "image": versions.DCGM_IMAGE,
            "command": diag_command(level),
            "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
            "resources": {"limits": {args.gpu_resource: gpus, "cpu": "2", "memory": "4Gi"},
                          "requests": {"cpu": "500m", "memory": "1Gi"}},
            # Root filesystem writable: DCGM's diagnostic writes its logs where it was built to.
            "securityContext": {**_RESTRICTED_CONTAINER, "readOnlyRootFilesystem": False},
            "volumeMounts": [results, {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "containers": [{
            "name": "record",
            "image": args.image,
            "command": ["python", "/record/record.py", "--results", "/results", "--level", str(level),
                        "--valid-hours", str(d.valid_hours)],
            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "resources": {"limits": {"cpu": "200m", "memory": "128Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}},
            "securityContext": dict(_RESTRICTED_CONTAINER),
            "volumeMounts": [{**results, "readOnly": True}, {"name": "record", "mountPath": "/record", "readOnly": True}],
        }],
        "volumes": [
            {"name": "results", "emptyDir": {"sizeLimit": "16Mi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
            {"name": "record", "configMap": {"name": DIAG_CONFIGMAP}},
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {**_meta(name, labels=labels), "annotations": {"gpu-cluster.io/node": node}},
        "spec": {
            "schedule": d.schedule,
            "timeZone": "Etc/UTC",
            "suspend": on_demand,  # level 2: only Jobs created from it by hand (kubectl create job --from)
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 3600,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    "backoffLimit": 0,  # a failed run waits for the next schedule
                    # Waiting for the node's GPUs to be free counts too.
                    "activeDeadlineSeconds": d.timeout_minutes * 60,
                    "ttlSecondsAfterFinished": 7 * 86400,
                    "template": {"metadata": {"labels": labels}, "spec": pod},
                },
            },
        },
    }


def idle_priority_class() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": _meta(IDLE_PRIORITY_CLASS, None),
        "value": IDLE_PRIORITY, "preemptionPolicy": "Never", "globalDefault": False,
        "description": "gpu-cluster health checks: run on idle GPUs only, preempted by any workload that needs them",
    }


def manifests(args: GpuHealthArgs) -> list[dict[str, Any]]:
    """Every object but the Namespace, in the order they are created."""
    objs = [
        idle_priority_class(),
        service_account(NAME),
        cluster_role(NAME, [dict(r) for r in SERVICE_RULES]),
        cluster_role_binding(NAME),
        deployment(args),
        service(),
        *network_policies(NAMESPACE, LABELS, PORT, LABELS),
    ]
    if args.service_monitor:
        objs.append(service_monitor())
    if args.diag_nodes:
        objs += [service_account(DIAG_NAME), cluster_role(DIAG_NAME, diag_rules(list(args.diag_nodes))),
                 cluster_role_binding(DIAG_NAME), record_configmap()]
        for node, gpus in sorted(args.diag_nodes.items()):
            objs.append(diag_cronjob(node, gpus, args.health.diagnostic.level, args))
            if args.health.diagnostic.level < 2:
                objs.append(diag_cronjob(node, gpus, 2, args, on_demand=True))
    return objs


def level2_command(node: str) -> str:
    name = _short(f"{DIAG_NAME}-l2", node)
    return f"kubectl -n {NAMESPACE} create job --from=cronjob/{name} {name[:40]}-$(date +%s)"


def typed_resource(name: str, body: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """The typed Pulumi resource for a manifest of this module's (and gpu_health_pairs.py's) kinds;
    anything else as a custom resource (the ServiceMonitor)."""
    kind, meta = body["kind"], body["metadata"]
    if kind == "ServiceAccount":
        return k8s.core.v1.ServiceAccount(name, metadata=meta, opts=opts)
    if kind == "ClusterRole":
        return k8s.rbac.v1.ClusterRole(name, metadata=meta, rules=body["rules"], opts=opts)
    if kind == "ClusterRoleBinding":
        return k8s.rbac.v1.ClusterRoleBinding(name, metadata=meta, role_ref=body["roleRef"],
                                              subjects=body["subjects"], opts=opts)
    if registers_like_typed(body):  # Deployment, NetworkPolicy, CronJob
        return manifest_resource(name, body, opts)
    if kind == "Service":
        return k8s.core.v1.Service(name, metadata=meta, spec=body["spec"], opts=opts)
    if kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=meta, data=body["data"], opts=opts)
    if kind == "PriorityClass":
        return k8s.scheduling.v1.PriorityClass(name, metadata=meta, value=body["value"], description=body["description"],
                                               preemption_policy=body["preemptionPolicy"],
                                               global_default=body["globalDefault"], opts=opts)
    return k8s.apiextensions.CustomResource(
        name, api_version=body["apiVersion"], kind=kind, metadata=meta, spec=body["spec"], opts=opts
    )


class GpuHealth(pulumi.ComponentResource):
    """The GPU health service, its rights, Service (and ServiceMonitor), and the diagnostic CronJobs."""

    def __init__(self, name: str, args: GpuHealthArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:health:GpuHealth", name, None, opts)
        if not args.image:
            raise ValueError("GpuHealth needs the workload image carrying gpuhealth (gpuHealth.image or training.image)")
        # Every pod here runs non-root, read-only, without capabilities: the strictest level.
        ns = pod_security_namespace(f"{name}-ns", NAMESPACE, "restricted", pulumi.ResourceOptions(parent=self))
        token = (args.webhook_token if args.webhook_token is not None
                 else webhook_token(f"{name}-webhook-token", pulumi.ResourceOptions(parent=self)))
        secret = token_secret(f"{name}-webhook-token", NAMESPACE, token,
                              pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        created: dict[tuple[str, str], pulumi.Resource] = {}
        for body in manifests(args):
            kind, obj_name = body["kind"], body["metadata"]["name"]
            after: list[pulumi.Resource] = [ns]
            if kind in ("Deployment", "CronJob"):  # their ServiceAccount, rights, script and priority first
                after += [r for (k, _), r in created.items()
                          if k in ("ServiceAccount", "ClusterRoleBinding", "ConfigMap", "PriorityClass")]
            if kind == "Deployment":
                after.append(secret)  # the webhook token it mounts
            resource_name = f"{name}-{kind.lower()}-{obj_name}"
            created[(kind, obj_name)] = typed_resource(resource_name, body,
                                                  pulumi.ResourceOptions(parent=self, depends_on=after))
        self.priority_class = created[("PriorityClass", IDLE_PRIORITY_CLASS)]
        self.webhook_url = WEBHOOK_URL
        self.register_outputs({"namespace": NAMESPACE, "webhookUrl": WEBHOOK_URL, "dryRun": args.health.dry_run})
