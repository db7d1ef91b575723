"""Kueue's objects in a plan, read as Kueue's controller reads them (the release MODELLED_VERSION names):
ResourceFlavors, ClusterQueues, LocalQueues, Topologies, the manager's Configuration, and the
workloads that ask for a queue.

- A workload is queued when it carries the label kueue.x-k8s.io/queue-name (Kueue's
  manageJobsWithoutQueueName is off by default): a batch/v1 Job (one pod set of parallelism pods,
  at most completions), a CronJob's jobTemplate (each Job it makes), a kubeflow.org PyTorchJob (one
  pod set per replica type: Master, Worker). Requests per pod are the scheduler's (containers
  summed, init containers' maximum, overhead; limits where requests are unset), as Kueue computes
  them (pkg/workload/resources.go), every resource name included (ephemeral-storage, hugepages-*),
  where the scheduler model keeps only CPU, memory and extended resources.
- ClusterQueue spec in both served versions: v1beta1 `cohort`, v1beta2 `cohortName`.
- Namespaces get the label kubernetes.io/metadata.name the API server sets, so a ClusterQueue's
  namespaceSelector can match it.
- The Configuration is the controller_manager_config.yaml of the chart's manager ConfigMap:
  integrations.frameworks (which kinds Kueue manages at all) and resources.excludeResourcePrefixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from render.cluster.objects import Obj
from render.cluster.scheduling import pod_requests, quantity
from render.cluster.workloads import _job_pods

# The Kueue release whose sources and docs every kueue_*.py model here follows, declared once.
# tests/render/test_model_versions.py fails when components/versions.py pins another release, until
# the models are re-checked against that release and this is updated.
MODELLED_VERSION = "0.19.2"
GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Pod template annotations (Kueue docs, "Topology Aware Scheduling"): all pods of the pod set in one
# domain of that level, or as few domains as it can.
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
MANAGER_CONFIG_KEY = "controller_manager_config.yaml"
# The integration each queued kind needs in integrations.frameworks.
FRAMEWORKS = {"Job": "batch/job", "CronJob": "batch/job", "PyTorchJob": "kubeflow.org/pytorchjob"}


@dataclass
class Quota:
    nominal: float
    borrowing_limit: float | None = None  # None: may borrow all the cohort lends
    lending_limit: float | None = None  # None: lends all its unused nominal quota


@dataclass
class ResourceGroup:
    covered: list[str]
    flavors: list[tuple[str, dict[str, Quota]]]  # in the order Kueue tries them


@dataclass
class ClusterQueue:
    name: str
    cohort: str | None
    groups: list[ResourceGroup]
    namespace_selector: dict[str, Any] | None  # None matches no namespace (Kueue's default)
    when_can_borrow: str = "MayStopSearch"
    stop_policy: str = "None"
    admission_checks: list[str] = field(default_factory=list)

    def group_of(self, resource: str) -> ResourceGroup | None:
        return next((g for g in self.groups if resource in g.covered), None)

    def quota(self, flavor: str, resource: str) -> Quota | None:
        for g in self.groups:
            for name, quotas in g.flavors:
                if name == flavor and resource in quotas:
                    return quotas[resource]
        return None


@dataclass
class ResourceFlavor:
    name: str
    node_labels: dict[str, str]
    node_taints: list[dict[str, str]]
    tolerations: list[dict[str, Any]]
    topology: str | None  # spec.topologyName: a TAS flavor


@dataclass
class PodSet:
    name: str
    count: int
    spec: dict[str, Any]  # the pod template's spec
    metadata: dict[str, Any]  # the pod template's metadata (topology annotations)
    per_pod: dict[str, float]  # requests of one pod

    @property
    def total(self) -> dict[str, float]:
        return {k: v * self.count for k, v in self.per_pod.items()}

    @property
    def required_topology(self) -> str | None:
        return (self.metadata.get("annotations") or {}).get(REQUIRED_TOPOLOGY)


@dataclass
class QueuedWorkload:
    obj: Obj
    queue: str
    pod_sets: list[PodSet]

    @property
    def namespace(self) -> str:
        return self.obj.namespace or "default"

    @property
    def ref(self) -> str:
        return f"{self.obj.kind} {self.namespace}/{self.obj.name}"


@dataclass
class KueueConfig:
    frameworks: list[str]
    exclude_prefixes: list[str]
    ignore_undeclared: bool  # resources.quotaCheckStrategy: IgnoreUndeclared
    # managedJobsNamespaceSelector (None: unset, every namespace): Kueue 0.19's job reconciler
    # (jobframework/reconciler.go) ignores a Job in any other namespace, queue-name label or not.
    managed_namespaces: dict[str, Any] | None = None


@dataclass
class KueueWorld:
    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, name) -> ClusterQueue
    local_stopped: set[tuple[str, str]] = field(default_factory=set)
    topologies: dict[str, list[str]] = field(default_factory=dict)  # name -> level node labels, top first
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    config: KueueConfig | None = None  # None: the plan installs no Kueue manager
    workloads: list[QueuedWorkload] = field(default_factory=list)

    def labels_of(self, namespace: str) -> dict[str, str]:
        return {**self.namespace_labels.get(namespace, {}), "kubernetes.io/metadata.name": namespace}


def _is_kueue(o: Obj, kind: str) -> bool:
    return o.kind == kind and o.api_version.startswith(f"{GROUP}/")


def _quota(r: dict[str, Any]) -> Quota:
    def opt(key: str) -> float | None:
        return quantity(r[key]) if r.get(key) is not None else None

    return Quota(quantity(r.get("nominalQuota", 0)), opt("borrowingLimit"), opt("lendingLimit"))


def _cluster_queue(o: Obj) -> ClusterQueue:
    spec = o.body.get("spec") or {}
    groups = [
        ResourceGroup([str(r) for r in g.get("coveredResources") or []],
                      [(str(f["name"]), {str(r["name"]): _quota(r) for r in f.get("resources") or []})
                       for f in g.get("flavors") or []])
        for g in spec.get("resourceGroups") or []
    ]
    fungibility = spec.get("flavorFungibility") or {}
    borrow = str(fungibility.get("whenCanBorrow", "MayStopSearch"))
    return ClusterQueue(
        o.name, spec.get("cohortName") or spec.get("cohort") or None, groups, spec.get("namespaceSelector"),
        "MayStopSearch" if borrow == "Borrow" else borrow,  # Borrow: the deprecated name of MayStopSearch
        str(spec.get("stopPolicy") or "None"),
        [str(c) for c in spec.get("admissionChecks") or []]
        + [str(c.get("name")) for c in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []],
    )


def _flavor(o: Obj) -> ResourceFlavor:
    spec = o.body.get("spec") or {}
    return ResourceFlavor(o.name, {str(k): str(v) for k, v in (spec.get("nodeLabels") or {}).items()},
                          list(spec.get("nodeTaints") or []), list(spec.get("tolerations") or []),
                          spec.get("topologyName"))


def admitted_pod_spec(spec: dict[str, Any], flavors: list[ResourceFlavor]) -> dict[str, Any]:
    """The pod spec as Kueue starts the pods once it admits the pod set on `flavors`: each flavor's
    nodeLabels merged into the nodeSelector (the pod's own value kept on a shared key) and its
    tolerations appended, none twice (Kueue pkg/podset/podset.go: FromAssignment, then Merge)."""
    selector = dict(spec.get("nodeSelector") or {})
    tolerations = list(spec.get("tolerations") or [])
    for rf in flavors:
        selector = {**rf.node_labels, **selector}
        tolerations += [t for t in rf.tolerations if t not in tolerations]
    return {**spec, "nodeSelector": selector, "tolerations": tolerations}


def _pod_set(name: str, template: dict[str, Any], count: int) -> PodSet:
    spec = template.get("spec") or {}
    # Every resource name counts (pkg/resources: NewRequestsFromPodSpec takes component-helpers'
    # PodRequests whole), so ephemeral-storage or hugepages-2Mi a queue does not cover blocks admission.
    return PodSet(name, count, spec, template.get("metadata") or {}, pod_requests(spec, every_resource=True))


def _queued(o: Obj) -> QueuedWorkload | None:
    spec = o.body.get("spec") or {}
    labels = (o.body.get("metadata") or {}).get("labels") or {}
    if o.kind == "Job" and o.api_version == "batch/v1":
        pod_sets = [_pod_set("main", spec.get("template") or {}, _job_pods(spec))]
    elif o.kind == "CronJob" and o.api_version == "batch/v1":
        job = spec.get("jobTemplate") or {}
        labels = (job.get("metadata") or {}).get("labels") or {}
        pod_sets = [_pod_set("main", (job.get("spec") or {}).get("template") or {}, _job_pods(job.get("spec") or {}))]
    elif o.kind == "PyTorchJob" and o.api_version.startswith("kubeflow.org/"):
        replicas = spec.get("pytorchReplicaSpecs") or {}
        pod_sets = [_pod_set(role.lower(), rs.get("template") or {}, int(rs.get("replicas", 1)))
                    for role, rs in replicas.items() if rs]
    else:
        return None
    queue = labels.get(QUEUE_LABEL)
    return QueuedWorkload(o, str(queue), pod_sets) if queue else None


def _manager_config(o: Obj) -> KueueConfig | None:
    text = (o.body.get("data") or {}).get(MANAGER_CONFIG_KEY)
    if o.kind != "ConfigMap" or not isinstance(text, str):
        return None
    doc = yaml.safe_load(text) or {}
    if doc.get("kind") != "Configuration" or not str(doc.get("apiVersion", "")).startswith("config.kueue.x-k8s.io/"):
        return None
    resources = doc.get("resources") or {}
    return KueueConfig([str(f) for f in (doc.get("integrations") or {}).get("frameworks") or []],
                       [str(p) for p in resources.get("excludeResourcePrefixes") or []],
                       resources.get("quotaCheckStrategy") == "IgnoreUndeclared",
                       doc.get("managedJobsNamespaceSelector"))


def read(objects: list[Obj]) -> KueueWorld:
    world = KueueWorld()
    for o in objects:
        if _is_kueue(o, "ResourceFlavor"):
            world.flavors[o.name] = _flavor(o)
        elif _is_kueue(o, "ClusterQueue"):
            world.cluster_queues[o.name] = _cluster_queue(o)
        elif _is_kueue(o, "LocalQueue"):
            spec = o.body.get("spec") or {}
            key = (o.namespace or "default", o.name)
            world.local_queues[key] = str(spec.get("clusterQueue", ""))
            if str(spec.get("stopPolicy") or "None") != "None":
                world.local_stopped.add(key)
        elif _is_kueue(o, "Topology"):
            world.topologies[o.name] = [str(level.get("nodeLabel")) for level in (o.body.get("spec") or {}).get("levels") or []]
        elif o.kind == "Namespace" and o.api_version == "v1":
            world.namespace_labels[o.name] = dict((o.body.get("metadata") or {}).get("labels") or {})
        elif o.kind == "ConfigMap" and (config := _manager_config(o)) is not None:
            world.config = config
        elif (queued := _queued(o)) is not None:
            world.workloads.append(queued)
    return world
