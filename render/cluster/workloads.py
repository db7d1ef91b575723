"""The pods each object will make: workload controllers, Jobs, PyTorchJobs, and what operators
create at run time from their custom resources (prometheus-operator: Prometheus and Alertmanager
StatefulSets; NVIDIA GPU Operator: the ClusterPolicy's DaemonSets).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from render.cluster.objects import Obj

# The GPU Operator's DaemonSets (ClusterPolicy controller, controllers/object_controls.go): each
# runs on nodes the operator labels nvidia.com/gpu.deploy.<component>=true, i.e. nodes NFD found
# an NVIDIA PCI device on, with spec.daemonsets.tolerations and priorityClassName. The driver and
# toolkit containers are privileged (they load modules and write host paths).
OPERATOR_COMPONENTS = {
    # ClusterPolicy spec field -> (deploy label component, DaemonSet name, enabled by default)
    "driver": ("driver", "nvidia-driver-daemonset", True),
    "toolkit": ("container-toolkit", "nvidia-container-toolkit-daemonset", True),
    "devicePlugin": ("device-plugin", "nvidia-device-plugin-daemonset", True),
    "dcgmExporter": ("dcgm-exporter", "nvidia-dcgm-exporter", True),
    "gfd": ("gpu-feature-discovery", "gpu-feature-discovery", True),
    "migManager": ("mig-manager", "nvidia-mig-manager", True),
    "validator": ("operator-validator", "nvidia-operator-validator", True),
}


@dataclass
class Workload:
    kind: str
    namespace: str
    name: str
    obj: Obj
    spec: dict[str, Any]  # pod spec
    metadata: dict[str, Any]  # pod template metadata
    pods: int  # pods that must run at the same time (replicas, Job parallelism, PyTorchJob replicas)
    daemon: bool = False
    job: bool = False
    runs_on_install: bool = True  # CronJobs only run on their schedule
    via: str = ""  # "from ClusterPolicy cluster-policy" for operator-made pods
    device_plugin: bool = False
    labels_nodes: dict[str, str] | None = None  # node labels this DaemonSet sets where it runs
    # extended resources this DaemonSet (a device plugin other than NVIDIA's) advertises where it runs
    advertises: dict[str, float] | None = None

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _images(spec: dict[str, Any]) -> list[str]:
    return [str(c.get("image", "")) for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]]


def _node_labeller(name: str, spec: dict[str, Any]) -> tuple[bool, dict[str, str] | None]:
    """(is a GPU device plugin, labels it puts on the nodes it runs on)."""
    images = " ".join(_images(spec))
    if "node-feature-discovery" in images and "worker" in name:
        return False, {"feature.node.kubernetes.io/pci-10de.present": "true"}
    if "feature-discovery" in name and ("k8s-device-plugin" in images or "gpu-feature-discovery" in images):
        return False, {"nvidia.com/gpu.present": "true"}
    if "k8s-device-plugin" in images and "feature-discovery" not in name and "mps" not in name:
        return True, None
    return False, None


RDMA_SHARED_DEVICE_PLUGIN = "k8s-rdma-shared-dev-plugin"
RDMA_SHARED_CONFIG = "config.json"


def _rdma_shared_resources(o: Obj, spec: dict[str, Any], objects: list[Obj]) -> dict[str, float] | None:
    """What the RDMA shared device plugin advertises per node: each configList entry's
    `<resourcePrefix, default "rdma">/<resourceName>`, rdmaHcaMax of it, from the ConfigMap its
    config volume mounts (k8s-rdma-shared-dev-plugin README, "RDMA Shared Device Plugin
    Configurations"). None when the DaemonSet is not that plugin."""
    if not any(RDMA_SHARED_DEVICE_PLUGIN in image for image in _images(spec)):
        return None
    maps = {v["configMap"]["name"] for v in spec.get("volumes") or [] if (v.get("configMap") or {}).get("name")}
    out: dict[str, float] = {}
    for cm in objects:
        if cm.kind != "ConfigMap" or cm.name not in maps or (cm.namespace or "default") != (o.namespace or "default"):
            continue
        text = (cm.body.get("data") or {}).get(RDMA_SHARED_CONFIG)
        if not isinstance(text, str):
            continue
        for entry in json.loads(text).get("configList") or []:
            out[f"{entry.get('resourcePrefix') or 'rdma'}/{entry['resourceName']}"] = float(entry.get("rdmaHcaMax", 0))
    return out


def _template_workload(o: Obj, template: dict[str, Any], pods: int, **kw: Any) -> Workload:
    spec = template.get("spec") or {}
    return Workload(o.kind, o.namespace or "default", o.name, o, spec, template.get("metadata") or {}, pods, **kw)


def _prometheus_pod(o: Obj, container: str) -> Workload:
    spec = o.body.get("spec") or {}
    sa = spec.get("serviceAccountName", "default")
    pod: dict[str, Any] = {
        "serviceAccountName": sa,
        "nodeSelector": spec.get("nodeSelector") or {},
        "tolerations": spec.get("tolerations") or [],
        "affinity": spec.get("affinity") or {},
        "securityContext": spec.get("securityContext") or {},
        "containers": [{"name": container, "image": spec.get("image", container),
                        "resources": spec.get("resources") or {},
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}}],
        "priorityClassName": spec.get("priorityClassName"),
    }
    replicas = int(spec.get("replicas", 1) or 1)
    return Workload("StatefulSet", o.namespace or "default", f"{container}-{o.name}", o, pod, {}, replicas,
                    via=f"{o.kind} {o.name}")


