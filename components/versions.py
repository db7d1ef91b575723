"""Every pinned version gpu-cluster installs, one line each.

Nothing else in the program names a version: components import from here, and stack config may
override only the keys that the config model documents (kubernetesVersion, containerdVersion,
nvidiaDriver). No environment variable overrides anything here.
"""

# Kubernetes: the default patch release and the minors this program is tested against. The
# kube packages come from pkgs.k8s.io, whose repositories are per minor; the Debian revision of
# every package there is "-1.1".
KUBERNETES_DEFAULT = "1.34.2"
KUBERNETES_SUPPORTED_MINORS = ("1.31", "1.32", "1.33", "1.34", "1.35")
KUBE_PACKAGE_REVISION = "1.1"

# The sandbox ("pause") image kubeadm of each minor expects; containerd is told to use it so
# kubeadm's preflight does not warn and the image is not pulled twice.
PAUSE_IMAGE = {
    "1.31": "registry.k8s.io/pause:3.10",
    "1.32": "registry.k8s.io/pause:3.10",
    "1.33": "registry.k8s.io/pause:3.10",
    "1.34": "registry.k8s.io/pause:3.10.1",
    "1.35": "registry.k8s.io/pause:3.10.1",
}

# Container runtime (Docker's apt repository for Ubuntu, package containerd.io).
CONTAINERD_DEFAULT = "1.7.27-1"

# NVIDIA host software (Ubuntu 22.04). The driver is pinned by its server branch package
# (nvidia-driver-<branch>-server, held with apt-mark); config may pin the exact Debian version too.
NVIDIA_DRIVER_BRANCH_DEFAULT = "570"
NVIDIA_CONTAINER_TOOLKIT = "1.17.8-1"

# In-cluster software.
NVIDIA_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"

FLANNEL_CHART = "flannel"
FLANNEL_CHART_VERSION = "v0.28.9"
FLANNEL_CHART_REPO = "https://flannel-io.github.io/flannel/"

CALICO_CHART = "tigera-operator"
CALICO_CHART_VERSION = "v3.32.1"
CALICO_CHART_REPO = "https://docs.tigera.io/calico/charts"

# GPU software stack (gpu.stack). device-plugin path: our typed device plugin DaemonSet plus
# GPU Feature Discovery (with NFD) from the device plugin's chart and the DCGM exporter chart.
NVIDIA_DEVICE_PLUGIN_CHART = "nvidia-device-plugin"
NVIDIA_DEVICE_PLUGIN_CHART_VERSION = "0.20.0"
NVIDIA_DEVICE_PLUGIN_CHART_REPO = "https://nvidia.github.io/k8s-device-plugin"
DCGM_EXPORTER_CHART = "dcgm-exporter"
DCGM_EXPORTER_CHART_VERSION = "4.8.2"
DCGM_EXPORTER_CHART_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"
# operator path.
GPU_OPERATOR_CHART = "gpu-operator"
GPU_OPERATOR_CHART_VERSION = "v26.7.0"
GPU_OPERATOR_CHART_REPO = "https://helm.ngc.nvidia.com/nvidia"
GPU_OPERATOR_DRIVER_VERSION = "595.91.07"  # the driver container the operator installs

# The GPU-ready gate's check: CUDA vector add (and nvidia-smi, injected by the toolkit).
CUDA_VECTORADD_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
