"""NvidiaDevicePlugin: the NVIDIA device plugin DaemonSet, as typed Kubernetes resources.

Follows the upstream static manifest (deployments/static/nvidia-device-plugin.yml, pinned in
versions.py) with two changes: it runs only on GPU nodes (nodes labelled
nvidia.com/gpu.present=true by this program, or GKE accelerator nodes), and it tolerates the
nvidia.com/gpu taint this program and GKE put on GPU nodes, the control-plane taint (a control plane
with a GPU is a GPU node too: config/scheduling_contract.py), plus CriticalAddonsOnly. Not
privileged: it needs only the kubelet's device-plugin socket directory (and, with a MIG strategy,
CAP_SYS_ADMIN: see below).

Config file (a ConfigMap, mounted as CONFIG_FILE) when the plugin needs more than its defaults:
time-slicing replicas, or a MIG strategy (single / mixed) for GPUs the administrator has ALREADY
partitioned (`nvidia-smi mig`); this plugin advertises MIG devices, it never creates them.

Does not manage: MIG partitioning (nvidia-smi mig on the hosts, or the GPU Operator's MIG manager),
GPU Feature Discovery or the DCGM exporter (the GPU-stack layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import versions
from config.scheduling_contract import GPU_NODE_SELECTOR_TERMS, GPU_RESOURCE, gpu_tolerations


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    namespace: str = "kube-system"
    image: str = versions.NVIDIA_DEVICE_PLUGIN_IMAGE
    # Time-slicing: pods that share each GPU (1 = no sharing).
    time_slicing_replicas: int = 1
    # How MIG devices (already partitioned by the admin) are advertised: none, single or mixed.
    mig_strategy: str = "none"

    @property
    def needs_config(self) -> bool:
        return self.time_slicing_replicas > 1 or self.mig_strategy != "none"


CONFIG_MOUNT = "/etc/nvidia-device-plugin"
MIG_STRATEGIES = ("none", "single", "mixed")


def plugin_config(replicas: int = 1, mig_strategy: str = "none") -> str:
    """The device plugin's config file (version v1): MIG strategy, and time-slicing when replicas > 1."""
    if mig_strategy not in MIG_STRATEGIES:
        raise ValueError(f"mig_strategy must be one of {', '.join(MIG_STRATEGIES)}; got {mig_strategy!r}")
    config: dict = {"version": "v1", "flags": {"migStrategy": mig_strategy}}
    if replicas > 1:
        config["sharing"] = {"timeSlicing": {"resources": [{"name": GPU_RESOURCE, "replicas": replicas}]}}
    return yaml.safe_dump(config, sort_keys=False)


def daemonset_manifest(name: str, args: NvidiaDevicePluginArgs) -> dict:
    labels = {"app.kubernetes.io/name": "nvidia-device-plugin", "app.kubernetes.io/instance": name}
    manifest: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": args.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": GPU_NODE_SELECTOR_TERMS
                            }
                        }
                    },
                    "tolerations": [*gpu_tolerations(), {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": args.image,
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"memory": "128Mi"},
                            },
                            "volumeMounts": [
                                {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"}
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "device-plugins",
                            "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
                        }
                    ],
                },
            },
        },
    }
    if args.needs_config:
        pod = manifest["spec"]["template"]["spec"]
        container = pod["containers"][0]
        container["env"] = [{"name": "CONFIG_FILE", "value": f"{CONFIG_MOUNT}/config.yaml"}]
        container["volumeMounts"].append({"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True})
        pod["volumes"].append({"name": "config", "configMap": {"name": f"{name}-config"}})
        if args.mig_strategy != "none":
            # As the upstream chart does for a MIG strategy: the container toolkit exposes the MIG
            # monitor capability (/proc/driver/nvidia/capabilities) only to a container asking for
            # it and holding CAP_SYS_ADMIN; without it the plugin cannot enumerate MIG devices.
            # Still not privileged: every other capability stays dropped.
            container["env"].append({"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"})
            container["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
    return manifest


class NvidiaDevicePlugin(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        args: NvidiaDevicePluginArgs | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpucluster:gpu:DevicePlugin", name, None, opts)
        args = args or NvidiaDevicePluginArgs()
        manifest = daemonset_manifest(name, args)
        depends: list[pulumi.Resource] = []
        if args.needs_config:
            depends.append(
                k8s.core.v1.ConfigMap(
                    f"{name}-config",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{name}-config", namespace=args.namespace),
                    data={"config.yaml": plugin_config(args.time_slicing_replicas, args.mig_strategy)},
                    opts=pulumi.ResourceOptions(parent=self),
                )
            )
        self.daemonset = k8s.apps.v1.DaemonSet(
            name,
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends),
        )
        self.register_outputs(
            {"image": args.image, "namespace": args.namespace, "timeSlicingReplicas": args.time_slicing_replicas,
             "migStrategy": args.mig_strategy}
        )
