"""The GPU scheduling contract: which nodes are GPU nodes, what keeps other pods off them, what a
GPU pod asks for, and the labels that mark training pods and name them on metrics. Defined once
here; everything else imports it, so a node, the pods meant for it and the dashboards that watch
them cannot drift apart. Imports nothing of the project (the config model may import it).

Who honours it:

* GPU nodes carry GPU_NODE_LABEL (nvidia.com/gpu.present=true; GFD and the GPU Operator set the
  same one): lab through kubelet --node-labels (components/lab/kubeadm.py), dev through a node
  patch (components/dev/existing_cluster.py). GKE accelerator nodes carry GKE_ACCELERATOR_LABEL
  instead, which GKE sets; GPU_NODE_SELECTOR_TERMS admits either.
* GPU nodes carry GPU_TAINT (nvidia.com/gpu=present:NoSchedule): lab GPU workers through
  kubeadm's nodeRegistration (gpuTaint, default true), GKE GPU pools through the pool's taints in
  GKE's API spelling (components/gke/gpu_node_pool.py). lab control planes keep kubeadm's
  CONTROL_PLANE_TAINT.
* GPU node agents (this program's device plugin, GFD and the NFD worker, the DCGM exporter, the GPU
  Operator's operands: components/device_plugin.py, gpu_stack.py) and GPU pods (the ready gate,
  training and acceptance Jobs: components/ready_gate.py, training/job.py) select GPU nodes and
  tolerate both taints; GPU pods ask for GPU_RESOURCE, or a MIG slice type (gpu_resource). The
  GPU Operator's MIG manager partitions a node by MIG_CONFIG_LABEL.
* Training pods carry training_job_labels(job) (both launchers); their NetworkPolicy selects on
  them, and monitoring (components/monitoring/) groups GPU metrics by JOB_METRIC_LABEL, the job
  label as the DCGM exporter copies it onto metrics, and by node through METRICS_NODE_LABEL.

Why the tolerations and preferences are what they are: lab keeps kubeadm's
node-role.kubernetes.io/control-plane:NoSchedule on the control plane and taints GPU workers, so in
the usual lab (one control plane, GPU workers) no node is untainted. Hence:

* Cluster add-ons (monitoring, NFD's garbage collector, the training operator; NFD master and the
  NFS CSI controller already tolerate it in their charts) tolerate the control-plane taint and
  prefer a node without GPUs, the control plane first: on lab the control plane is the only
  CPU-only node, and GPU nodes stay free for training. Prefer, not require: a cluster whose only
  node has a GPU (minikube, seed 000's all-GPU lab) must still run them.
* GPU node agents tolerate both taints: a node agent belongs on every GPU node, a control plane
  with a GPU (hosts[].gpus > 0) included.
* GPU pods tolerate both too. Their node affinity on the GPU label (set only on hosts with
  gpus > 0) keeps them off CPU-only nodes, so the control-plane toleration matters only where the
  config declares a GPU on a control-plane host, and there it must: the gate's completions and the
  training.nodes check count that GPU. Training pods prefer workers, so a run takes the control
  plane's GPU (whose host also runs the API server and etcd) only when it needs that node; the
  gate needs every GPU node anyway.

dev (minikube: one untainted node) and gke (no control-plane node; an untainted system pool) carry
no control-plane taint: there these tolerations change nothing.

Does not define: the labels GFD and the GPU Operator set at run time.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

# ------------------------------------------------------------------------------------------------
# What a GPU pod asks for

GPU_RESOURCE = "nvidia.com/gpu"
# The device plugin's mixed MIG strategy advertises each slice type as its own resource.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def gpu_resource(mig_mixed_profile: str | None) -> str:
    """The extended resource a GPU pod asks for: nvidia.com/gpu, or under the device plugin's
    mixed MIG strategy the slice type (nvidia.com/mig-<profile>), since GPUs partitioned under
    mixed are advertised only by their slice type."""
    if mig_mixed_profile:
        return f"{MIG_RESOURCE_PREFIX}{mig_mixed_profile.removeprefix('all-')}"
    return GPU_RESOURCE


# ------------------------------------------------------------------------------------------------
# Which nodes are GPU nodes

GPU_NODE_LABEL = ("nvidia.com/gpu.present", "true")
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
# Required node affinity of GPU agents and GPU pods: either label.
GPU_NODE_SELECTOR_TERMS = [
    {"matchExpressions": [{"key": GPU_NODE_LABEL[0], "operator": "In", "values": [GPU_NODE_LABEL[1]]}]},
    {"matchExpressions": [{"key": GKE_ACCELERATOR_LABEL, "operator": "Exists"}]},
]
# NVIDIA's GPU Operator on GKE: this label keeps GKE's own device plugin DaemonSet off the node.
NO_GKE_DEVICE_PLUGIN_LABEL = "gke-no-default-nvidia-gpu-device-plugin"
# The GPU Operator's MIG manager partitions a node by this label (a profile of its mig-parted
# config, from gpu.sharing.migProfile); the ClusterPolicy CRD names it.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
# GKE GPU pools: the pool's name, and which driver-installer DaemonSet (if any) serves the node
# (components/gke/driver_installer.py selects on it).
GKE_POOL_LABEL = "gpu-cluster/pool"
GKE_DRIVER_LABEL = "gpu-cluster/gke-driver"
# Every label this program sets on a GKE GPU pool itself: a pool's own `labels` may not use them.
GKE_POOL_OWN_LABELS = (GKE_POOL_LABEL, GKE_DRIVER_LABEL, NO_GKE_DEVICE_PLUGIN_LABEL, MIG_CONFIG_LABEL)


# ------------------------------------------------------------------------------------------------
# Taints, and the tolerations that answer them

_GKE_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str  # "" for none
    effect: str  # Kubernetes' spelling (NoSchedule)

    def as_kubernetes(self) -> dict[str, str]:
        """As a Node's spec.taints and kubeadm's nodeRegistration.taints spell it."""
        if not self.value:
            return {"key": self.key, "effect": self.effect}
        return {"key": self.key, "value": self.value, "effect": self.effect}

    @property
    def gke_effect(self) -> str:
        """The effect as GKE's node pool API spells it (NO_SCHEDULE)."""
        return _GKE_EFFECTS[self.effect]

    def toleration(self) -> dict[str, str]:
        # Exists (not Equal): kubeadm sets no value, and Exists also covers a value someone changed.
        return {"key": self.key, "operator": "Exists", "effect": self.effect}


