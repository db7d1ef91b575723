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

# The signing keys of the apt repositories node prep adds, pinned by the fingerprint of each primary
# key (hardening.verifyAptKeys: a fetched key whose primary keys are not all listed here is refused).
# Each was read from `gpg --show-keys` output of the key URL the host steps fetch, as published:
#   kubernetes: pkgs.k8s.io's "isv:kubernetes OBS Project" key, one for every core:/stable:/v1.xx
#     repository (kubernetes/kubernetes#128609 and kubernetes/release#3818 show it for v1.24-v1.31;
#     its 2024 renewal extended the expiry, which keeps the fingerprint).
#   docker: "Docker Release (CE deb)", the fingerprint Docker's install docs tell readers to verify
#     (docker/docs engine/install/debian.md and ubuntu.md).
#   nvidia-container-toolkit: "NVIDIA CORPORATION (Open Source Projects)", the key at
#     nvidia.github.io/libnvidia-container/gpgkey (NVIDIA/libnvidia-container#280,
#     NVIDIA/nvidia-container-toolkit#650 and #1460; apt names its key id DDCAE044F796ECB0).
# The NVIDIA driver comes from Ubuntu's own archive (nvidia-driver-<branch>-server), signed by the
# keys Ubuntu installs: no repository is added for it.
APT_KEY_FINGERPRINTS = {
    "kubernetes": ("DE15B14486CD377B9E876E1A234654DA9A296436",),
    "docker": ("9DC858229FC7DD38854AE2D88D81803C0EBFCD88",),
    "nvidia-container-toolkit": ("C95B321B61E88C1809C4F759DDCAE044F796ECB0",),
}

# The etcd kubeadm runs for each minor: kubeadm's SupportedEtcdVersion (cmd/kubeadm/app/constants/
# constants.go) on each release branch at its latest patch. 1.31-1.33 were moved to 3.5.24-0 by the
# cherry picks of kubernetes/kubernetes#134861 (#135020, #135019, #135018); 1.34 runs 3.6.5-0 and
# 1.35 3.6.6-0 (#135271). A later kubeadm patch may move it again: the backup reads the version the
# host actually runs from its etcd manifest (components/lab/etcd_backup.py) and uses this table
# only where the manifest says nothing.
ETCD_KUBEADM = {
    "1.31": "3.5.24-0",
    "1.32": "3.5.24-0",
    "1.33": "3.5.24-0",
    "1.34": "3.6.5-0",
    "1.35": "3.6.6-0",
}
ETCD_IMAGE_REPOSITORY = "registry.k8s.io/etcd"  # what kubeadm runs: etcd and etcdctl, no etcdutl
# The etcd project's own release image of the same version (etcd, etcdctl and etcdutl): the snapshot
# and the restore run its tools, since `etcdutl snapshot restore` is the restore from 3.5 on and
# kubeadm's image does not ship etcdutl (etcd-io/etcd#13764).
ETCD_TOOLS_IMAGE_REPOSITORY = "gcr.io/etcd-development/etcd"

# Container runtime (Docker's apt repository for Ubuntu, package containerd.io).
CONTAINERD_DEFAULT = "1.7.27-1"

# NVIDIA host software (Ubuntu 22.04). The driver is pinned by its server branch package
# (nvidia-driver-<branch>-server, held with apt-mark); config may pin the exact Debian version too.
NVIDIA_DRIVER_BRANCH_DEFAULT = "570"
NVIDIA_CONTAINER_TOOLKIT = "1.17.8-1"

# kube-vip: the API's virtual IP on HA lab control planes (gpu-cluster:kubeVip), a static pod.
KUBE_VIP_IMAGE = "ghcr.io/kube-vip/kube-vip:v1.0.3"
# kubelet-csr-approver (postfinance): approves the lab kubelets' serving-certificate requests
# (components/lab/kubelet_serving.py). Tag v1.2.14 (commit 14dd0aca331f), the image its release publishes.
KUBELET_CSR_APPROVER_IMAGE = "ghcr.io/postfinance/kubelet-csr-approver:v1.2.14"

# In-cluster software.
NVIDIA_DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"

FLANNEL_CHART = "flannel"
FLANNEL_CHART_VERSION = "v0.28.9"
FLANNEL_CHART_REPO = "https://flannel-io.github.io/flannel/"

CALICO_CHART = "tigera-operator"
CALICO_CHART_VERSION = "v3.32.1"
CALICO_CHART_REPO = "https://docs.tigera.io/calico/charts"
# Since Calico 3.32 the operator chart ships no CRDs: they are this chart of the same release, which
# must move in lockstep with the operator (its Installation etc. are created from these CRDs).
CALICO_CRDS_CHART = "crd.projectcalico.org.v1"
CALICO_CRDS_CHART_VERSION = CALICO_CHART_VERSION
CALICO_CRDS_CHART_REPO = CALICO_CHART_REPO

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