def _cluster_policy(o: Obj) -> list[Workload]:
    spec = o.body.get("spec") or {}
    daemonsets = spec.get("daemonsets") or {}
    out = []
    for field, (component, ds_name, default) in OPERATOR_COMPONENTS.items():
        block = spec.get(field) or {}
        if not block.get("enabled", default):
            continue
        if field == "migManager" and (spec.get("mig") or {}).get("strategy") is None:
            continue
        privileged = field in ("driver", "toolkit", "validator", "migManager", "dcgmExporter")
        pod = {
            "nodeSelector": {f"nvidia.com/gpu.deploy.{component}": "true"},
            "tolerations": daemonsets.get("tolerations") or [],
            "priorityClassName": daemonsets.get("priorityClassName"),
            "serviceAccountName": ds_name.replace("-daemonset", ""),
            "containers": [{"name": component, "image": f"{block.get('repository', 'nvcr.io/nvidia')}/{block.get('image', component)}",
                            "securityContext": {"privileged": privileged}}],
        }
        out.append(Workload("DaemonSet", "gpu-operator", ds_name, o, pod, {}, 1, daemon=True,
                            via=f"ClusterPolicy {o.name}", device_plugin=field == "devicePlugin"))
    return out


def _job_pods(spec: dict[str, Any]) -> int:
    """Pods of a Job spec that run at once: parallelism (default 1), at most completions."""
    parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
    completions = spec.get("completions")
    return min(parallelism, int(completions)) if completions is not None else parallelism


def workloads(objects: list[Obj]) -> list[Workload]:
    out: list[Workload] = []
    for o in objects:
        spec = o.body.get("spec") or {}
        kind = o.kind
        if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
            replicas = spec.get("replicas", 1)
            out.append(_template_workload(o, spec.get("template") or {}, int(1 if replicas is None else replicas)))
        elif kind == "DaemonSet":
            template = spec.get("template") or {}
            plugin, labels = _node_labeller(o.name, template.get("spec") or {})
            out.append(_template_workload(o, template, 1, daemon=True, device_plugin=plugin, labels_nodes=labels,
                                          advertises=_rdma_shared_resources(o, template.get("spec") or {}, objects)))
        elif kind == "Job":
            out.append(_template_workload(o, spec.get("template") or {}, _job_pods(spec), job=True))
        elif kind == "CronJob":
            job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
            out.append(_template_workload(o, job_spec.get("template") or {}, _job_pods(job_spec), job=True,
                                          runs_on_install=False))
        elif kind == "Pod":
            out.append(Workload("Pod", o.namespace or "default", o.name, o, copy.deepcopy(spec),
                                o.body.get("metadata") or {}, 1))
        elif kind == "PyTorchJob":
            replicas = spec.get("pytorchReplicaSpecs") or {}
            for role in ("Master", "Worker"):
                rs = replicas.get(role)
                if rs:
                    w = _template_workload(o, rs.get("template") or {}, int(rs.get("replicas", 1)), job=True)
                    w.name = f"{o.name}-{role.lower()}"
                    w.kind = "PyTorchJob"
                    out.append(w)
        elif kind == "Prometheus" and o.api_version.startswith("monitoring.coreos.com/"):
            out.append(_prometheus_pod(o, "prometheus"))
        elif kind == "Alertmanager" and o.api_version.startswith("monitoring.coreos.com/"):
            out.append(_prometheus_pod(o, "alertmanager"))
        elif kind == "ClusterPolicy" and o.api_version.startswith("nvidia.com/"):
            out += _cluster_policy(o)
    return out
