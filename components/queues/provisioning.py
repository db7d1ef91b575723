"""GKE queued provisioning (flex-start, Dynamic Workload Scheduler) in Kueue: for a stack with a
flexStart pool (config/gke_provisioning.py), the objects Kueue's provisioning admission check
needs, as pure manifests (components/queues/__init__.py registers them).

* ProvisioningRequestConfig `gke-queued-provisioning`: provisioningClassName
  queued-provisioning.gke.io, managedResources the GPU resource (a pod set asking for no GPU needs
  no request: Kueue counts it ready), retryStrategy from queues.flexStartRetry, written out even at
  Kueue's defaults (config/gke_provisioning.py FlexStartRetry: after its last retry Kueue
  deactivates the workload).
* AdmissionCheck `gke-queued-provisioning`: controllerName kueue.x-k8s.io/provisioning-request,
  parameters that config. Kueue 0.19.2 runs this controller whenever the API server serves
  ProvisioningRequests (autoscaling.x-k8s.io, which GKE's cluster autoscaler installs): there is no
  feature gate or chart value to set (cmd/kueue/main.go), and the chart's ClusterRole already
  lets the manager create ProvisioningRequests.
* Every ClusterQueue with a flex-start flavor runs the check on that flavor only
  (admissionChecksStrategy onFlavors): a workload admitted to an on-demand flavor starts at once,
  one admitted to the flex-start flavor waits with its quota reserved until GKE has created all its
  nodes, then its pods are ungated onto them.
* A flex-start flavor tolerates GKE's cloud.google.com/gke-queued NoSchedule taint (Kueue adds a
  flavor's tolerations to the pods it admits there), so only admitted pods land on those nodes.

The GKE guide to flex-start with queued provisioning shows the same three objects for Kueue.
"""

from __future__ import annotations

import copy
from typing import Any

from components.queues.objects import KUEUE_API
from config.gke_provisioning import FlexStartRetry, is_queued_flavor
from config.queues import Flavor
from config.scheduling_contract import GKE_QUEUED_TAINT

CHECK_NAME = "gke-queued-provisioning"
PROVISIONING_CLASS = "queued-provisioning.gke.io"
CONTROLLER = "kueue.x-k8s.io/provisioning-request"


def queued_flavors(flavors: tuple[Flavor, ...]) -> list[str]:
    return [f.name for f in flavors if is_queued_flavor(f.node_labels)]


def provisioning_objects(flavors: tuple[Flavor, ...], gpu_resource: str,
                         retry: FlexStartRetry | None = None) -> list[dict[str, Any]]:
    """The ProvisioningRequestConfig and its AdmissionCheck; none without a flex-start flavor."""
    if not queued_flavors(flavors):
        return []
    return [
        {"apiVersion": KUEUE_API, "kind": "ProvisioningRequestConfig", "metadata": {"name": CHECK_NAME},
         "spec": {"provisioningClassName": PROVISIONING_CLASS, "managedResources": [gpu_resource],
                  "retryStrategy": (retry or FlexStartRetry()).retry_strategy()}},
        {"apiVersion": KUEUE_API, "kind": "AdmissionCheck", "metadata": {"name": CHECK_NAME},
         "spec": {"controllerName": CONTROLLER,
                  "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                 "name": CHECK_NAME}}},
    ]


def with_admission_check(cluster_queue: dict[str, Any], flavors: tuple[Flavor, ...]) -> dict[str, Any]:
    """The ClusterQueue with the provisioning check on those of its flavors that are flex-start."""
    named = {f["name"] for g in cluster_queue["spec"]["resourceGroups"] for f in g["flavors"]}
    on = [name for name in queued_flavors(flavors) if name in named]
    if not on:
        return cluster_queue
    out = copy.deepcopy(cluster_queue)
    out["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK_NAME, "onFlavors": on}]}
    return out


def tolerating_queued_nodes(resource_flavor: dict[str, Any]) -> dict[str, Any]:
    """A flex-start ResourceFlavor also tolerates GKE's taint on queued-provisioning nodes."""
    if not is_queued_flavor(resource_flavor["spec"].get("nodeLabels") or {}):
        return resource_flavor
    out = copy.deepcopy(resource_flavor)
    out["spec"]["tolerations"] = [*out["spec"].get("tolerations", []), GKE_QUEUED_TAINT.toleration()]
    return out
