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
