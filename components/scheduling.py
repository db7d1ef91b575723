"""Where this program's pods may run: the tolerations and node preferences every component uses
for the taints lab nodes carry (one place, so Helm values, typed manifests and the kustomize
training operator agree).

lab (components/lab/kubeadm.py) keeps kubeadm's node-role.kubernetes.io/control-plane:NoSchedule on
the control plane and taints GPU workers nvidia.com/gpu=present:NoSchedule (gpuTaint, default true),
so in the usual lab (one control plane, GPU workers) no node is untainted. Hence:

* Cluster add-ons (monitoring, NFD's garbage collector, the training operator; NFD master and the
  NFS CSI controller already tolerate it in their charts) tolerate the control-plane taint and
  prefer a node without GPUs, the control plane first: on lab the control plane is the only
  CPU-only node, and GPU nodes stay free for training. Prefer, not require: a cluster whose only
  node has a GPU (minikube, seed 000's all-GPU lab) must still run them.
* GPU node agents (device plugin, GPU Feature Discovery, NFD worker, DCGM exporter, the GPU
  Operator's operands) tolerate both taints: a node agent belongs on every GPU node, a control
  plane with a GPU (hosts[].gpus > 0) included.
* GPU pods (the ready gate, training and acceptance Jobs) tolerate both too. Their node affinity on
  the GPU label (set only on hosts with gpus > 0) keeps them off CPU-only nodes, so the
  control-plane toleration matters only where the config declares a GPU on a control-plane host,
  and there it must: the gate's completions and the training.nodes check count that GPU.
  Training pods prefer workers, so a run takes the control plane's GPU (whose host also runs the
  API server and etcd) only when it needs that node; the gate needs every GPU node anyway.

dev (minikube: one untainted node) and gke (no control-plane node; an untainted system pool) carry
no control-plane taint: there these tolerations change nothing.
"""

from __future__ import annotations

import copy
from typing import Any

# The label this program puts on GPU nodes (kubelet --node-labels on lab, a patch on dev); GKE
# accelerator nodes carry the second one instead.
GPU_NODE_LABEL = ("nvidia.com/gpu.present", "true")
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
CONTROL_PLANE_KEY = "node-role.kubernetes.io/control-plane"  # kubeadm's taint and label

# Exists (not Equal ""): kubeadm sets no value, and Exists also covers a value someone added.
CONTROL_PLANE_TOLERATION: dict[str, str] = {"key": CONTROL_PLANE_KEY, "operator": "Exists", "effect": "NoSchedule"}
# lab's gpuTaint and GKE's GPU node pools (nvidia.com/gpu=present:NoSchedule).
GPU_TOLERATION: dict[str, str] = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

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


def prefer_workers() -> list[dict[str, Any]]:
    """preferredDuringScheduling node-affinity terms of a training pod: a node that is not a control plane."""
    return [{"weight": 100, "preference": {"matchExpressions": [{"key": CONTROL_PLANE_KEY, "operator": "DoesNotExist"}]}}]


GPU_RESOURCE = "nvidia.com/gpu"


def gpu_resource(mig_mixed_profile: str | None) -> str:
    """The extended resource a GPU pod asks for: nvidia.com/gpu, or under the device plugin's
    mixed MIG strategy the slice type (nvidia.com/mig-<profile>), since GPUs partitioned under
    mixed are advertised only by their slice type."""
    if mig_mixed_profile:
        return f"nvidia.com/mig-{mig_mixed_profile.removeprefix('all-')}"
    return GPU_RESOURCE