# Monitoring: Prometheus (operator), Alertmanager, Grafana, kube-state-metrics, node-exporter.
KUBE_PROMETHEUS_STACK_CHART = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_CHART_VERSION = "88.5.3"
KUBE_PROMETHEUS_STACK_CHART_REPO = "https://prometheus-community.github.io/helm-charts"

# The GPU-ready gate's check: CUDA vector add (and nvidia-smi, injected by the toolkit).
CUDA_VECTORADD_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"

# The training workload image's base (workloads/Dockerfile's FROM; a test keeps them equal).
TRAINING_BASE_IMAGE = "nvcr.io/nvidia/pytorch:25.06-py3"
# What workloads/Dockerfile adds to that base (Ubuntu 24.04; versions from noble-updates and noble
# universe, packages.ubuntu.com): rping and ib_write_bw for the RDMA link test, the Prometheus
# client of the RDMA exporter. A test keeps the Dockerfile's pins equal to these.
WORKLOAD_IMAGE_APT = {
    "ibverbs-utils": "50.0-2ubuntu0.2",
    "rdmacm-utils": "50.0-2ubuntu0.2",
    "perftest": "24.01.0+0.38-1build2",
}
WORKLOAD_IMAGE_PIP = {"prometheus-client": "0.26.0"}

# Shared storage on lab: the NFS CSI driver chart (its images are pinned by the chart version).
CSI_DRIVER_NFS_CHART = "csi-driver-nfs"
CSI_DRIVER_NFS_CHART_VERSION = "4.13.4"
# `master/charts` is upstream's documented Helm repo URL (its index.yaml lists every released chart
# version); the version above is pinned, so the branch name does not float what gets installed.
CSI_DRIVER_NFS_CHART_REPO = "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts"

# training.launcher pytorchjob: the Kubeflow training operator v1 (repository kubeflow/trainer, tag
# v1.9.4), its standalone kustomize overlay at that tag; the overlay sets the image below.
TRAINING_OPERATOR_VERSION = "v1.9.4"
TRAINING_OPERATOR_REPO = "https://github.com/kubeflow/trainer"
TRAINING_OPERATOR_OVERLAY = "manifests/overlays/standalone"  # the overlay's folder in the repository
TRAINING_OPERATOR_KUSTOMIZE = f"{TRAINING_OPERATOR_REPO}//{TRAINING_OPERATOR_OVERLAY}?ref={TRAINING_OPERATOR_VERSION}"
TRAINING_OPERATOR_IMAGE = "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"

# gke: Google's driver-installer DaemonSets (container-engine-accelerators, nvidia-driver-installer/
# {cos,ubuntu}/daemonset-preloaded.yaml). The installer images are preloaded by GKE on each node
# image, matching its kernel (tag "fixed", never pulled); the other two are pinned by digest upstream.
GKE_COS_DRIVER_INSTALLER_IMAGE = "cos-nvidia-installer:fixed"
GKE_UBUNTU_DRIVER_INSTALLER_IMAGE = "gke-nvidia-installer:fixed"
GKE_PARTITION_GPU_IMAGE = "gcr.io/gke-release/nvidia-partition-gpu@sha256:de12f85ebfb4fb6c1893cd30c23aab662a72fa0448f97ef74fccb82d7522ef17"
GKE_PAUSE_IMAGE = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"

# network.rdma with network.roce (lab, dev): the secondary RoCE network of training pods (seed 002).
# Multus thick plugin: upstream's install manifest at the release tag, its `snapshot-thick` image
# replaced by the release's own tag (the manifest at the tag still names the moving snapshot).
MULTUS_VERSION = "v4.3.0"
MULTUS_MANIFEST_FILE = "multus-daemonset-thick.yml"
MULTUS_MANIFEST = (
    f"https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/{MULTUS_VERSION}/deployments/{MULTUS_MANIFEST_FILE}"
)
MULTUS_IMAGE = "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.3.0-thick"
# whereabouts IPAM: the chart published at release (OCI), whose git copy still says image v0.8.0.
WHEREABOUTS_CHART = "oci://ghcr.io/k8snetworkplumbingwg/whereabouts-chart"
WHEREABOUTS_CHART_VERSION = "0.9.4"
WHEREABOUTS_IMAGE_REPOSITORY = "ghcr.io/k8snetworkplumbingwg/whereabouts"
WHEREABOUTS_IMAGE_TAG = "v0.9.4"
# The rdma CNI (chained after host-device) moves the NIC's RDMA device into the pod's network
# namespace (exclusive mode); containernetworking's host-device moves only the netdev (checked in
# its source up to v1.9.1). Installed into /opt/cni/bin by upstream's DaemonSet image.
RDMA_CNI_IMAGE = "ghcr.io/k8snetworkplumbingwg/rdma-cni:v1.6.0"
# The RDMA shared device plugin: /dev/infiniband/* for pods asking for its resource (no privileged pods).
RDMA_SHARED_DEVICE_PLUGIN_IMAGE = "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"

