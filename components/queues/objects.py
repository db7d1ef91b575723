"""Kueue's objects and each team's namespace objects, as pure manifests (config/queues.py says
what the config means; components/queues/__init__.py registers them).

* ResourceFlavor per GPU kind (lab: per GPU model): its node labels (Kueue adds them to an admitted
  pod's nodeSelector), the GPU taints' tolerations (added to admitted pods, so a team's job need
  not know them) and, with topology levels, the Topology it places pods on.
* Topology: the levels of config/queue_flavors.py (lab block -> rack -> hostname; gke Google's
  block -> sub-block -> host -> hostname), top first.
* ClusterQueue per team, in the cohort: one resource group covering the GPU resource, cpu and
  memory in every flavor; nominal quota from config, a GPU borrowing limit; only the team's own
  namespace may point a LocalQueue at it. Preemption: a team reclaims its nominal quota from
  borrowers (reclaimWithinCohort Any) and, inside its queue, a higher WorkloadPriorityClass
  preempts a lower one.
* The program's own ClusterQueue `gpu-cluster`, in the same cohort whenever queues are on: nominal
  GPUs what the teams' quotas leave of each flavor (the cohort then holds the GPUs the cluster has,
  no more, and a team borrows those the program does not use), borrowing the rest of its largest job
  (components/queues/requests.py) from quota the teams leave unused; CPU and memory sized to that
  job (none without one). Its LocalQueue (training namespace) only where a program job runs.
* WorkloadPriorityClasses: training above batch.
* Per team: a Namespace (Pod Security baseline, as the training namespace: GPU images usually run
  as root), default deny with DNS egress and the namespace's pods talking to each other (a
  multi-node job's rendezvous and NCCL), a Role (batch Jobs and PyTorchJobs: create, get, list,
  watch, delete; Kueue Workloads and LocalQueues, the pods and their logs, and the pending workloads
  of its LocalQueues through Kueue's visibility API: read) bound to the team's group in its
  namespace only, and its LocalQueue.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from components.namespaces import PodSecurityLevel
from components.training import network_policy
from config.queue_flavors import capped_gpus
from config.queues import (
    BATCH_PRIORITY_CLASS,
    PROGRAM_PRIORITY_CLASS,
    PROGRAM_QUEUE,
    Flavor,
    QueuePriority,
    QueuesConfig,
    Team,
)
from config.scheduling_contract import gpu_tolerations

KUEUE_API = "kueue.x-k8s.io/v1beta2"
TEAM_POD_SECURITY: PodSecurityLevel = "baseline"
# WorkloadPriorityClass name -> value: training preempts batch inside a ClusterQueue.
PRIORITY_CLASSES = {PROGRAM_PRIORITY_CLASS: 1000, BATCH_PRIORITY_CLASS: 100}
PRIORITY_CLASS = {QueuePriority.TRAINING: PROGRAM_PRIORITY_CLASS, QueuePriority.BATCH: BATCH_PRIORITY_CLASS}
TEAM_ROLE = "gpu-cluster-team"
JOB_VERBS = ["create", "get", "list", "watch", "delete"]
READ_VERBS = ["get", "list", "watch"]
NAME_LABEL = "kubernetes.io/metadata.name"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"


def quantity(value: Decimal) -> str:
    """A Decimal as a Kubernetes quantity: bytes in Gi or Mi where whole, else as they are;
    fractions of a core in m."""
    if value == value.to_integral_value():
        for suffix, unit in (("Gi", 2**30), ("Mi", 2**20)):
            if value >= unit and value % unit == 0:
                return f"{int(value // unit)}{suffix}"
        return str(int(value))
    return f"{int((value * 1000).to_integral_value(rounding='ROUND_CEILING'))}m"


def resource_flavor(f: Flavor) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": dict(f.node_labels), "tolerations": gpu_tolerations()}
    if f.topology is not None:
        spec["topologyName"] = f.topology[0]  # topology-aware scheduling over these nodes
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": f.name}, "spec": spec}


def topology(name: str, levels: tuple[str, ...]) -> dict[str, Any]:
    """A Kueue Topology: node-label levels, top first (kubernetes.io/hostname only ever last)."""
    return {"apiVersion": KUEUE_API, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in levels]}}


def _only_namespace(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {NAME_LABEL: namespace}}


def cluster_queue(name: str, namespace: str, cohort: str, gpu_resource: str, flavors: tuple[Flavor, ...],
                  gpus: Callable[[Flavor], int], cpu: str, memory: str,
                  borrowing_limit_gpus: int | None) -> dict[str, Any]:
    """One ClusterQueue: `gpus(flavor)` nominal GPUs in each flavor, `cpu` and `memory` in each."""
    def gpu(f: Flavor) -> dict[str, Any]:
        out: dict[str, Any] = {"name": gpu_resource, "nominalQuota": str(gpus(f))}
        if borrowing_limit_gpus is not None:
            out["borrowingLimit"] = str(borrowing_limit_gpus)
        return out

    return {
        "apiVersion": KUEUE_API, "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": _only_namespace(namespace),
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{
                "coveredResources": [gpu_resource, "cpu", "memory"],
                "flavors": [
                    {"name": f.name, "resources": [
                        gpu(f), {"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory},
                    ]} for f in flavors
                ],
            }],
        },
    }


def team_cluster_queue(q: QueuesConfig, t: Team, gpu_resource: str, flavors: tuple[Flavor, ...]) -> dict[str, Any]:
    return cluster_queue(t.name, t.namespace, q.cohort, gpu_resource, flavors, lambda f: capped_gpus(t, f),
                         t.cpu, t.memory, t.borrowing_limit_gpus)


def program_cluster_queue(q: QueuesConfig, namespace: str, gpu_resource: str, flavors: tuple[Flavor, ...],
                          need: dict[str, Decimal]) -> dict[str, Any]:
    """The program's own queue. Its nominal GPUs in a flavor of known size are what the teams' nominal
    quotas leave of it, so the cohort holds exactly the GPUs the flavor has; the rest of its largest
    job (`need`) it borrows, unlimited, from quota the teams leave unused (they reclaim it by
    preemption). A flavor of unknown size (dev without gpuNodeGpus): the job's own GPUs."""
    need_gpus = int(need.get(gpu_resource, 0))

    def gpus(f: Flavor) -> int:
        if f.gpus is None:
            return need_gpus
        return max(0, f.gpus - sum(capped_gpus(t, f) for t in q.teams))

    return cluster_queue(PROGRAM_QUEUE, namespace, q.cohort, gpu_resource, flavors, gpus,
                         quantity(need.get("cpu", Decimal(1))), quantity(need.get("memory", Decimal(2**30))), None)


