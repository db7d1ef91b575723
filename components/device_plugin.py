"""NvidiaDevicePlugin: the NVIDIA device plugin DaemonSet, as typed Kubernetes resources.

Follows the upstream static manifest (deployments/static/nvidia-device-plugin.yml, pinned in
versions.py) with two changes: it runs only on GPU nodes (nodes labelled
nvidia.com/gpu.present=true by this program, or GKE accelerator nodes), and it tolerates the
nvidia.com/gpu taint this program and GKE put on GPU nodes, plus CriticalAddonsOnly. Not privileged: it needs only the kubelet's
device-plugin socket directory.

Does not manage: GPU sharing, GPU Feature Discovery or the DCGM exporter (the GPU-stack layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import versions

# The label this program puts on GPU nodes (kubelet --node-labels on lab, a patch on dev); GPU
# Feature Discovery and the GPU Operator use the same one.
GPU_NODE_LABEL = ("nvidia.com/gpu.present", "true")

GPU_NODE_SELECTOR_TERMS = [
    {"matchExpressions": [{"key": GPU_NODE_LABEL[0], "operator": "In", "values": [GPU_NODE_LABEL[1]]}]},
    {"matchExpressions": [{"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}]},
]


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    namespace: str = "kube-system"
    image: str = versions.NVIDIA_DEVICE_PLUGIN_IMAGE
    # Time-slicing: pods that share each GPU (1 = no sharing, no config file).
    time_slicing_replicas: int = 1


CONFIG_MOUNT = "/etc/nvidia-device-plugin"


def plugin_config(replicas: int) -> str:
    """The device plugin's config file (version v1) for time-slicing."""
    return yaml.safe_dump(
        {
            "version": "v1",
            "flags": {"migStrategy": "none"},
            "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}},
        },
        sort_keys=False,
    )


def daemonset_manifest(name: str, args: NvidiaDevicePluginArgs) -> dict:
    labels = {"app.kubernetes.io/name": "nvidia-device-plugin", "app.kubernetes.io/instance": name}
    manifest = {
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
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                    ],
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
    if args.time_slicing_replicas > 1:
        pod = manifest["spec"]["template"]["spec"]
        pod["containers"][0]["env"] = [{"name": "CONFIG_FILE", "value": f"{CONFIG_MOUNT}/config.yaml"}]
        pod["containers"][0]["volumeMounts"].append({"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True})
        pod["volumes"].append({"name": "config", "configMap": {"name": f"{name}-config"}})
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
        if args.time_slicing_replicas > 1:
            depends.append(
                k8s.core.v1.ConfigMap(
                    f"{name}-config",
                    metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{name}-config", namespace=args.namespace),
                    data={"config.yaml": plugin_config(args.time_slicing_replicas)},
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
            {"image": args.image, "namespace": args.namespace, "timeSlicingReplicas": args.time_slicing_replicas}
        )
