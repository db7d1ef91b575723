"""GpuDirectKubernetes: what GKE needs in the cluster for the GPUDirect pools' networks and NCCL.

- One GKENetworkParamSet and one Network (networking.gke.io/v1) per additional node network, as
  the Cluster Toolkit's modules/scheduler/gke-cluster templates write them (gke-network-paramset.yaml.tftpl:
  vpc, vpcSubnet, deviceMode NetDevice or RDMA; network-object.yaml.tftpl: type Device, parametersRef
  to the param set of the same name). Pods name them in networking.gke.io/interfaces.
- TCPXO: Google's NCCL plugin installer DaemonSet (container-engine-accelerators
  gpudirect-tcpxo/nccl-tcpxo-installer.yaml: the host preparation of /dev/aperture_devices, the plugin
  and NCCL copied to /home/kubernetes/bin/nvidia/lib64) and the NRI device injector
  (nri_device_injector/nri-device-injector.yaml: it adds the devices a pod's
  devices.gke.io/container.<name> annotation lists, for the tcpxo-daemon sidecar).
- TCPX: Google's NCCL plugin installer DaemonSet (container-engine-accelerators
  gpudirect-tcpx/nccl-tcpx-installer.yaml at 992db81: the plugin and NCCL copied to
  /home/kubernetes/bin/nvidia/lib64) and the same NRI device injector, for the tcpx-daemon sidecar
  (Cluster Toolkit modules/compute/gke-node-pool/gpu_direct.tf applies nri-device-injector.yaml on
  a3-highgpu-8g too). One injector serves TCPX and TCPXO pools alike (one DaemonSet name).
- RDMA: Google's gIB NCCL installer DaemonSet (gpudirect-rdma/nccl-rdma-installer.yaml: the gIB
  plugin to /home/kubernetes/bin/gib and its NCCL to .../nvidia/lib64).
Each DaemonSet selects the nodes of its family's accelerators (Google's select
cloud.google.com/gke-accelerator too, listing every accelerator of the family), images from
components/versions.py. Their commands are Google's, unchanged.

Does not manage: the VPCs (gpudirect_networks.py), the pods' side (components/training/gpudirect_pod.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from components.gke.gpudirect_networks import Attached
from config.gcp.gpudirect import GpuDirectKind
from config.scheduling_contract import GKE_ACCELERATOR_LABEL

NAMESPACE = "kube-system"
NETWORK_API = "networking.gke.io/v1"

_TCPXO_PREPARE = """/sbin/iptables -I INPUT -p tcp -m tcp -j ACCEPT && modprobe import-helper
sudo mkdir -p /dev/aperture_devices
while IFS= read -r line; do
  BDF=$( echo "$line" | awk '{print $1}' );
  target_aperture_path="/dev/aperture_devices/$BDF"
  host_aperture_device=$(readlink -f "/sys/bus/pci/devices/$BDF");
  sudo mkdir -p $target_aperture_path;
  sudo umount -R $target_aperture_path;
  sudo mount --bind $host_aperture_device $target_aperture_path;