CONTROL_PLANE_KEY = "node-role.kubernetes.io/control-plane"  # kubeadm's taint and label
CONTROL_PLANE_TAINT = Taint(CONTROL_PLANE_KEY, "", "NoSchedule")
# GKE's own taint on GPU pools, keyed by the resource name; lab's gpuTaint copies it.
GPU_TAINT = Taint(GPU_RESOURCE, "present", "NoSchedule")

# GKE's taint on the nodes of a queued-provisioning (flex-start) pool (the label of the same key,
# value true, is the pool's own: components/gke/provisioning.py): only
# the pods Kueue admits there tolerate it (their flavor's, components/queues/provisioning.py), and
# the GPU node agents, which run on every GPU node.
GKE_QUEUED_TAINT = Taint("cloud.google.com/gke-queued", "true", "NoSchedule")

CONTROL_PLANE_TOLERATION = CONTROL_PLANE_TAINT.toleration()
GPU_TOLERATION = GPU_TAINT.toleration()

# Weights: a node without GPUs is what matters (GPU nodes stay free for training); among those
# the control plane, the node lab dedicates to the cluster's own services.
_ADDON_AFFINITY: dict[str, Any] = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": GPU_NODE_LABEL[0], "operator": "NotIn", "values": [GPU_NODE_LABEL[1]]},
                {"key": GKE_ACCELERATOR_LABEL, "operator": "DoesNotExist"},
            ]}},
            {"weight": 10, "preference": {"matchExpressions": [
                {"key": CONTROL_PLANE_KEY, "operator": "Exists"},
            ]}},
        ]
    }
}