def local_queue(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": name}}


def priority_classes() -> list[dict[str, Any]]:
    return [{"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value,
             "description": f"gpu-cluster {name.removeprefix('gpu-cluster-')} jobs"}
            for name, value in PRIORITY_CLASSES.items()]


def _in_namespace(manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
    out = copy.deepcopy(manifest)
    out["metadata"]["namespace"] = namespace
    return out


def team_network_policies(namespace: str) -> list[dict[str, Any]]:
    """Default deny and DNS egress (the training namespace's, components/training/network_policy.py),
    and the namespace's pods to and from each other."""
    same_namespace: list[dict[str, Any]] = [{"podSelector": {}}]
    peers = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "same-namespace", "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [{"from": same_namespace}], "egress": [{"to": same_namespace}]},
    }
    return [_in_namespace(network_policy.default_deny(), namespace),
            _in_namespace(network_policy.allow_dns(), namespace), peers]


def team_role(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": TEAM_ROLE, "namespace": namespace},
        "rules": [
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": JOB_VERBS},
            {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": JOB_VERBS},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": READ_VERBS},
            {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": READ_VERBS},
            # Kueue's visibility API: the team's pending workloads in order (their position in the
            # queue), what the chart's own pending-workloads-lq-viewer ClusterRole grants, here only in
            # the team's namespace (kueue.VISIBILITY_API).
            {"apiGroups": [VISIBILITY_GROUP], "resources": ["localqueues/pendingworkloads"], "verbs": READ_VERBS},
        ],
    }


def team_role_binding(namespace: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": TEAM_ROLE, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TEAM_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }
