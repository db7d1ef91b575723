"""The cost table of bench/critical_path.py: how long each step of the lab plan typically takes
(every number with its rationale and source), what the apt steps download, and the waits that happen
in the cluster rather than in Pulumi's graph. cost_of() maps one registration to its cost; a step
the table does not know is UnknownStep (critical_path.py exits 2), never free."""

from __future__ import annotations

from dataclasses import dataclass

COMMAND = "command:remote:Command"
HELM = "kubernetes:helm.sh/v3:Release"
SKIP_AWAIT = "pulumi.com/skipAwait"


@dataclass(frozen=True)
class Cost:
    key: str  # what --cost overrides
    type: str
    suffixes: tuple[str, ...]  # the resource name ends with one of these (() = any name of the type)
    seconds: float
    why: str
    # Where the number comes from: a document that states it, or "estimate:" and what it rests on.
    source: str

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise ValueError(f"cost {self.key!r} has no source")


# Typical durations on a healthy lab (Ubuntu 22.04 servers, a 100 Mbit/s+ link to the mirrors,
# images pulled from the Internet). Rationale and source per line; a source starting "estimate:" is
# this project's estimate (what it rests on follows), not a measured or documented figure. Override
# any with --cost KEY=SECONDS.
COSTS: tuple[Cost, ...] = (
    Cost("kernel", COMMAND, ("-kernel",), 5,
         "modules-load/sysctl files, modprobe, sysctl --system, swapoff (seed 000 section 2): local, seconds",
         source="estimate: local file writes and modprobe; the steps are seed 000 section 2 (../shared/seeds/000_*.txt)"),
    Cost("kube-packages", COMMAND, ("-kube-packages",), 45,
         "pkgs.k8s.io key + apt-get update + kubelet/kubeadm/kubectl/cri-tools (~90 MB of .debs)",
         source="estimate: the pkgs.k8s.io .debs of kubeadm/kubelet/kubectl/cri-tools (~90 MB); seed 000 installs the same from pkgs.k8s.io"),
    Cost("nvidia-driver", COMMAND, ("-nvidia-driver",), 240,
         "nvidia-driver-<branch>-server: ~400 MB of .debs plus the DKMS build of the kernel module, 3-5 min",
         source="estimate: the driver packages build the kernel module with DKMS at install (NVIDIA Driver Installation Guide, Ubuntu); the GPU Operator docs likewise warn that its driver container compiles the module at start and takes minutes"),
    Cost("driver-ready", COMMAND, ("-driver-ready",), 120,
         "the reboot the driver step schedules (server firmware POST 1-3 min) until nvidia-smi sees the GPUs",
         source="estimate: seed 000 (※NVIDIA driver 設定後は再起動が必要: a reboot after the driver) and seed 002 (reboot after a module option); server POST time varies by vendor"),
    Cost("nvidia-toolkit", COMMAND, ("-nvidia-toolkit",), 40,
         "NVIDIA apt repo + nvidia-container-toolkit (4 small packages) + nvidia-ctk runtime configure",
         source="estimate: NVIDIA Container Toolkit install guide (apt repo, nvidia-container-toolkit, `nvidia-ctk runtime configure`), as in seed 000"),
    Cost("containerd", COMMAND, ("-containerd",), 60,
         "Docker apt repo + containerd.io (~30 MB), config.toml (systemd cgroups), restart",
         source="estimate: containerd.io from Docker's apt repo (Docker docs, Install Docker Engine on Ubuntu) plus a restart; seed 000 does the same"),
    Cost("init", COMMAND, ("control-plane-init",), 60,
         "kubeadm init: image pull ('This might take a minute or two', kubeadm's preflight message), certs, "
         "static pods; the control plane is healthy ~25 s in, the rest is addons and the upload phases",
         source="kubeadm init's own output: preflight 'This might take a minute or two, depending on the speed of your internet connection', then '[apiclient] All control plane components are healthy after N seconds' (kubernetes.io, Creating a cluster with kubeadm); the 25 s and 60 s are estimates"),
    Cost("init-host-reset", COMMAND, ("control-plane-init-host-reset",), 0,
         "no create script: the step opens no SSH session until it is deleted (then kubeadm reset on the init host)",
         source="components/lab/control_plane.py: its create is empty (pulumi-command runs nothing and connects to no host); the delete is not on a first `up`"),
    Cost("kubelet-config-configmap", COMMAND, ("kubelet-config-configmap",), 3,
         "kubectl get of kube-system/kubelet-config and the merge; on a new cluster kubeadm init wrote the same fields, so no write",
         source="estimate: one SSH session, one API read (components/lab/kubelet_config.py: writes only when a field differs)"),
    Cost("kubelet-config-node", COMMAND, ("^kubelet-config-node-",), 3,
         "`kubeadm upgrade node phase kubelet-config` and a file compare; on a new cluster the file is unchanged, so no kubelet restart",
         source="estimate: one SSH session and a local kubeadm phase (host_steps/cluster/kubelet_config_node.sh restarts the kubelet only when the file changed)"),
    Cost("certificates", COMMAND, ("control-plane-certificates",), 2,
         "openssl reads kubeadm's certificates' expiry (a renewal, once a year, adds ~1 min of static-pod restarts)",
         source="estimate: one SSH round trip; the renewal path is not on a first `up` (certificates are new)"),
    Cost("certificates-expiry", COMMAND, ("-certificates-expiry",), 2,
         "the certificate-expiry metric's script and hourly cron entry written on a control plane, run once",
         source="estimate: one SSH round trip; openssl reads a dozen certificates in well under a second"),
    Cost("kubeconfig", COMMAND, ("-kubeconfig",), 2, "one SSH session reading /etc/kubernetes/admin.conf",
         source="estimate: one SSH round trip on a LAN"),
    Cost("token", COMMAND, ("-token",), 2,
         "(earlier layout) kubeadm token create on the control plane: one SSH session, one API call",
         source="estimate: one SSH round trip and one API call (kubernetes.io, kubeadm token reference)"),
    Cost("ca-hash", COMMAND, ("-ca-hash",), 2,
         "control plane, once: openssl hashes the CA's public key",
         source="estimate: one SSH round trip and three openssl invocations on a 1 KB certificate"),
    Cost("drain-removed", COMMAND, ("-drain",), 2,
         "control plane, once: compares the host list with the last one; drains only hosts that left",
         source="estimate: one SSH round trip and a file comparison (no host leaves in this benchmark)"),
    Cost("certs", COMMAND, ("-certs",), 10,
         "control plane, per extra control plane: kubeadm init phase upload-certs",
         source="estimate: one SSH session, kubeadm encrypts and uploads a few certificates (kubeadm init phase upload-certs reference)"),
    Cost("join", COMMAND, ("-join",), 30,
         "kubeadm join: discovery, TLS bootstrap, kubelet start (kube-proxy/pause images pulled after)",
         source="estimate: kubeadm join's phases: preflight, kubelet-start, TLS bootstrap (kubernetes.io, kubeadm join reference)"),
    Cost("ready", COMMAND, ("-ready",), 30,
         "kubectl wait node Ready (on the host since issue 13, on the control plane before): ~30 s once "
         "the CNI pod runs on the node (kube-proxy + CNI image pull)",
         source="estimate: a node turns Ready once its CNI pod runs (kubernetes.io, Creating a cluster with kubeadm: install a Pod network add-on before CoreDNS starts)"),
    Cost("cni-release", HELM, ("cni-flannel", "cni-calico"), 60,
         "CNI chart (flannel/calico) installed with wait: image pull and DaemonSet rollout, ~1 min",
         source="estimate: Helm --wait waits for the DaemonSet's pods (helm.sh docs, helm install --wait), image pulls included"),
    Cost("gfd-release", HELM, ("-gfd",), 45,
         "GPU Feature Discovery + Node Feature Discovery chart: a Deployment and DaemonSets, small images",
         source="estimate: GPU Feature Discovery / NFD chart defaults (../shared/upstream values): small images, Helm --wait"),
    Cost("dcgm-release", HELM, ("-dcgm-exporter",), 60,
         "DCGM exporter chart: DaemonSet on GPU nodes with a large (~1 GB) image, Service, ServiceMonitor",
         source="estimate: the dcgm-exporter image bundles DCGM (NVIDIA NGC: about a GB), pulled on every GPU node"),
    Cost("operator-release", HELM, ("-operator",), 120,
         "GPU Operator chart: operator + NFD pods scheduled (its driver containers run on after the release)",
         source="estimate: NVIDIA GPU Operator docs (Getting Started): the operator deploys NFD and its operands; its driver containers finish minutes after the release"),
    Cost("monitoring-release", HELM, ("-kube-prometheus-stack",), 120,
         "kube-prometheus-stack: CRDs, operator (its admission webhook job first), Prometheus, Alertmanager, "
         "Grafana, kube-state-metrics, node-exporter DaemonSet; ~10 images, Helm waits for all, ~2 min",
         source="estimate: kube-prometheus-stack chart defaults (../shared/upstream values): admission webhook Job, operator, Prometheus, Alertmanager, Grafana, kube-state-metrics, node-exporter"),
    Cost("random", "random:index/randomPassword:RandomPassword", (), 0,
         "Grafana admin password: generated inside the random provider, no host or API involved",
         source="pulumi-random docs: RandomPassword is generated by the provider, no remote call"),
    Cost("random-bytes", "random:index/randomBytes:RandomBytes", (), 0,
         "the Secrets encryption keys and the control-plane certificate key: generated inside the random provider",
         source="pulumi-random docs: RandomBytes is generated by the provider, no remote call"),
    Cost("control-plane-files", COMMAND, ("^control-plane-files-",), 2,
         "the audit policy and EncryptionConfiguration written on a control plane (files from stdin, no download)",
         source="estimate: one SSH round trip writing two small files (components/lab/hardening_files.py)"),
    Cost("etcd-backup-install", COMMAND, ("-etcd-backup-install",), 30,
         "the snapshot script and cron file installed, the etcd tools image pulled (~60 MB) and a first snapshot taken",
         source="estimate: gcr.io/etcd-development/etcd is ~60 MB (etcd release images); a snapshot of a new cluster's etcd takes about a second"),
    Cost("etcd-defrag-install", COMMAND, ("-etcd-defrag-install",), 2,
         "the defragmentation script and its cron file written on a control plane (nothing pulled: the etcd tools "
         "image is fetched by the first weekly run)",
         source="estimate: one SSH round trip writing two small files (components/lab/etcd_defrag.py)"),
    Cost("cni-crds-release", HELM, ("cni-calico-crds",), 5,
         "calico's CRD chart: CustomResourceDefinitions only, nothing for Helm to wait for",
         source="estimate: Helm applies the CRDs and has no workload to wait on (helm.sh docs, helm install --wait)"),
    Cost("nfs-server", COMMAND, ("-nfs-server",), 30,
         "control plane: apt-get install nfs-kernel-server (a few small .debs), export directory, "
         "/etc/exports.d, exportfs -ra",
         source="estimate: nfs-kernel-server install and exportfs (Ubuntu Server docs, Network File System)"),
    Cost("csi-nfs-release", HELM, ("-csi-driver-nfs",), 40,
         "csi-driver-nfs chart: controller Deployment + node DaemonSet, small images (~3 sidecars), Helm waits",
         source="estimate: csi-driver-nfs chart defaults (../shared/upstream values): controller Deployment with sidecars, node DaemonSet, Helm --wait"),
    Cost("claim", "kubernetes:core/v1:PersistentVolumeClaim", (), 5,
         "shared claim awaited until Bound: the NFS provisioner makes its subdirectory on the export",
         source="estimate: csi-driver-nfs dynamic provisioning makes a subdirectory on the export (csi-driver-nfs docs)"),
    Cost("headless-service", "kubernetes:core/v1:Service", ("-hosts",), 1,
         "a job's headless Service: pulumi-kubernetes v4 does not wait for endpoints of a clusterIP None "
         "Service (await/service.go), so one API call",
         source="pulumi-kubernetes await logic (provider docs on resource readiness; await/service.go): no endpoint wait for clusterIP None"),
    Cost("acceptance", "kubernetes:batch/v1:Job", ("nccl-acceptance",), 120,
         "NCCL acceptance Job (indexed-job), awaited by `up`: pods on 2 GPU nodes, trainer image pull "
         "(PyTorch + NCCL, several GB, ~1 min on a 1 Gbit/s link), torchrun rendezvous, all_reduce sweep",
         source="seed 002 (../shared/seeds/002_*.txt): nccl-tests all_reduce of 10 GiB in 3.8 s at 2.81 GB/s busbw over 25GbE, so a sweep up to 1 GiB takes seconds; the image pull, pod start and rendezvous are estimates"),
    Cost("training-operator", "kubernetes:kustomize/v2:Directory", (), 30,
         "Kubeflow training operator (pytorchjob launcher): CRDs applied server-side, the operator "
         "Deployment awaited until ready (one image), ~30 s",
         source="estimate: Kubeflow training operator standalone overlay (CRDs and one Deployment; kubeflow/training-operator install docs)"),
    Cost("daemonset", "kubernetes:apps/v1:DaemonSet", (), 20,
         "NVIDIA device plugin: one small image per GPU node, Pulumi awaits the rollout",
         source="estimate: NVIDIA k8s-device-plugin DaemonSet, one small image (seeds 000 and 001 deploy it)"),
    Cost("gate", "kubernetes:batch/v1:Job", ("gpu-ready",), 60,
         "GPU-ready gate Job, after the last GPU node is Ready (see IMPLICIT_WAITS): device plugin pod on it, "
         "CUDA sample image pull, nvidia-smi -L and vectorAdd",
         source="estimate: one pod per GPU node running nvidia-smi and the CUDA vectorAdd sample (seed 001 uses cuda-vector-add as its check)"),
    Cost("health-service", "kubernetes:apps/v1:Deployment", ("-gpu-health",), 75,
         "GPU health service (`python -m gpuhealth`, one replica on a node without GPUs, the control plane "
         "first): Pulumi awaits the rollout until the replica is available: the workload image pulled there "
         "(PyTorch + NCCL, several GB, ~1 min on a 1 Gbit/s link as for the acceptance Job), Python start, "
         "the first /healthz readiness probe (periodSeconds 10)",
         source="estimate: the image pull as in the acceptance cost; pulumi-kubernetes awaits a Deployment until "
                "its replicas are available (Pulumi docs, Kubernetes resource readiness); periodSeconds 10 in "
                "components/gpu_health.py"),
    Cost("kubelet-serving-approver", "kubernetes:apps/v1:Deployment", ("kubelet-serving-deployment",), 20,
         "kubelet-csr-approver (one replica, a small Go image) awaited until available",
         source="estimate: ghcr.io/postfinance/kubelet-csr-approver is one static Go binary (tens of MB); pulumi-kubernetes "
                "awaits a Deployment until its replicas are available (Pulumi docs, Kubernetes resource readiness)"),
    Cost("health-endpoints", "kubernetes:core/v1:Service", ("-gpu-health",), 1,
         "GPU health Service (ClusterIP, a selector): Pulumi awaits a Service with a selector until it targets a "
         "ready pod, so it ends when the service's Deployment is available (IMPLICIT_WAITS), then one API call",
         source="pulumi-kubernetes await logic for Services (await/service.go): a Service with a selector waits "
                "for endpoints targeting at least one Pod ('Service does not target any Pods')"),
    Cost("service-account", "kubernetes:core/v1:ServiceAccount", (), 1,
         "the node upgrader's ServiceAccount (lab Membership): one API call",
         source="pulumi-kubernetes: a ServiceAccount has no await logic of its own (1.24+ creates no token Secret for it)"),
    Cost("upgrader-token", "kubernetes:core/v1:Secret", ("-upgrader-token",), 1,
         "the node upgrader's token Secret: one API call, then the wait for the token controller to fill in data.token",
         source="pulumi-kubernetes#2048 (await for kubernetes.io/service-account-token Secrets); the controller fills it within a second"),
    Cost("k8s-object", "kubernetes:*", (), 1,
         "any other Kubernetes object (Namespace, ConfigMap, RBAC, CronJob, a custom resource such as a "
         "ServiceMonitor, ...) and any annotated pulumi.com/skipAwait (the training Job, PyTorchJobs): one API "
         "call, nothing to await",
         source="pulumi-kubernetes docs (resource annotations): an object annotated pulumi.com/skipAwait, or a kind "
                "without await logic (a CronJob; custom resources unless PULUMI_K8S_AWAIT_ALL=true, which the "
                "program does not set), is done when the API call returns"),
)

# Kinds Pulumi's Kubernetes provider awaits (readiness, rollout, completion), by exact kind: they
# must have an entry of their own; the 1 s "k8s-object" fallback would make them look free. A
# CronJob or a ServiceMonitor is not a Job or a Service: they are created and not awaited.
AWAITED_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job", "Pod",
                 "Service", "Ingress", "PersistentVolumeClaim")
AWAITED_BUNDLES = ("kubernetes:helm.sh/",)  # Helm releases: awaited (--wait) whatever they contain

# Waits that happen in the cluster, not in Pulumi's graph: (cost key of the waiting step, cost key of
# what it waits for, why). The gate Job runs one pod per GPU node (completions = GPU nodes), so
# it can only complete once every node is Ready; it does not depend on the join steps in the program.
IMPLICIT_WAITS: tuple[tuple[str, str, str], ...] = (
    ("gate", "ready", "cluster: one gate pod per GPU node needs every node Ready"),
    ("health-endpoints", "health-service", "cluster: the Service has endpoints once the service's pod is ready"),
)


# What each apt step downloads, by cost key: (MB, basis). The durations in COSTS include these
# downloads at BASELINE_MBIT (one host alone).
DOWNLOADS_MB: dict[str, tuple[float, str]] = {
    "nvidia-driver": (400, "estimate: nvidia-driver-<branch>-server and its dependencies (libnvidia-gl, "
                           "-compute, -extra, firmware, kernel source for DKMS, utils): ~400 MB of .debs, "
                           "as the cost table's rationale says"),
    "nvidia-toolkit": (10, "estimate: nvidia-container-toolkit, -base, libnvidia-container-tools, "
                           "libnvidia-container1: a few MB each"),
    "containerd": (35, "estimate: containerd.io from Docker's repository (~30 MB) and the repository key"),
    "kube-packages": (90, "estimate: kubelet, kubeadm, kubectl, cri-tools and kubernetes-cni from pkgs.k8s.io "
                          "(~90 MB, as the cost table's rationale says)"),
    "nfs-server": (2, "estimate: nfs-kernel-server and its few small dependencies"),
}
BASELINE_MBIT = 1000.0  # the rate at which COSTS assume one host alone downloads (1 Gbit/s)


class UnknownStep(Exception):
    pass


def awaited(type_: str) -> bool:
    """Whether Pulumi's Kubernetes provider waits for this type beyond the API call."""
    return type_.startswith(AWAITED_BUNDLES) or type_.rsplit(":", 1)[-1] in AWAITED_KINDS


def cost_of(reg, costs: tuple[Cost, ...]) -> tuple[float, str]:
    """(seconds, cost key) of one registration; components and providers are free."""
    if not reg.custom:
        own = next((c for c in costs if c.type == reg.type and not c.suffixes), None)
        return (float(own.seconds), own.key) if own else (0.0, "component")
    if reg.type.startswith("pulumi:providers:"):
        return 0.0, "provider"
    fallback = next((c for c in costs if c.type == "kubernetes:*"), None)
    annotations = ((reg.inputs.get("metadata") or {}).get("annotations") or {}) if reg.type.startswith("kubernetes:") else {}
    if fallback and annotations.get(SKIP_AWAIT) == "true":
        return float(fallback.seconds), fallback.key  # Pulumi creates it and does not wait
    candidates = []
    for c in costs:
        if c.type == reg.type:
            # A suffix matches the name's end; one starting "^" its start (steps named before the host).
            candidates += [(len(s), c) for s in c.suffixes
                           if (reg.name.startswith(s[1:]) if s.startswith("^") else reg.name.endswith(s))]
            if not c.suffixes:
                candidates.append((0, c))
    if candidates:
        best = max(candidates, key=lambda x: x[0])[1]  # longest suffix: "-driver-ready" before "-ready"
        return float(best.seconds), best.key
    if reg.type.startswith("kubernetes:") and fallback and not awaited(reg.type):
        return float(fallback.seconds), fallback.key
    raise UnknownStep(f"{reg.type} {reg.name}")