# Lab GPU hosts with network.rdma and network.roce (node prep): the RDMA userspace from Ubuntu 22.04
# (jammy) itself, installed at these versions and held like the kube packages. Both sources have
# one version in jammy and none in jammy-updates or jammy-security (packages.ubuntu.com, jammy:
# rdma-core 39.0-1, perftest 4.4+0.37-1); ibverbs-utils and perftest are in universe.
#   rdma-core          udev rules and units that load the RDMA kernel modules at boot
#   ibverbs-providers  the userspace verbs drivers (libirdma for the E810, libmlx5 for ConnectX)
#   ibverbs-utils      ibv_devinfo, ibv_devices: what the host's RDMA devices and GIDs are
#   perftest           ib_write_bw and friends: the link test of seed 002
# infiniband-diags (ibstat, ibnetdiscover) is left out: it queries an InfiniBand subnet manager,
# which RoCE has none of. The `rdma` tool itself is iproute2's, part of every Ubuntu install.
RDMA_CORE_JAMMY = "39.0-1"
PERFTEST_JAMMY = "4.4+0.37-1"
ROCE_HOST_PACKAGES = (
    ("rdma-core", RDMA_CORE_JAMMY),
    ("ibverbs-providers", RDMA_CORE_JAMMY),
    ("ibverbs-utils", RDMA_CORE_JAMMY),
    ("perftest", PERFTEST_JAMMY),
)

# wandb.enabled: W&B's launch agent (chart wandb/launch-agent, repository wandb/helm-charts). The
# agent image is the chart's own default at this version, set explicitly so that a chart bump
# never changes it unseen.
WANDB_LAUNCH_AGENT_CHART = "launch-agent"
WANDB_LAUNCH_AGENT_CHART_VERSION = "0.13.12"
WANDB_LAUNCH_AGENT_CHART_REPO = "https://charts.wandb.ai"
WANDB_LAUNCH_AGENT_IMAGE = "wandb/launch-agent:0.17.3"

# gpuHealth: NVIDIA's DCGM image for the scheduled diagnostic (`dcgmi diag`, nv-hostengine in the
# pod). The version the GPU Operator's values pin for its standalone hostengine (DCGM 4.6.0), one
# release after the DCGM inside the exporter image (4.5.3-4.8.2); diag results do not depend on the
# exporter's. The service itself ships in the workload image (gpuHealth.image / training.image).
DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"

# queues.enabled: Kueue (kubernetes-sigs/kueue), its chart as published at the release (OCI), and the
# manager image of the same release: the chart's own default is the moving staging tag release-0.19.
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_CHART_VERSION = "0.19.2"
KUEUE_IMAGE_REPOSITORY = "registry.k8s.io/kueue/kueue"
KUEUE_IMAGE_TAG = "v0.19.2"

# gke GPUDirect (components/gke/gpudirect_installers.py, components/training/gpudirect_pod.py), from
# Google's manifests in GoogleCloudPlatform/container-engine-accelerators at 992db81257553607f1477945f1b3219632991829:
# gpudirect-tcpxo/README.md (release of Jan 9, 2026: installer v1.0.15, its tcpxo-daemon v1.0.21,
# NCCL 2.28.7-1), gpudirect-tcpxo/nccl-tcpxo-installer.yaml, gpudirect-rdma/nccl-rdma-installer.yaml
# (gIB v1.1.1) and nri_device_injector/nri-device-injector.yaml (by digest). The Cluster Toolkit's
# examples/gke-a3-megagpu (nccl_tcpxo_version v1.0.15) and examples/gke-a3-ultragpu (gIB v1.1.0) agree.
GKE_TCPXO_NCCL_PLUGIN_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v1.0.15"
GKE_TCPXO_DAEMON_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21"
GKE_GIB_NCCL_PLUGIN_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.1"
GKE_NRI_DEVICE_INJECTOR_IMAGE = (
    "gcr.io/gke-release/nri-device-injector@sha256:6e79483d52abdc28454bf186320b10a56b0f117a10e8d65d5c74dbb821a76970")
# The TCPXO installer's host-preparation init container: Google's manifest says "ubuntu" with no tag;
# pinned here to the LTS tag (it runs nsenter into the host, so only util-linux of the image is used).
GKE_TCPXO_PREPARE_IMAGE = "ubuntu:24.04"
# GPUDirect-TCPX (a3-highgpu-8g), from GoogleCloudPlatform/container-engine-accelerators at
# 992db81257553607f1477945f1b3219632991829: gpudirect-tcpx/nccl-tcpx-installer.yaml (NCCL plugin v3.1.9)
# and gpudirect-tcpx/nccl-test-latest.yaml (its tcpx-daemon, tcpgpudmarxd v2.0.12). Cluster Toolkit
# (1047080375afbb44da4b596be314634e7486af4a) modules/compute/gke-node-pool/gpu_direct.tf pins the same
# pair ("rxdm_version v2.0.12 matching nccl-tcpx-installer version v3.1.9"); examples/gke-a3-highgpu
# nccl_tcpx_version v3.1.9. Google pins them by tag, not digest.
GKE_TCPX_NCCL_PLUGIN_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.9"
GKE_TCPX_DAEMON_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12"
