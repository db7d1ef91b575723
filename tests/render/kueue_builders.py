"""Small Kueue worlds for the admission model's tests: Kueue objects as the API would receive them
(kueue.x-k8s.io/v1beta2, the pinned chart's storage version), Jobs and PyTorchJobs with the queue
label, and nodes of the check's node model with the GPUs their device plugin advertises."""

from __future__ import annotations

from typing import Any

from render.cluster import kueue_objects
from render.cluster.nodes import Node
from render.cluster.objects import Obj
from render.cluster.scheduling import Capacity

GPU = "nvidia.com/gpu"
API = "kueue.x-k8s.io/v1beta2"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


def obj(body: dict[str, Any], source: str = "urn:queues") -> Obj:
    return Obj(body, source, "plan")


def manager_config(frameworks: tuple[str, ...] = ("batch/job",), resources: str = "") -> Obj:
    text = ("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nintegrations:\n  frameworks: ["
            + ", ".join(frameworks) + "]\n" + resources)
    return obj({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
                "data": {kueue_objects.MANAGER_CONFIG_KEY: text}})


def flavor(name: str, labels: dict[str, str] | None = None, topology: str | None = None, **spec: Any) -> Obj:
    body_spec: dict[str, Any] = {"nodeLabels": labels or {}, **spec}
    if topology:
        body_spec["topologyName"] = topology
    return obj({"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": body_spec})


def quota(name: str, nominal: Any, borrowing: Any = None, lending: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "nominalQuota": nominal}
    if borrowing is not None:
        out["borrowingLimit"] = borrowing
    if lending is not None:
        out["lendingLimit"] = lending
    return out


def cluster_queue(name: str, flavors: list[tuple[str, list[dict[str, Any]]]], cohort: str | None = None,
                  covered: tuple[str, ...] = (GPU,), selector: Any = None, **spec: Any) -> Obj:
    body_spec: dict[str, Any] = {
        "namespaceSelector": {} if selector is None else selector,
        "resourceGroups": [{"coveredResources": list(covered),
                            "flavors": [{"name": f, "resources": rs} for f, rs in flavors]}],
        **spec,
    }
    if cohort:
        body_spec["cohortName"] = cohort
    return obj({"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": body_spec})


def local_queue(namespace: str, name: str, cq: str) -> Obj:
    return obj({"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": cq}})


def topology(name: str, *levels: str) -> Obj:
    return obj({"apiVersion": API, "kind": "Topology", "metadata": {"name": name},
                "spec": {"levels": [{"nodeLabel": level} for level in levels]}})


def namespace(name: str, **labels: str) -> Obj:
    return obj({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})


def pod_template(gpus: int, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations or {}},
            "spec": {"restartPolicy": "Never", "tolerations": [GPU_TOLERATION],
                     "containers": [{"name": "train", "image": "registry.example.com/t:1",
                                     "resources": {"limits": {GPU: gpus}}}], **spec}}


def job(name: str, pods: int, gpus: int = 1, queue: str | None = "team", namespace: str = "team-a",
        annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    labels = {kueue_objects.QUEUE_LABEL: queue} if queue else {}
    return obj({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed", "suspend": True,
                         "template": pod_template(gpus, annotations, **spec)}})


def pytorch_job(name: str, master_gpus: int, workers: int, queue: str = "team", namespace: str = "team-a") -> Obj:
    return obj({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": name, "namespace": namespace, "labels": {kueue_objects.QUEUE_LABEL: queue}},
                "spec": {"pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": pod_template(master_gpus)},
                    "Worker": {"replicas": workers, "template": pod_template(1)}}}})


def gpu_node(name: str, gpus: int, **labels: str) -> Node:
    """A GPU node as the check models it once the device plugin runs (it advertises the GPUs)."""
    return Node(name, "worker", {"kubernetes.io/hostname": name, **labels},
                [{"key": GPU, "value": "present", "effect": "NoSchedule"}], gpus=gpus, extended={GPU: float(gpus)})


def capacity(*nodes: Node) -> list[Capacity]:
    return [Capacity.of(n) for n in nodes]


def one_team(nominal: int = 2, *extra: Obj, flavor_labels: dict[str, str] | None = None) -> list[Obj]:
    """A team-a namespace whose LocalQueue `team` feeds ClusterQueue team-a with one GPU flavor."""
    return [manager_config(), namespace("team-a"), flavor("gpu", flavor_labels),
            cluster_queue("team-a", [("gpu", [quota(GPU, nominal)])]), local_queue("team-a", "team", "team-a"), *extra]
