"""Kueue itself: the pinned chart (components/versions.py) as a Helm Release `kueue` in namespace
`kueue-system` (Pod Security restricted: the chart's manager runs as non-root with every capability
dropped and the RuntimeDefault seccomp profile), its manager a cluster add-on (tolerates the
control-plane taint; the chart takes no affinity).

The manager's configuration (the chart's managerConfig.controllerManagerConfigYaml, Kueue's
config.kueue.x-k8s.io/v1beta2 Configuration: the chart's defaults, then these changes):
* integrations.frameworks: batch/job and kubeflow.org/pytorchjob only, the kinds this program and
  its teams submit (the chart's default also turns on pods, Deployments, StatefulSets, Ray, ...).
* managedJobsNamespaceSelector: only the training namespace and the teams' namespaces. Kueue's
  webhooks take this selector (failurePolicy Fail), so a Job elsewhere (the GPU-ready gate's, the
  health checks') never waits on Kueue's webhook; manageJobsWithoutQueueName stays off, so a Job
  without the queue label there is left alone (the dataset download, the NCCL pair checks).
* waitForPodsReady: all-or-nothing admission. An admitted workload whose pods are not all running
  within queues.waitForPodsReadyTimeoutMinutes is evicted and requeued, with exponential backoff
  (60 s doubling to an hour, requeued forever). (In v1beta2 the block's presence turns it on: the
  chart's own commented example has no `enable`.) blockAdmission is queues.blockAdmission, written
  out (Kueue's default is false): with it Kueue admits nothing, in any ClusterQueue, while any
  admitted workload's pods are not all ready (pkg/scheduler waitForPodsReadyIfNeeded asks the
  cache for every admitted workload), so one team's slow image pull or unplaceable pod holds every
  other team's admission for up to the timeout. Off by default: the cohort's nominal quota is the
  cluster's GPUs, topology flavors place a gang whole at admission and flex-start nodes come before
  admission, so two gangs are half placed only when capacity falls below quota (a tainted host, an
  autoscaler that cannot add nodes), and then the timeout evicts them. recoveryTimeout, the same minutes, bounds how long an admitted gang that lost a pod
  (the GPU health service tainted its node and evicted it) holds its other GPUs while the
  replacement pod is placed, pulls its image and starts: the same steps as a first start, so the
  same bound. After it the workload is evicted and requeued, never left with a pod Pending on the
  tainted host (kueue#9616). Kueue 0.19.2 defaults it to `timeout` and "0s" turns it off: written
  out so the whole-cluster check reads it (render/cluster/kueue_node_replacement.py).
* featureGates (the Configuration's map; the chart's controllerManager.featureGates, a
  --feature-gates flag, stays empty: Kueue refuses both at once): the topology-aware failed-node
  replacement, on by default in 0.19.2 (Beta since 0.14 / 0.17) and named here because defaults
  move between releases (TASReplaceNodeDueToNotReadyOverFixedTime turned off in 0.19).
  TASFailedNodeReplacement: a node that fails under an admitted TAS workload is replaced by another
  of the same topology domain; TASReplaceNodeOnNodeTaints: a NoSchedule/NoExecute taint the pods do
  not tolerate counts as a failure (the GPU health taint); TASReplaceNodeOnPodTermination: once
  the pod on it is gone; TASFailedNodeReplacementFailFast: no replacement at the first try evicts
  and requeues the workload at once instead of waiting for recoveryTimeout.
* featureGates VisibilityOnDemand: Kueue's visibility API (pending workloads per LocalQueue and
  ClusterQueue, in admission order), served by the manager itself behind the chart's APIServices
  v1beta1/v1beta2.visibility.kueue.x-k8s.io (rendered whatever the values; their Service is the
  chart's visibility-server). On by default since 0.9, named here for the same reason as the gates
  above; each team's Role lets its group read its own LocalQueues' (components/queues/objects.py).
* resources.excludeResourcePrefixes: the RDMA device resource (`rdma/...`): one per node from the
  RDMA device plugin, which no ClusterQueue covers; a workload asking for an uncovered resource
  would never be admitted.
* metrics.enableClusterQueueResources: on, so Kueue exports each ClusterQueue's quota and usage per
  flavor and resource (the dashboard's "GPU quota used"; off by default, and the chart only has it
  commented out).
* metrics: with monitoring, the chart's ServiceMonitor (enablePrometheus) in kueue-system, scraped
  over HTTPS with Prometheus' own ServiceAccount token (kube-prometheus-stack's Prometheus role may
  get /metrics); the chart's prometheus-k8s RoleBinding names kube-prometheus' accounts, which do
  not exist here and grant nothing.
"""

from __future__ import annotations

from typing import Any

import yaml

from components import versions
from components.rdma_network import RDMA_RESOURCE_PREFIX
from config.scheduling_contract import addon_tolerations

NAMESPACE = "kueue-system"
RELEASE_NAME = "kueue"
FRAMEWORKS = ("batch/job", "kubeflow.org/pytorchjob")
REQUEUE_BACKOFF_BASE_SECONDS = 60
REQUEUE_BACKOFF_MAX_SECONDS = 3600
# Kueue 0.19.2's topology-aware failed-node replacement (pkg/features/kube_features.go), all on.
NODE_REPLACEMENT_GATES = ("TopologyAwareScheduling", "TASFailedNodeReplacement", "TASReplaceNodeOnNodeTaints",
                          "TASReplaceNodeOnPodTermination", "TASFailedNodeReplacementFailFast")
# The visibility API server in the manager (Beta, on by default since 0.9), which the chart's APIServices
# v1beta1 and v1beta2.visibility.kueue.x-k8s.io point at: the teams read their pending workloads there.
VISIBILITY_GATE = "VisibilityOnDemand"
VISIBILITY_API = "visibility.kueue.x-k8s.io/v1beta1"


def manager_config(timeout_minutes: int, managed_namespaces: list[str], block_admission: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        # Kueue exports kueue_cluster_queue_resource_usage and _nominal_quota (the dashboard's "GPU quota
        # used") only with this on (pkg/controller/core: WithReportResourceMetrics(cfg.Metrics.EnableClusterQueueResources)).
        "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1,
        }},
        "clientConnection": {"qps": 300, "burst": 500},
        "managedJobsNamespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(managed_namespaces)},
        ]},
        "waitForPodsReady": {
            "timeout": f"{timeout_minutes}m",
            "recoveryTimeout": f"{timeout_minutes}m",
            "blockAdmission": block_admission,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": REQUEUE_BACKOFF_BASE_SECONDS,
                "backoffMaxSeconds": REQUEUE_BACKOFF_MAX_SECONDS,
            },
        },
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "resources": {"excludeResourcePrefixes": [f"{RDMA_RESOURCE_PREFIX}/"]},
        "featureGates": dict.fromkeys((*NODE_REPLACEMENT_GATES, VISIBILITY_GATE), True),
    }


def kueue_values(timeout_minutes: int, managed_namespaces: list[str], metrics: bool,
                 block_admission: bool = False) -> dict[str, Any]:
    return {
        "enablePrometheus": metrics,
        "controllerManager": {
            "manager": {"image": {"repository": versions.KUEUE_IMAGE_REPOSITORY, "tag": versions.KUEUE_IMAGE_TAG,
                                  "pullPolicy": "IfNotPresent"}},
            "tolerations": addon_tolerations(),
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(
            manager_config(timeout_minutes, managed_namespaces, block_admission), sort_keys=False)},
    }
