"""The GPUDirect side of a multi-node training or acceptance pod on gke (config/gke_gpudirect.py
decides when): what Google's manifests add to a workload pod, as pure functions of PodGpuDirect.

Both families: networking.gke.io/default-interface eth0 and networking.gke.io/interfaces (eth0 on
the default network, one interface per GPU NIC: config/gcp/gpudirect.py), a node selector on the
family's accelerators (the networks exist only on those nodes), the NCCL libraries Google's
installer left on the host mounted at /usr/local/nvidia, and NCCL's settings from Google's profile
script, sourced by the pod's shell before it starts (launch.LaunchSpec.prelude).
- TCPXO (container-engine-accelerators gpudirect-tcpxo/nccl-test-latest.yaml and README.md; Cluster
  Toolkit modules/compute/gke-node-pool/gpu-direct-workload/scripts/enable-tcpxo-in-workload.py):
  the tcpxo-daemon (receive-datapath manager) beside the trainer, with NET_ADMIN and
  NET_BIND_SERVICE, /sys and /proc/sys of the host, the GPU devices the NRI device injector adds
  (devices.gke.io/container.tcpxo-daemon); the trainer gets /dev/aperture_devices,
  NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY and NCCL_LIB_DIR, and sources nccl-env-profile.sh.
  Google runs the daemon as a plain container; here it is a native sidecar (an init container with
  restartPolicy Always), so the Job completes when the trainer exits. Whether the NRI injector
  applies its annotation to an init container is not stated by Google (NRI sees init containers as
  containers): unconfirmed here, to be checked on a real A3 Mega node.
- RDMA (gpudirect-rdma/nccl-test.yaml; Cluster Toolkit examples/gke-a3-ultragpu/nccl-jobset-example.yaml):
  /home/kubernetes/bin/gib at /usr/local/gib, NCCL_NET=gIB, and set_nccl_env.sh sourced.
LD_LIBRARY_PATH gets /usr/local/nvidia/lib64 put in front (Google's manifests set it to that alone;
a PyTorch image keeps its own entries behind it).

hostPath volumes and NET_ADMIN put these pods outside Pod Security baseline: the training namespace
is `privileged` on such stacks (components/training_namespace.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from config.gcp.gpudirect import GpuDirect, GpuDirectKind
from config.scheduling_contract import GKE_ACCELERATOR_LABEL

NVIDIA_HOST = "/home/kubernetes/bin/nvidia"
NVIDIA_MOUNT = "/usr/local/nvidia"
NCCL_LIB_DIR = f"{NVIDIA_MOUNT}/lib64"
GIB_MOUNT = "/usr/local/gib"
APERTURE = "/dev/aperture_devices"
TCPXO_DAEMON = "tcpxo-daemon"
INTERFACES_ANNOTATION = "networking.gke.io/interfaces"
DEFAULT_INTERFACE_ANNOTATION = "networking.gke.io/default-interface"
DEVICES_ANNOTATION = "devices.gke.io/container."


@dataclass(frozen=True)
class PodGpuDirect:
    gpudirect: GpuDirect
    accelerators: tuple[str, ...]  # the family's pools' accelerator types
    machine_gpus: int = 8  # GPUs of the machine (the daemon sees them all)
    daemon_image: str | None = None  # TCPXO: versions.GKE_TCPXO_DAEMON_IMAGE

    @property
    def kind(self) -> GpuDirectKind:
        return self.gpudirect.kind


def pod_annotations(p: PodGpuDirect) -> dict[str, str]:
    out = {DEFAULT_INTERFACE_ANNOTATION: "eth0",
           INTERFACES_ANNOTATION: json.dumps(p.gpudirect.pod_interfaces())}
    if p.kind is GpuDirectKind.TCPXO:
        devices = [f"/dev/nvidia{i}" for i in range(p.machine_gpus)] + [
            "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dmabuf_import_helper"]
        out[DEVICES_ANNOTATION + TCPXO_DAEMON] = "".join(f"- path: {d}\n" for d in devices)
    return out


def node_selector_term(p: PodGpuDirect) -> dict[str, Any]:
    """Added to each of the pod's required node selector terms."""
    return {"key": GKE_ACCELERATOR_LABEL, "operator": "In", "values": list(p.accelerators)}


def _host(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


def volumes(p: PodGpuDirect) -> list[dict[str, Any]]:
    out = [_host("nvidia-install-dir-host", NVIDIA_HOST)]
    if p.kind is GpuDirectKind.TCPXO:
        out += [_host("sys", "/sys"), _host("proc-sys", "/proc/sys"), _host("aperture-devices", APERTURE)]
    else:
        out.append(_host("gib", "/home/kubernetes/bin/gib"))
    return out


def trainer_mounts(p: PodGpuDirect) -> list[dict[str, str]]:
    out = [{"name": "nvidia-install-dir-host", "mountPath": NVIDIA_MOUNT}]
    if p.kind is GpuDirectKind.TCPXO:
        out.append({"name": "aperture-devices", "mountPath": APERTURE})
    else:
        out.append({"name": "gib", "mountPath": GIB_MOUNT})
    return out


def trainer_env(p: PodGpuDirect) -> tuple[tuple[str, str], ...]:
    if p.kind is GpuDirectKind.TCPXO:
        return (("NCCL_LIB_DIR", NCCL_LIB_DIR), ("NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", APERTURE))
    return (("NCCL_NET", "gIB"),)


def prelude(p: PodGpuDirect) -> tuple[str, ...]:
    """Shell lines before the launch script: the libraries, then Google's NCCL settings."""
    profile = (f'. "{NCCL_LIB_DIR}/nccl-env-profile.sh"' if p.kind is GpuDirectKind.TCPXO
               else f". {GIB_MOUNT}/scripts/set_nccl_env.sh")
    return (f'export LD_LIBRARY_PATH="{NCCL_LIB_DIR}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"', profile)


def sidecars(p: PodGpuDirect) -> list[dict[str, Any]]:
    """Native sidecars (init containers with restartPolicy Always) the trainer runs beside."""
    if p.kind is not GpuDirectKind.TCPXO:
        return []
    assert p.daemon_image is not None
    return [{
        "name": TCPXO_DAEMON, "image": p.daemon_image, "restartPolicy": "Always",
        "command": ["/bin/sh", "-c"],
        "args": ["set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
                 f"/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics={p.gpudirect.gpu_nics} --uid= "
                 "--alsologtostderr\n"],
        "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
        "volumeMounts": [{"name": "nvidia-install-dir-host", "mountPath": NVIDIA_MOUNT},
                         {"name": "sys", "mountPath": "/hostsysfs"},
                         {"name": "proc-sys", "mountPath": "/hostprocsysfs"}],
        "env": [{"name": "LD_LIBRARY_PATH", "value": NCCL_LIB_DIR}],
    }]
