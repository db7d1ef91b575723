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
- TCPX (container-engine-accelerators gpudirect-tcpx/nccl-test-latest.yaml and nccl-config.yaml at
  992db81; Cluster Toolkit modules/compute/gke-node-pool/gpu-direct-workload/scripts/
  enable-tcpx-in-workload.py at 1047080): the tcpx-daemon (tcpgpudmarxd, the receive-datapath
  manager) beside the trainer with Google's command, NET_ADMIN only (Google's latest manifest; its
  older nccl-test.yaml ran it privileged, which the project rule avoids where a capability does), the
  library dir, /sys and /proc/sys of the host at /hostsysfs and /hostprocsysfs, the GPU devices the
  NRI injector adds (devices.gke.io/container.tcpx-daemon). The daemon and the trainer share a socket
  directory (an emptyDir as the Toolkit's script has it, not Google's hostPath /run/tcpx): the daemon
  serves it at /run/tcpx; Google's sample mounts it over the trainer's /tmp (the plugin's default
  prefix), here it is mounted at /run/tcpx with NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx (the
  Toolkit's examples/machine-learning/a3-highgpu-8g/nemo-framework/Dockerfile and README), so the
  trainer's /tmp stays its own. The trainer's NCCL settings are the run-nccl.sh ones of
  nccl-config.yaml (no profile script ships for TCPX). Google's sample pods run `sleep infinity` and
  signal nothing: the daemon is a native sidecar here as for TCPXO, so it is up before the trainer
  starts and the Job completes when the trainer exits. The injector matches the annotation by
  container name alone, with no init-container exception (nri_device_injector/nri_device_injector.go
  CreateContainer -> getDevices(container.Name, ...) at 992db81); that containerd hands it the
  native sidecar's creation like any container's is not checked on a real node here.
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
TCPX_DAEMON = "tcpx-daemon"
TCPX_SOCKET_DIR = "/run/tcpx"  # the daemon's --uds_path
# NCCL's TCPX settings: gpudirect-tcpx/nccl-config.yaml run-nccl.sh (container-engine-accelerators at
# 992db81), with the pod's interface names of config/gcp/gpudirect.py added by trainer_env. The CPU
# bindings are a3-highgpu-8g's cores next to each NIC, as Google lists them.
_TCPX_NCCL_ENV = (
    ("NCCL_ALGO", "Ring,Tree"), ("NCCL_PROTO", "Simple"), ("NCCL_CROSS_NIC", "0"),
    ("NCCL_NET_GDR_LEVEL", "PIX"), ("NCCL_P2P_PXN_LEVEL", "0"),
    ("NCCL_DYNAMIC_CHUNK_SIZE", "524288"), ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
    ("NCCL_P2P_PCI_CHUNKSIZE", "524288"), ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"),
    ("NCCL_BUFFSIZE", "4194304"), ("NCCL_NSOCKS_PERTHREAD", "4"), ("NCCL_SOCKET_NTHREADS", "1"),
    ("NCCL_GPUDIRECTTCPX_TX_BINDINGS", "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177"),
    ("NCCL_GPUDIRECTTCPX_RX_BINDINGS", "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191"),
    ("NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS", "500000"),
    ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", TCPX_SOCKET_DIR),
)
INTERFACES_ANNOTATION = "networking.gke.io/interfaces"
DEFAULT_INTERFACE_ANNOTATION = "networking.gke.io/default-interface"
DEVICES_ANNOTATION = "devices.gke.io/container."


@dataclass(frozen=True)
class PodGpuDirect:
    gpudirect: GpuDirect
    accelerators: tuple[str, ...]  # the family's pools' accelerator types
    machine_gpus: int = 8  # GPUs of the machine (the daemon sees them all)
    daemon_image: str | None = None  # TCPX/TCPXO: versions.GKE_TCPX_DAEMON_IMAGE / GKE_TCPXO_DAEMON_IMAGE

    @property
    def kind(self) -> GpuDirectKind:
        return self.gpudirect.kind


def pod_annotations(p: PodGpuDirect) -> dict[str, str]:
    out = {DEFAULT_INTERFACE_ANNOTATION: "eth0",
           INTERFACES_ANNOTATION: json.dumps(p.gpudirect.pod_interfaces())}
    if p.kind in (GpuDirectKind.TCPX, GpuDirectKind.TCPXO):
        devices = [f"/dev/nvidia{i}" for i in range(p.machine_gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
        if p.kind is GpuDirectKind.TCPXO:
            devices.append("/dev/dmabuf_import_helper")  # TCPXO's only (gpudirect-tcpxo/nccl-test-latest.yaml)
        out[DEVICES_ANNOTATION + _daemon_name(p)] = "".join(f"- path: {d}\n" for d in devices)
    return out


def _daemon_name(p: PodGpuDirect) -> str:
    return TCPX_DAEMON if p.kind is GpuDirectKind.TCPX else TCPXO_DAEMON


def node_selector_term(p: PodGpuDirect) -> dict[str, Any]:
    """Added to each of the pod's required node selector terms."""
    return {"key": GKE_ACCELERATOR_LABEL, "operator": "In", "values": list(p.accelerators)}


def _host(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


def volumes(p: PodGpuDirect) -> list[dict[str, Any]]:
    out = [_host("nvidia-install-dir-host", NVIDIA_HOST)]
    if p.kind is GpuDirectKind.TCPXO:
        out += [_host("sys", "/sys"), _host("proc-sys", "/proc/sys"), _host("aperture-devices", APERTURE)]
    elif p.kind is GpuDirectKind.TCPX:
        out += [_host("sys", "/sys"), _host("proc-sys", "/proc/sys"), {"name": "tcpx-socket", "emptyDir": {}}]
    else:
        out.append(_host("gib", "/home/kubernetes/bin/gib"))
    return out


def trainer_mounts(p: PodGpuDirect) -> list[dict[str, str]]:
    out = [{"name": "nvidia-install-dir-host", "mountPath": NVIDIA_MOUNT}]
    if p.kind is GpuDirectKind.TCPXO:
        out.append({"name": "aperture-devices", "mountPath": APERTURE})
    elif p.kind is GpuDirectKind.TCPX:
        out.append({"name": "tcpx-socket", "mountPath": TCPX_SOCKET_DIR})
    else:
        out.append({"name": "gib", "mountPath": GIB_MOUNT})
    return out


def trainer_env(p: PodGpuDirect) -> tuple[tuple[str, str], ...]:
    if p.kind is GpuDirectKind.TCPXO:
        return (("NCCL_LIB_DIR", NCCL_LIB_DIR), ("NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", APERTURE))
    if p.kind is GpuDirectKind.TCPX:
        # The control and bootstrap traffic on eth0, the data on the GPU NICs (run-nccl.sh).
        gpu_nics = ",".join(i["interfaceName"] for i in p.gpudirect.pod_interfaces()[1:])
        return (("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_GPUDIRECTTCPX_CTRL_DEV", "eth0"),
                ("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", gpu_nics), *_TCPX_NCCL_ENV)
    return (("NCCL_NET", "gIB"),)


def prelude(p: PodGpuDirect) -> tuple[str, ...]:
    """Shell lines before the launch script: the libraries, then Google's NCCL settings."""
    libraries = f'export LD_LIBRARY_PATH="{NCCL_LIB_DIR}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"'
    if p.kind is GpuDirectKind.TCPX:
        return (libraries,)  # its settings are the pod's env (trainer_env)
    profile = (f'. "{NCCL_LIB_DIR}/nccl-env-profile.sh"' if p.kind is GpuDirectKind.TCPXO
               else f". {GIB_MOUNT}/scripts/set_nccl_env.sh")
    return (libraries, profile)


def sidecars(p: PodGpuDirect) -> list[dict[str, Any]]:
    """Native sidecars (init containers with restartPolicy Always) the trainer runs beside."""
    if p.kind is GpuDirectKind.TCPX:
        return [_tcpx_daemon(p)]
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


def _tcpx_daemon(p: PodGpuDirect) -> dict[str, Any]:
    """Google's tcpx-daemon (gpudirect-tcpx/nccl-test-latest.yaml), as a native sidecar."""
    assert p.daemon_image is not None
    return {
        "name": TCPX_DAEMON, "image": p.daemon_image, "restartPolicy": "Always",
        # Google's command, the last argument as its YAML reads (backslashes and quotes included).
        "command": ["/tcpgpudmarxd/build/app/tcpgpudmarxd", "--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd",
                    "--uds_path", TCPX_SOCKET_DIR, "--setup_param", '\\"--verbose 128 2 0 \\"'],
        # NET_ADMIN only, as Google's latest manifest (its older nccl-test.yaml ran it privileged).
        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
        # The library dir as the TCPXO daemon has it (its lib64 is Google's `libraries` mount).
        "volumeMounts": [{"name": "nvidia-install-dir-host", "mountPath": NVIDIA_MOUNT},
                         {"name": "tcpx-socket", "mountPath": TCPX_SOCKET_DIR},
                         {"name": "sys", "mountPath": "/hostsysfs"},
                         {"name": "proc-sys", "mountPath": "/hostprocsysfs"}],
        "env": [{"name": "LD_LIBRARY_PATH", "value": NCCL_LIB_DIR}],
    }