def addon_tolerations() -> list[dict[str, str]]:
    """Tolerations of a cluster add-on (a fresh list: callers may extend it)."""
    return [dict(CONTROL_PLANE_TOLERATION)]


def addon_affinity() -> dict[str, Any]:
    """Affinity of a cluster add-on: prefer a node without GPUs, the control plane first."""
    return copy.deepcopy(_ADDON_AFFINITY)


def gpu_tolerations() -> list[dict[str, str]]:
    """Tolerations of a GPU node agent or GPU pod: GPU nodes, a control plane with a GPU included."""
    return [dict(GPU_TOLERATION), dict(CONTROL_PLANE_TOLERATION)]


def gpu_agent_tolerations(gke: bool) -> list[dict[str, str]]:
    """Tolerations of a GPU node agent (a DaemonSet on every GPU node): gpu_tolerations(), and on gke
    GKE's queued-provisioning taint, so a flex-start pool's nodes get the agents too."""
    return [*gpu_tolerations(), *([GKE_QUEUED_TAINT.toleration()] if gke else [])]


def prefer_workers() -> list[dict[str, Any]]:
    """preferredDuringScheduling node-affinity terms of a training pod: a node that is not a control plane."""
    return [{"weight": 100, "preference": {"matchExpressions": [{"key": CONTROL_PLANE_KEY, "operator": "DoesNotExist"}]}}]


# ------------------------------------------------------------------------------------------------
# Where the nodes stand and which GPU they carry: Kueue's topology levels and GPU flavors

# hosts[].rack as a node label (lab): the level of Kueue's Topology that jobs over RDMA require.
RACK_LABEL = "gpu-cluster.io/rack"
# hosts[].block (lab): the Topology's level above the rack.
BLOCK_LABEL = "gpu-cluster.io/block"
# hosts[].gpuModel (lab): what a GPU model's ResourceFlavor selects (config/queue_flavors.py).
GPU_MODEL_LABEL = "gpu-cluster.io/gpu-model"
# GKE's own topology labels, top first (Google, "Schedule GKE workloads with Topology Aware
# Scheduling", cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas): the
# reserved block, its sub-block, the physical host. GKE writes them itself, on some capacity only
# (docs/queues.md, "Topology").
GKE_BLOCK_LABEL = "cloud.google.com/gce-topology-block"
GKE_SUBBLOCK_LABEL = "cloud.google.com/gce-topology-subblock"
GKE_HOST_LABEL = "cloud.google.com/gce-topology-host"


# ------------------------------------------------------------------------------------------------
# Training pods, and their names on metrics

# Both launchers (indexed-job, pytorchjob) put it on every pod of a job, the job's name as value.
JOB_LABEL = "gpu-cluster.io/training-job"


def training_job_labels(job: str) -> dict[str, str]:
    """Labels every pod of training job `job` carries; its peers policy and Service select on them."""
    return {JOB_LABEL: job, "app.kubernetes.io/part-of": "gpu-cluster-training"}


def metric_label_name(name: str) -> str:
    """A Kubernetes label or resource name as exporters spell it on metrics (the DCGM exporter's pod
    labels under enablePodLabels, kube-state-metrics' `resource`): characters invalid in a
    Prometheus label name become '_'. A pod label reaches Prometheus unprefixed: it clashes with no
    target label (only namespace/pod/container do, hence exported_namespace/exported_pod)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


# The job label as it arrives on DCGM metrics: dashboards group GPUs by job on it.
JOB_METRIC_LABEL = metric_label_name(JOB_LABEL)
# The label the DCGM ServiceMonitors put the scraped pod's node name in (gpu_stack.py's
# relabelling); alerts join it with kube-state-metrics' own `node`.
METRICS_NODE_LABEL = "node"