done < <(lspci -nn -D | grep '1ae0:0084')
if [ -d /dev/aperture_devices ]; then
    chmod -R a+r /dev/aperture_devices/
    chmod a+rw /dev/aperture_devices/*/resource*
fi
"""
_TCPXO_INSTALL = """set -ex
chmod 755 /scripts/container_entry.sh
/scripts/container_entry.sh install --install-nccl
mkdir -p /usr/local/nvidia/lib64
cp -r /var/lib/tcpxo/lib64/. /usr/local/nvidia/lib64
echo "installation finishes"
"""
_TCPX_INSTALL = """set -ex
/scripts/container_entry.sh install --install-nccl
mkdir -p /usr/local/nvidia/lib64
cp -r /var/lib/tcpx/lib64/. /usr/local/nvidia/lib64
echo "installation finishes"
"""
_GIB_INSTALL = """set -ex
/scripts/container_entry.sh install
cp -r /var/lib/gib/lib64/. /usr/local/home/kubernetes/bin/nvidia/lib64
cp -r /var/lib/gib/. /usr/local/home/kubernetes/bin/gib
echo "installation finishes"
"""


def network_objects(a: Attached) -> list[dict[str, Any]]:
    """The GKENetworkParamSet and Network of one additional node network."""
    return [
        {"apiVersion": NETWORK_API, "kind": "GKENetworkParamSet", "metadata": {"name": a.k8s_name},
         "spec": {"vpc": a.network, "vpcSubnet": a.subnet, "deviceMode": a.device_mode}},
        {"apiVersion": NETWORK_API, "kind": "Network", "metadata": {"name": a.k8s_name},
         "spec": {"parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": a.k8s_name},
                  "type": "Device"}},
    ]


def _daemonset(name: str, accelerators: tuple[str, ...], pod: dict[str, Any]) -> dict[str, Any]:
    labels = {"k8s-app": name}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": GKE_ACCELERATOR_LABEL, "operator": "In", "values": list(accelerators)}]}]}}}
    spec = {"priorityClassName": "system-node-critical", "affinity": affinity, "tolerations": [{"operator": "Exists"}],
            "hostNetwork": True, "hostPID": True, **pod,
            "containers": [{"image": versions.GKE_PAUSE_IMAGE, "name": "pause"}]}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {"selector": {"matchLabels": labels}, "updateStrategy": {"type": "RollingUpdate"},
                     "template": {"metadata": {"labels": {"name": name, **labels}}, "spec": spec}}}


def _host(name: str, path: str, kind: str | None = None) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, **({"type": kind} if kind else {})}}


def tcpxo_installer(accelerators: tuple[str, ...]) -> dict[str, Any]:
    return _daemonset("nccl-tcpxo-installer", accelerators, {
        "volumes": [_host("var-lib", "/var/lib"), _host("tcpxo", "/var/lib/tcpxo"),
                    _host("library-dir-host", "/home/kubernetes/bin")],
        "initContainers": [
            {"image": versions.GKE_TCPXO_PREPARE_IMAGE, "name": "pre-installation",
             "securityContext": {"privileged": True},
             "command": ["nsenter", "-at", "1", "--", "sh", "-c", _TCPXO_PREPARE]},
            {"name": "nccl-tcpxo-installer", "image": versions.GKE_TCPXO_NCCL_PLUGIN_IMAGE,
             "resources": {"requests": {"cpu": "150m"}}, "securityContext": {"privileged": True},
             "volumeMounts": [{"name": "var-lib", "mountPath": "/var/lib"},
                              {"name": "library-dir-host", "mountPath": "/usr/local"}],
             "command": ["/bin/sh", "-c"], "args": [_TCPXO_INSTALL]},
        ]})


def tcpx_installer(accelerators: tuple[str, ...]) -> dict[str, Any]:
    # privileged as in Google's manifest: the installer writes the plugin into the host's
    # /home/kubernetes/bin, which only a privileged container may on COS.
    return _daemonset("nccl-tcpx-installer", accelerators, {
        "volumes": [_host("var-lib", "/var/lib"), _host("tcpx", "/var/lib/tcpx"),
                    _host("library-dir-host", "/home/kubernetes/bin")],
        "initContainers": [
            {"image": versions.GKE_TCPX_NCCL_PLUGIN_IMAGE, "name": "nccl-tcpx-installer",
             "resources": {"requests": {"cpu": "150m"}}, "securityContext": {"privileged": True},
             "volumeMounts": [{"name": "var-lib", "mountPath": "/var/lib"},
                              {"name": "library-dir-host", "mountPath": "/usr/local"}],
             "command": ["/bin/sh", "-c"], "args": [_TCPX_INSTALL]},
        ]})


def nri_device_injector(accelerators: tuple[str, ...]) -> dict[str, Any]:
    ds = _daemonset("device-injector", accelerators, {
        "volumes": [_host("root", "/"), _host("nri", "/var/run/nri"), _host("dev", "/dev")]})
    ds["spec"]["template"]["spec"]["containers"] = [{
        "image": versions.GKE_NRI_DEVICE_INJECTOR_IMAGE, "name": "device-injector",
        "resources": {"requests": {"cpu": "150m"}}, "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "dev", "mountPath": "/dev"}, {"name": "nri", "mountPath": "/var/run/nri"}]}]
    return ds


def gib_installer(accelerators: tuple[str, ...]) -> dict[str, Any]:
    return _daemonset("nccl-rdma-installer", accelerators, {
        "volumes": [_host("library-dir-host", "/home/kubernetes/bin/nvidia/lib64", "DirectoryOrCreate"),
                    _host("gib", "/home/kubernetes/bin/gib")],
        "initContainers": [
            {"image": versions.GKE_GIB_NCCL_PLUGIN_IMAGE, "name": "nccl-rdma-installer",
             "resources": {"requests": {"cpu": "150m"}}, "securityContext": {"privileged": True},
             "volumeMounts": [{"name": "library-dir-host", "mountPath": "/usr/local/home/kubernetes/bin/nvidia/lib64"},
                              {"name": "gib", "mountPath": "/usr/local/home/kubernetes/bin/gib"}],
             "command": ["/bin/sh", "-c"], "args": [_GIB_INSTALL]},
        ]})


_INSTALLERS = {GpuDirectKind.TCPX: tcpx_installer, GpuDirectKind.TCPXO: tcpxo_installer,
               GpuDirectKind.RDMA: gib_installer}
# The families whose daemon sidecar gets its GPU devices from the NRI device injector.
_INJECTED = (GpuDirectKind.TCPX, GpuDirectKind.TCPXO)


def daemonsets(families: dict[GpuDirectKind, tuple[str, ...]]) -> list[dict[str, Any]]:
    """Each family's installer, then one device injector on the accelerators of the families that
    need it (kind -> its pools' accelerator types)."""
    out = [_INSTALLERS[kind](accelerators) for kind, accelerators in families.items()]
    injected = tuple(dict.fromkeys(a for kind in _INJECTED for a in families.get(kind, ())))
    return [*out, nri_device_injector(injected)] if injected else out


@dataclass(frozen=True)
class GpuDirectKubernetesArgs:
    # Per family: its additional node networks and its pools' accelerator types.
    families: dict[GpuDirectKind, tuple[list[Attached], tuple[str, ...]]]


class GpuDirectKubernetes(pulumi.ComponentResource):
    """The Network objects and the installer DaemonSets (opts: the cluster's provider, after the networks)."""

    def __init__(self, name: str, args: GpuDirectKubernetesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gke:GpuDirectKubernetes", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.ready: list[pulumi.Resource] = []
        named: set[str] = set()  # TCPX and TCPXO pools share vpc1..vpc4 (gpudirect_networks.py)
        for attached, _ in args.families.values():
            for a in attached:
                if a.k8s_name in named:
                    continue
                named.add(a.k8s_name)
                for obj in network_objects(a):
                    self.ready.append(k8s.apiextensions.CustomResource(
                        f"{name}-{obj['kind'].lower()}-{a.k8s_name}", api_version=obj["apiVersion"], kind=obj["kind"],
                        metadata=obj["metadata"], spec=obj["spec"], opts=child))
        for ds in daemonsets({kind: accelerators for kind, (_, accelerators) in args.families.items()}):
            self.ready.append(k8s.apps.v1.DaemonSet(
                f"{name}-{ds['metadata']['name']}", metadata=ds["metadata"], spec=ds["spec"], opts=child))
        self.register_outputs({"families": [k.value for k in args.families]})
