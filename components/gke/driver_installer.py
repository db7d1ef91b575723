"""GkeDriverInstaller: Google's NVIDIA driver-installer DaemonSet (seed 001's step), as typed
Kubernetes resources, for GPU pools whose driver is installer-cos or installer-ubuntu.

Follows upstream's preloaded DaemonSets (container-engine-accelerators,
nvidia-driver-installer/{cos,ubuntu}/daemonset-preloaded.yaml; images pinned in versions.py) with
one change: it runs only on nodes of pools that chose this installer (the gpu-cluster/gke-driver
label GpuNodePool sets), besides upstream's own conditions, so a COS and an Ubuntu installer never
meet on one node. It stays in kube-system like upstream: GKE admits system-node-critical pods there.
The installer container is privileged because it builds and loads the NVIDIA kernel modules into
the host kernel; nothing less can do that.

Does not manage: the driver version (the installer image GKE preloads on each node image decides),
the device plugin (GKE's, or the GPU Operator's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from config.scheduling_contract import GKE_ACCELERATOR_LABEL, GKE_DRIVER_LABEL

NAMESPACE = "kube-system"
INSTALL_DIR_HOST = "/home/kubernetes/bin/nvidia"


@dataclass(frozen=True)
class GkeDriverInstallerArgs:
    os: Literal["cos", "ubuntu"]


def _cos_installer() -> dict[str, Any]:
    return {
        "image": versions.GKE_COS_DRIVER_INSTALLER_IMAGE,
        "imagePullPolicy": "Never",  # preloaded by GKE, matching the node's kernel
        "name": "nvidia-driver-installer",
        "resources": {"requests": {"cpu": "150m"}},
        "securityContext": {"privileged": True},
        "env": [
            {"name": "NVIDIA_INSTALL_DIR_HOST", "value": INSTALL_DIR_HOST},
            {"name": "NVIDIA_INSTALL_DIR_CONTAINER", "value": "/usr/local/nvidia"},
            {"name": "VULKAN_ICD_DIR_HOST", "value": f"{INSTALL_DIR_HOST}/vulkan/icd.d"},
            {"name": "VULKAN_ICD_DIR_CONTAINER", "value": "/etc/vulkan/icd.d"},
            {"name": "ROOT_MOUNT_DIR", "value": "/root"},
            {"name": "COS_TOOLS_DIR_HOST", "value": "/var/lib/cos-tools"},
            {"name": "COS_TOOLS_DIR_CONTAINER", "value": "/build/cos-tools"},
        ],
        "volumeMounts": [
            {"name": "nvidia-install-dir-host", "mountPath": "/usr/local/nvidia"},
            {"name": "vulkan-icd-mount", "mountPath": "/etc/vulkan/icd.d"},
            {"name": "dev", "mountPath": "/dev"},
            {"name": "root-mount", "mountPath": "/root"},
            {"name": "cos-tools", "mountPath": "/build/cos-tools"},
        ],
        "command": [
            "bash",
            "-c",
            'if lsmod | grep nvidia; then echo "GPU driver already loaded, skipping installation"; exit 0; fi\n'
            "/cos-gpu-installer install || exit 1\n",
        ],
    }


def _cos_partition() -> dict[str, Any]:
    return {
        "image": versions.GKE_PARTITION_GPU_IMAGE,
        "name": "partition-gpus",
        "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
        "resources": {"requests": {"cpu": "150m"}},
        "securityContext": {"privileged": True},  # creates MIG partitions through /dev/nvidia*
        "volumeMounts": [
            {"name": "nvidia-install-dir-host", "mountPath": "/usr/local/nvidia"},
            {"name": "dev", "mountPath": "/dev"},
            {"name": "nvidia-config", "mountPath": "/etc/nvidia"},
        ],
    }


def _ubuntu_installer() -> dict[str, Any]:
    return {
        "image": versions.GKE_UBUNTU_DRIVER_INSTALLER_IMAGE,
        "name": "nvidia-driver-installer",
        "resources": {"requests": {"cpu": "150m"}},
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "boot", "mountPath": "/boot"},
            {"name": "dev", "mountPath": "/dev"},
            {"name": "root-mount", "mountPath": "/root"},
        ],
    }


def daemonset_manifest(name: str, os: str) -> dict[str, Any]:
    labels = {"k8s-app": name}
    if os == "cos":
        volumes = [
            ("dev", "/dev"),
            ("vulkan-icd-mount", f"{INSTALL_DIR_HOST}/vulkan/icd.d"),
            ("nvidia-install-dir-host", INSTALL_DIR_HOST),
            ("root-mount", "/"),
            ("cos-tools", "/var/lib/cos-tools"),
            ("nvidia-config", "/etc/nvidia"),
        ]
        init = [_cos_installer(), _cos_partition()]
    else:
        volumes = [("dev", "/dev"), ("boot", "/boot"), ("root-mount", "/")]
        init = [_ubuntu_installer()]
    match = [
        {"key": GKE_ACCELERATOR_LABEL, "operator": "Exists"},
        {"key": "cloud.google.com/gke-gpu-driver-version", "operator": "DoesNotExist"},
        {"key": GKE_DRIVER_LABEL, "operator": "In", "values": [f"installer-{os}"]},
    ]
    if os == "cos":
        match.insert(2, {"key": "cloud.google.com/gke-confidential-nodes-instance-type", "operator": "DoesNotExist"})
    pod: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": match}]}}
        },
        "tolerations": [{"operator": "Exists"}],
        "volumes": [{"name": v, "hostPath": {"path": p}} for v, p in volumes],
        "initContainers": init,
        "containers": [{"image": versions.GKE_PAUSE_IMAGE, "name": "pause"}],
    }
    if os == "cos":
        pod = {**pod, "hostNetwork": True, "hostPID": True}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {"name": name, **labels}}, "spec": pod},
        },
    }


class GkeDriverInstaller(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(self, name: str, args: GkeDriverInstallerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gke:DriverInstaller", name, None, opts)
        manifest = daemonset_manifest(name, args.os)
        self.daemonset = k8s.apps.v1.DaemonSet(
            name, metadata=manifest["metadata"], spec=manifest["spec"], opts=pulumi.ResourceOptions(parent=self)
        )
        self.register_outputs({"os": args.os, "namespace": NAMESPACE, "daemonset": self.daemonset.metadata.name})
