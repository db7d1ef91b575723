"""The in-cluster layers every stack gets, whatever made the cluster."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.config import StackConfig
from components.device_plugin import NvidiaDevicePlugin


@dataclass(frozen=True)
class ClusterLayers:
    device_plugin: NvidiaDevicePlugin


def deploy(cfg: StackConfig, provider: k8s.Provider, after: list[pulumi.Resource]) -> ClusterLayers:
    del cfg  # the GPU-stack choice will read it; today every stack gets the device plugin
    opts = pulumi.ResourceOptions(provider=provider, depends_on=after)
    return ClusterLayers(device_plugin=NvidiaDevicePlugin("nvidia-device-plugin", opts=opts))
