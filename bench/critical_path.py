"""Critical path of `pulumi up` for the lab stack: how long the longest chain of dependent steps takes,
and how long until every worker is Ready once the control plane's sshd and a shared package mirror
are in the picture.

    .venv/bin/python bench/critical_path.py                      # N = 2, 8, 32, 128 GPU workers
    .venv/bin/python bench/critical_path.py --compare HEAD~1     # also the program at a git ref: before/after
    .venv/bin/python bench/critical_path.py --points 2,64 --cost nvidia-driver=300 --trials 50
    .venv/bin/python bench/critical_path.py --launcher pytorchjob   # the training operator path
    .venv/bin/python bench/critical_path.py --smallest            # N = 2, 3 and 1 trial (CI: make bench-smoke)
    make bench                                                   # this and plan_scale.py

The stack is the generated lab config (bench/_configs.py) with the in-cluster layers of
Pulumi.lab.yaml: monitoring (always on), NFS shared storage on the control plane, the NCCL
acceptance Job and the training job (2 nodes; --launcher picks indexed-job or pytorchjob).
For each N the real program is evaluated under the mocks (render.program.run, nothing written) and
its plan turned into a graph in which a step can start once every step it waits for has finished,
which is how the Pulumi engine schedules with its default unbounded `--parallel`. Step r waits for:
  - each resource in r's dependencies (explicit depends_on and the resources whose outputs r's inputs
    use); a dependency on a component means on the component and all of its descendants;
  - r's explicit provider (the engine configures a provider before any resource that uses it; the
    Kubernetes provider reads its kubeconfig from control-plane-kubeconfig, so without this edge the
    CNI would look as if it could start at t=0);
  - everything every ancestor of r (parent, grandparent, ...) depends on, expanded the same way, and
    an ancestor that is itself a custom resource;
  - the waits that happen in the cluster rather than in Pulumi's graph, listed in IMPLICIT_WAITS
    (the GPU-ready gate Job completes only once every GPU node is Ready).
Each step costs the typical duration in COSTS below (components and providers cost 0, except a
component in the table: the kustomize Directory, whose children the provider creates and awaits;
Kubernetes objects Pulumi does not await, including any annotated pulumi.com/skipAwait, cost 1 s). A host step or an awaited Kubernetes kind (Deployment,
DaemonSet, Job, Helm release, ...) the table does not know stops the script (exit 2) rather than
counting as free.

Columns of the structure table:
  resources      registrations in the plan
  costed steps   resources with a nonzero cost (real work on a host or in the cluster)
  depth          the largest number of costed steps on any chain of the graph (zero-cost components
                 and providers are not counted). Independent of N when hosts are set up in parallel.
  critical path  the largest sum of costs along a chain: the estimated time until `pulumi up` is done
                 (every node Ready, CNI and GPU software rolled out, the GPU-ready gate passed), with
                 unbounded parallelism
  sum of steps   every step's cost added up: the time of doing it one step, one server after another
  speedup        sum of steps / critical path

Contention (the second table): the same graph run as a discrete-event simulation with two shared
resources the longest-path model leaves out (SshdModel, MirrorModel below, every parameter with its
source):
  - the control plane's sshd. Every remote command opens its own SSH connection. sshd_config(5),
    MaxStartups (default 10:30:100): with 10 unauthenticated connections open, sshd refuses a new
    one with probability 30%, rising linearly to 100% at 100. A connection stays unauthenticated
    for its handshake (--ssh-handshake seconds, part of the step's cost). pulumi-command redials a
    refused connection after 0.1 s, x1.5 each time, at most 5 s (pulumi sdk retry.Until defaults)
    and fails the step after more than dialErrorLimit = 10 refused dials (its default). Only the
    steps whose connection is the control plane's contend; each worker's own steps run one at a
    time on its own sshd. Random early drop is random: each point is run --trials times with seeded
    draws; the tables give the median and count the steps that would have failed.
  - a shared package mirror. The apt steps' downloads (DOWNLOADS_MB, sizes with their basis) share
    one bottleneck fairly (processor sharing), each download also capped at the rate one host gets
    alone. The cost table's durations are for one host alone at BASELINE_MBIT; under sharing a step
    takes its cost minus that alone-time of its download, plus its download under sharing.
    Two settings: the hosts reach the mirrors through a 1 Gbit/s uplink; or a LAN apt cache with a
    25 Gbit/s NIC, cold (each package crosses the uplink once and is streamed to every host that
    asked for it, so one download still gets at most the uplink's rate).
"Ready" = every worker's `-ready` step done (what the GPU-ready gate waits for); "up" = the last step.

--compare REF evaluates the program at git ref REF too (extracted with `git archive` into a
temporary directory and run with this script, so the cost table and the models are the same) and
prints both, before (REF) and after (this tree).

Also printed: the chain behind the critical path and the deepest chain, and how old the join token
is when the last join uses it: a per-join `kubeadm token create --ttl 15m` step (the earlier
layout), or the cluster's token Secret, valid JOIN_TOKEN_TTL after the program ran.

Exits 1 (and says which chain) if depth or the critical path grows with N: that means the program
serializes work that could run in parallel, a bug to fix in the program. Exits 2 on a step with no
cost. Not modelled: image pulls from registries (the DCGM exporter's ~1 GB image on every GPU node
is the largest), a bastion (every host's sessions would then go through the bastion's sshd),
retries after failures, and the control plane's CPU and memory. It is an estimate of the
structure and of the shared bottlenecks, not a promise of minutes.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(os.path.abspath(__file__)).parent.parent))
from bench import _configs  # noqa: E402

DEFAULT_POINTS = (2, 8, 32, 128)
# --smallest (what CI runs, `make bench-smoke`): the two smallest stacks the layers allow (training
# on 2 nodes needs 2 GPU workers), so the depth-grows-with-N check still compares two sizes.
SMALLEST_POINTS = (2, 3)
TOKEN_TTL = 15 * 60  # the earlier layout's per-join `kubeadm token create --ttl 15m`
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
    Cost("certificates", COMMAND, ("control-plane-certificates",), 2,
         "openssl reads kubeadm's certificates' expiry (a renewal, once a year, adds ~1 min of static-pod restarts)",
         source="estimate: one SSH round trip; the renewal path is not on a first `up` (certificates are new)"),
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


@dataclass(frozen=True)
class SshdModel:
    """The control plane's sshd and pulumi-command's dialing."""

    # sshd_config(5), MaxStartups, default "10:30:100" (start:rate:full): refuse a new connection with
    # probability rate/100 once `start` connections are unauthenticated, rising linearly to 100% at
    # `full`.
    start: int = 10
    rate: int = 30
    full: int = 100
    # How long a connection stays unauthenticated: TCP, version exchange, key exchange, host key,
    # public-key authentication, sshd's privilege-separated child. Estimate for a LAN; part of the
    # step's cost, not added to it.
    handshake_s: float = 0.5
    # pulumi-command (provider/pkg/provider/remote/connection.go): a refused dial is retried through
    # the pulumi SDK's retry.Until (100 ms, x1.5 per retry, at most 5 s); the step fails after more
    # than dialErrorLimit refused dials (default 10).
    dial_limit: int = 10
    first_delay_s: float = 0.1
    backoff: float = 1.5
    max_delay_s: float = 5.0

    def refusal(self, unauthenticated: int) -> float:
        if unauthenticated < self.start:
            return 0.0
        if unauthenticated >= self.full:
            return 1.0
        return (self.rate + (100 - self.rate) * (unauthenticated - self.start) / (self.full - self.start)) / 100

    def retry_delay(self, refused: int) -> float:
        return min(self.first_delay_s * self.backoff ** (refused - 1), self.max_delay_s)


@dataclass(frozen=True)
class Pool:
    """A bottleneck downloads share fairly (processor sharing)."""

    name: str
    shared_mbit: float  # what every download through it shares
    per_flow_mbit: float  # the most one download gets


@dataclass(frozen=True)
class MirrorModel:
    """Where the hosts' apt downloads come from: a pool, or another pool for some steps."""

    name: str
    what: str
    default: Pool
    by_key: tuple[tuple[str, Pool], ...] = ()  # (cost key, pool) for the steps served elsewhere

    def pool(self, key: str) -> Pool:
        return dict(self.by_key).get(key, self.default)


# The hosts fetch packages from the Internet mirrors (archive.ubuntu.com, pkgs.k8s.io,
# download.docker.com, nvidia.github.io) through the lab's uplink. Assumption: 1 Gbit/s.
_UPLINK = Pool("uplink", shared_mbit=1000, per_flow_mbit=1000)
# An apt caching proxy on the lab's network (e.g. apt-cacher-ng) with a 25 Gbit/s NIC, cold: each
# package crosses the uplink once and is streamed to every host that asked for it, so one host's
# download still gets at most the uplink's rate. Assumption: a server-class 25 GbE NIC, as a lab
# with 128 GPU servers has on its management network.
_CACHE = Pool("lan-cache", shared_mbit=25000, per_flow_mbit=1000)
UPLINK = MirrorModel("uplink", "Internet mirrors through a shared 1 Gbit/s uplink", _UPLINK)
LAN_CACHE = MirrorModel("lan-cache", "a cold LAN apt cache with a 25 Gbit/s NIC for every repository, "
                                     "fed by the uplink", _CACHE)
# What an apt proxy set in the hosts' own apt configuration caches today: the Ubuntu archive (plain
# HTTP: the driver, nfs-kernel-server). The other repositories are HTTPS (pkgs.k8s.io,
# download.docker.com, nvidia.github.io): apt tunnels them through a proxy with CONNECT, uncached.
ARCHIVE_CACHE = MirrorModel("archive-cache", "the same cache for the Ubuntu archive only (HTTPS repositories "
                                             "through the uplink)", _UPLINK,
                            by_key=(("nvidia-driver", _CACHE), ("nfs-server", _CACHE)))


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
            candidates += [(len(s), c) for s in c.suffixes if reg.name.endswith(s)]
            if not c.suffixes:
                candidates.append((0, c))
    if candidates:
        best = max(candidates, key=lambda x: x[0])[1]  # longest suffix: "-driver-ready" before "-ready"
        return float(best.seconds), best.key
    if reg.type.startswith("kubernetes:") and fallback and not awaited(reg.type):
        return float(fallback.seconds), fallback.key
    raise UnknownStep(f"{reg.type} {reg.name}")


@dataclass
class Node:
    urn: str
    name: str
    cost: float
    key: str
    preds: dict[str, str]  # predecessor urn -> why r waits for it
    parent: str = ""
    ssh_host: str | None = None  # a remote command: the host its SSH connection goes to
    download_mb: float = 0.0  # what the step downloads from the package mirrors


def build_graph(plan, costs: tuple[Cost, ...]) -> dict[str, Node]:
    by_urn = {r.urn: r for r in plan.resources}
    children: dict[str, list[str]] = defaultdict(list)
    for r in plan.resources:
        if r.parent in by_urn:
            children[r.parent].append(r.urn)

    def descendants(urn: str) -> list[str]:
        out, todo = [], list(children[urn])
        while todo:
            u = todo.pop()
            out.append(u)
            todo.extend(children[u])
        return out

    def expand(urn: str) -> list[str]:
        if urn not in by_urn:
            return []  # the stack itself or a resource outside the plan
        return [urn] if by_urn[urn].custom else [urn, *descendants(urn)]

    unknown: list[str] = []
    graph: dict[str, Node] = {}
    for r in plan.resources:
        try:
            seconds, key = cost_of(r, costs)
        except UnknownStep as e:
            unknown.append(str(e))
            continue
        preds: dict[str, str] = {}
        for d in r.dependencies:
            for u in expand(d):
                preds.setdefault(u, f"depends on {by_urn[d].name}")
        provider = r.provider.rsplit("::", 1)[0] if r.provider else ""
        if provider in by_urn:
            preds.setdefault(provider, "its provider")
        ancestor = r.parent
        while ancestor in by_urn:
            a = by_urn[ancestor]
            if a.custom:
                preds.setdefault(ancestor, "its custom parent")
            for d in a.dependencies:
                for u in expand(d):
                    preds.setdefault(u, f"its ancestor {a.name} depends on {by_urn[d].name}")
            ancestor = a.parent
        preds.pop(r.urn, None)
        ssh_host = (r.inputs.get("connection") or {}).get("host") if r.type == COMMAND else None
        download = DOWNLOADS_MB[key][0] if key in DOWNLOADS_MB else 0.0
        graph[r.urn] = Node(r.urn, r.name, seconds, key, preds, r.parent, ssh_host, download)
    if unknown:
        raise UnknownStep("no cost for: " + ", ".join(sorted(unknown)))
    for waiter, target, why in IMPLICIT_WAITS:
        targets = [u for u, n in graph.items() if n.key == target]
        for node in graph.values():
            if node.key == waiter:
                for u in targets:
                    node.preds.setdefault(u, why)
    return graph


@dataclass
class Result:
    workers: int
    resources: int
    costed: int
    depth: int
    critical: float
    total: float
    critical_chain: list[tuple[Node, float, float, str]]  # node, start, finish, why it waited
    depth_chain: list[tuple[Node, float, float, str]]
    token_ages: list[tuple[float, float, float]]  # per join: (age at use, token minted at, join starts at)


def analyse(workers: int, graph: dict[str, Node]) -> Result:
    finish: dict[str, float] = {}
    steps: dict[str, int] = {}
    by_time: dict[str, str | None] = {}
    by_steps: dict[str, str | None] = {}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(root: str) -> None:
        stack = [(root, False)]
        while stack:
            urn, expanded = stack.pop()
            if state.get(urn) == 2:
                continue
            node = graph[urn]
            if not expanded:
                if state.get(urn) == 1:
                    raise SystemExit(f"critical_path: dependency cycle through {node.name}")
                state[urn] = 1
                stack.append((urn, True))
                stack.extend((p, False) for p in node.preds if state.get(p) != 2)
                continue
            best_t = max(node.preds, key=lambda p: (finish[p], steps[p], p), default=None)
            best_s = max(node.preds, key=lambda p: (steps[p], finish[p], p), default=None)
            finish[urn] = node.cost + (finish[best_t] if best_t else 0.0)
            steps[urn] = (1 if node.cost > 0 else 0) + (steps[best_s] if best_s else 0)
            by_time[urn], by_steps[urn] = best_t, best_s
            state[urn] = 2

    for urn in sorted(graph):
        visit(urn)

    def chain(end: str, via: dict[str, str | None]) -> list[tuple[Node, float, float, str]]:
        out = []
        u: str | None = end
        while u is not None:
            prev = via[u]
            node = graph[u]
            out.append((node, finish[u] - node.cost, finish[u], node.preds[prev] if prev else "nothing"))
            u = prev
        return list(reversed(out))

    end_t = max(graph, key=lambda u: (finish[u], steps[u], u))
    end_s = max(graph, key=lambda u: (steps[u], finish[u], u))
    return Result(
        workers=workers,
        resources=len(graph),
        costed=sum(1 for n in graph.values() if n.cost > 0),
        depth=steps[end_s],
        critical=finish[end_t],
        total=sum(n.cost for n in graph.values()),
        critical_chain=chain(end_t, by_time),
        depth_chain=chain(end_s, by_steps),
        token_ages=_token_ages(graph, finish),
    )


def _join_token_ttl() -> float:
    """The cluster token's lifetime after the program ran (components/lab/node_join.py)."""
    try:
        from components.lab import node_join
    except ImportError:
        return math.nan
    ttl = getattr(node_join, "JOIN_TOKEN_TTL", None)
    return ttl.total_seconds() if ttl is not None else math.nan


def _token_ages(graph: dict[str, Node], finish: dict[str, float]) -> list[tuple[float, float, float, float]]:
    """Per join: (token age when the join starts, issued at, join starts at, token lifetime).

    Earlier layout: each join's token step mints a token that lives TOKEN_TTL from then. Now: one
    token Secret whose expiry is set when the program runs (t = 0), JOIN_TOKEN_TTL later."""
    tokens = {n.parent: u for u, n in graph.items() if n.key == "token"}
    cluster_token = any(n.name.endswith("-token") and n.key == "k8s-object" for n in graph.values())
    ages = []
    for u, n in graph.items():
        if n.key != "join":
            continue
        used = finish[u] - n.cost
        if n.parent in tokens:
            minted = finish[tokens[n.parent]]
            ages.append((used - minted, minted, used, float(TOKEN_TTL)))
        elif cluster_token:
            ages.append((used, 0.0, used, _join_token_ttl()))
    return ages


# --------------------------------------------------------------------------------------------
# contention: the graph as a discrete-event simulation


@dataclass
class Sim:
    finish: dict[str, float]
    refused_dials: int = 0
    failed_steps: int = 0  # steps refused more than dialErrorLimit times: `up` would fail
    peak_unauthenticated: int = 0
    peak_downloads: int = 0


def simulate(graph: dict[str, Node], cp_host: str | None, sshd: SshdModel | None, mirror: MirrorModel | None,
             rng: random.Random) -> Sim:
    """Each step starts once its predecessors are done, as in analyse(), but a step on the control
    plane's connection first gets a connection past sshd's MaxStartups, and an apt step's download
    shares the mirror with every other download in flight. With neither model it reproduces
    analyse()'s finish times exactly."""
    dependents: dict[str, list[str]] = defaultdict(list)
    waiting = {}
    for u, n in graph.items():
        waiting[u] = len(n.preds)
        for p in n.preds:
            dependents[p].append(u)
    events: list[tuple[float, int, str, str]] = []
    order = itertools.count()

    def push(t: float, kind: str, u: str) -> None:
        heapq.heappush(events, (t, next(order), kind, u))

    for u in sorted(graph):
        if not waiting[u]:
            push(0.0, "ready", u)
    sim = Sim(finish={})
    flows: dict[Pool, dict[str, float]] = defaultdict(dict)  # pool -> step -> MB still to download
    local: dict[str, float] = {}  # step -> seconds of work after its download
    refused: dict[str, int] = defaultdict(int)
    unauthenticated = 0
    now = 0.0

    def rate(pool: Pool) -> float:  # MB/s each download in the pool gets
        return min(pool.per_flow_mbit, pool.shared_mbit / len(flows[pool])) / 8

    def next_download() -> float:
        return min((now + min(f.values()) / rate(pool) for pool, f in flows.items() if f), default=math.inf)

    def advance(to: float) -> None:
        for pool, f in flows.items():
            if f:
                moved = (to - now) * rate(pool)
                for k in f:
                    f[k] -= moved

    def work(u: str, t: float) -> None:
        node = graph[u]
        if mirror is not None and node.download_mb > 0:
            flows[mirror.pool(node.key)][u] = node.download_mb
            local[u] = max(node.cost - node.download_mb * 8 / BASELINE_MBIT, 0.0)
            sim.peak_downloads = max(sim.peak_downloads, sum(len(f) for f in flows.values()))
        else:
            push(t + node.cost, "finish", u)

    while events or any(flows.values()):
        next_event = events[0][0] if events else math.inf
        next_flow = next_download()
        if next_flow < next_event:
            advance(next_flow)
            now = next_flow
            for f in flows.values():
                for k in [k for k, left in f.items() if left <= 1e-9]:
                    del f[k]
                    push(now + local.pop(k), "finish", k)
            continue
        t, _, kind, u = heapq.heappop(events)
        advance(t)
        now = t
        node = graph[u]
        if kind == "ready":
            if sshd is not None and node.ssh_host is not None and node.ssh_host == cp_host:
                push(now, "dial", u)
            else:
                work(u, now)
        elif kind == "dial":
            assert sshd is not None
            if rng.random() < sshd.refusal(unauthenticated):
                sim.refused_dials += 1
                refused[u] += 1
                if refused[u] == sshd.dial_limit + 1:
                    sim.failed_steps += 1  # pulumi-command gives up here; counted, then retried on
                push(now + sshd.retry_delay(refused[u]), "dial", u)
            else:
                unauthenticated += 1
                sim.peak_unauthenticated = max(sim.peak_unauthenticated, unauthenticated)
                push(now + min(sshd.handshake_s, node.cost), "authenticated", u)
                work(u, now)
        elif kind == "authenticated":
            unauthenticated -= 1
        elif kind == "finish":
            sim.finish[u] = now
            for d in dependents[u]:
                waiting[d] -= 1
                if not waiting[d]:
                    push(now, "ready", d)
    if len(sim.finish) != len(graph):
        raise SystemExit("critical_path: the simulation did not finish every step (a cycle?)")
    return sim


@dataclass
class Scenario:
    name: str
    title: str
    sshd: bool
    mirror: MirrorModel | None


SCENARIOS = (
    Scenario("none", "no contention", sshd=False, mirror=None),
    Scenario("sshd", "control-plane sshd", sshd=True, mirror=None),
    Scenario("uplink", "sshd + mirrors over a 1 Gbit/s uplink", sshd=True, mirror=UPLINK),
    Scenario("archive-cache", "sshd + LAN cache of the Ubuntu archive only", sshd=True, mirror=ARCHIVE_CACHE),
    Scenario("lan-cache", "sshd + LAN cache of every repository (25 Gbit/s)", sshd=True, mirror=LAN_CACHE),
)


@dataclass
class Contention:
    """One scenario at one N, over the trials."""

    ready: float  # median time until every worker's Ready step is done
    ready_max: float
    done: float  # median time until the last step is done
    refused_dials: float  # mean per trial
    failed_steps: float  # mean per trial
    failing_trials: int  # trials in which at least one step would have failed
    peak_unauthenticated: int
    peak_downloads: int
    token_slack: float  # the least time left on a join's token when the join starts (median trial)


def contention(graph: dict[str, Node], scenario: Scenario, sshd: SshdModel, trials: int, seed: int) -> Contention:
    cp_host = next((n.ssh_host for n in graph.values() if n.key == "init"), None)
    ready_steps = [u for u, n in graph.items() if n.key == "ready"]
    runs = []
    for trial in range(trials if scenario.sshd else 1):
        rng = random.Random(seed * 1_000_003 + trial)
        runs.append(simulate(graph, cp_host, sshd if scenario.sshd else None, scenario.mirror, rng))
    readies = [max((r.finish[u] for u in ready_steps), default=0.0) for r in runs]
    median_run = runs[sorted(range(len(runs)), key=lambda i: readies[i])[len(runs) // 2]]
    slack = [ttl - age for age, _, _, ttl in _token_ages(graph, median_run.finish)]
    return Contention(
        ready=statistics.median(readies),
        ready_max=max(readies),
        done=statistics.median(max(r.finish.values()) for r in runs),
        refused_dials=statistics.mean(r.refused_dials for r in runs),
        failed_steps=statistics.mean(r.failed_steps for r in runs),
        failing_trials=sum(1 for r in runs if r.failed_steps),
        peak_unauthenticated=max(r.peak_unauthenticated for r in runs),
        peak_downloads=max(r.peak_downloads for r in runs),
        token_slack=min(slack, default=math.nan),
    )


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds:.0f} s ({seconds / 3600:.1f} h)"
    return f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def print_chain(title: str, chain: list[tuple[Node, float, float, str]]) -> None:
    """One row per resource on the chain (components and providers show with cost 0)."""
    print(title)
    print("| step | cost s | start s | finish s | waits for it because |")
    print("|---|---:|---:|---:|---|")
    for node, start, end, why in chain:
        print(f"| {node.name} | {node.cost:.0f} | {start:.0f} | {end:.0f} | {why} |")
    print()


def _overrides(items: list[str]) -> tuple[Cost, ...]:
    table = {c.key: c for c in COSTS}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in table:
            raise SystemExit(f"critical_path: --cost wants KEY=SECONDS with KEY one of {', '.join(table)}; got {item!r}")
        c = table[key]
        table[key] = Cost(c.key, c.type, c.suffixes, float(value), f"{c.why} [overridden: {value} s]",
                          "--cost on the command line")
    return tuple(table.values())


@dataclass
class Point:
    """What one N gives, in a form the --compare child hands back as JSON."""

    workers: int
    resources: int
    costed: int
    depth: int
    critical: float
    total: float
    cp_sessions: int  # remote commands on the control plane's connection
    token_ages: list[tuple[float, float, float, float]]
    scenarios: dict[str, Contention] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: dict) -> Point:
        scenarios = {k: Contention(**v) for k, v in raw.pop("scenarios").items()}
        return cls(**raw, scenarios=scenarios)


def evaluate(points: list[int], launcher: str, costs: tuple[Cost, ...], sshd: SshdModel, trials: int,
             seed: int) -> tuple[list[Result], list[Point]]:
    from render import program

    results, summaries = [], []
    for n in points:
        plan = program.run("lab", config=_configs.lab_config(n, **_configs.lab_layers(launcher)))
        graph = build_graph(plan, costs)
        result = analyse(n, graph)
        cp_host = next((g.ssh_host for g in graph.values() if g.key == "init"), None)
        point = Point(n, result.resources, result.costed, result.depth, result.critical, result.total,
                      cp_sessions=sum(1 for g in graph.values() if g.ssh_host is not None and g.ssh_host == cp_host),
                      token_ages=result.token_ages)
        for scenario in SCENARIOS:
            point.scenarios[scenario.name] = contention(graph, scenario, sshd, trials, seed)
        # The simulation without contention is the longest-path model, step for step.
        assert abs(point.scenarios["none"].done - result.critical) < 1e-6, (point.scenarios["none"].done, result.critical)
        results.append(result)
        summaries.append(point)
    return results, summaries


def evaluate_at(ref: str, args: argparse.Namespace) -> list[Point]:
    """The same evaluation for the program at git `ref`, in a child process (its modules would
    clash with this tree's in one process)."""
    root = Path(os.path.abspath(__file__)).parent.parent
    with tempfile.TemporaryDirectory(prefix="critical-path-") as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", ref], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        command = [sys.executable, os.path.abspath(__file__), "--project", tmp, "--json",
                   "--points", ",".join(map(str, args.points)), "--launcher", args.launcher,
                   "--trials", str(args.trials), "--seed", str(args.seed), "--ssh-handshake", str(args.ssh_handshake),
                   *(f"--cost={c}" for c in args.cost)]
        child = subprocess.run(command, capture_output=True, text=True, check=False)
        if child.returncode not in (0, 1):
            raise SystemExit(f"critical_path: evaluating {ref} failed:\n{child.stderr}")
        return [Point.from_json(p) for p in json.loads(child.stdout)]


def _pct(value: float, base: float) -> str:
    return f"{(value / base - 1) * 100:+.1f}%"


def print_contention(title: str, points: list[Point], trials: int) -> None:
    print(title)
    print("| GPU workers | " + " | ".join(s.title for s in SCENARIOS) + " |")
    print("|---:|" + "---:|" * len(SCENARIOS))
    for p in points:
        cells = []
        for s in SCENARIOS:
            c = p.scenarios[s.name]
            spread = f", slowest {c.ready_max:.0f}" if c.ready_max - c.ready >= 0.5 else ""
            cells.append(f"{c.ready:.0f} s ({c.done:.0f} s{spread})")
        print(f"| {p.workers} | " + " | ".join(cells) + " |")
    first, last = points[0], points[-1]
    if last is not first:
        print(f"| {last.workers} vs {first.workers} | " + " | ".join(
            _pct(last.scenarios[s.name].ready, first.scenarios[s.name].ready) for s in SCENARIOS) + " |")
    print()
    print(f"Control-plane sshd (MaxStartups 10:30:100), {trials} trials per point:")
    print("| GPU workers | SSH sessions on the control plane | most unauthenticated at once | refused dials per `up` "
          "| steps over dialErrorLimit per `up` | trials in which `up` fails | downloads at once |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for p in points:
        c, u = p.scenarios["sshd"], p.scenarios["uplink"]
        print(f"| {p.workers} | {p.cp_sessions} | {c.peak_unauthenticated} | {c.refused_dials:.1f} "
              f"| {c.failed_steps:.2f} | {c.failing_trials}/{trials} | {u.peak_downloads} |")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--points", type=_configs.parse_points, default=list(DEFAULT_POINTS),
                        help="comma-separated GPU worker counts (default: %(default)s)")
    parser.add_argument("--cost", action="append", default=[], metavar="KEY=SECONDS",
                        help="override one step's cost (keys: " + ", ".join(c.key for c in COSTS) + ")")
    parser.add_argument("--launcher", choices=("indexed-job", "pytorchjob"), default="indexed-job",
                        help="training.launcher of the evaluated stack (default: %(default)s)")
    parser.add_argument("--trials", type=int, default=20,
                        help="seeded runs per point where sshd's random early drop plays (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first trial (default: %(default)s)")
    parser.add_argument("--ssh-handshake", type=float, default=SshdModel.handshake_s,
                        help="seconds a connection stays unauthenticated (default: %(default)s)")
    parser.add_argument("--compare", metavar="REF", help="also evaluate the program at this git ref (before/after)")
    parser.add_argument("--smallest", action="store_true",
                        help=f"the smallest run (CI's smoke run): --points {','.join(map(str, SMALLEST_POINTS))} --trials 1")
    parser.add_argument("--project", help=argparse.SUPPRESS)  # --compare's child: the program to evaluate
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # --compare's child: JSON out
    args = parser.parse_args(argv)
    if args.smallest:
        args.points, args.trials = list(SMALLEST_POINTS), 1
    if args.project:
        sys.path.insert(0, args.project)
    costs = _overrides(args.cost)
    sshd = SshdModel(handshake_s=args.ssh_handshake)

    started = time.perf_counter()
    try:
        results, points = evaluate(args.points, args.launcher, costs, sshd, args.trials, args.seed)
    except UnknownStep as e:
        print(f"critical_path: {e}; add it to COSTS in bench/critical_path.py", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(p) for p in points]))
        return 0
    before = evaluate_at(args.compare, args) if args.compare else None

    print("Cost table (seconds per step; components and providers 0):")
    print("| key | matches | s | rationale | source |")
    print("|---|---|---:|---|---|")
    for c in costs:
        match = f"{c.type} " + " or ".join(f"*{x}" for x in c.suffixes) if c.suffixes else c.type
        print(f"| {c.key} | `{match}` | {c.seconds:.0f} | {c.why} | {c.source} |")
    print()
    print("Downloads of the apt steps (MB; included in the costs above at "
          f"{BASELINE_MBIT / 1000:.0f} Gbit/s for one host alone):")
    print("| key | MB | basis |")
    print("|---|---:|---|")
    for key, (mb, basis) in DOWNLOADS_MB.items():
        print(f"| {key} | {mb:.0f} | {basis} |")
    print()

    print("Lab stack, 1 control plane + N GPU workers (8 GPUs each) with Pulumi.lab.yaml's layers (monitoring, "
          f"NFS storage, NCCL acceptance, training via {args.launcher}), unbounded engine parallelism:")
    print("| GPU workers | resources | costed steps | depth | critical path | sum of steps | speedup |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r.workers} | {r.resources} | {r.costed} | {r.depth} | {_duration(r.critical)} "
              f"| {_duration(r.total)} | {r.total / r.critical:.1f}x |")
    print()
    first, last = results[0], results[-1]
    print_chain(f"Critical path at N={first.workers}:", first.critical_chain)
    if last is not first:
        print_chain(f"Critical path at N={last.workers}:", last.critical_chain)
    print_chain(f"Deepest chain (the depth) at N={last.workers}:", last.depth_chain)

    heading = ("Time until every worker is Ready, median of the trials (in brackets: until `up` is done, and the "
               "slowest trial where sshd's random drops make them differ); SSH handshake "
               f"{sshd.handshake_s:g} s; mirrors: {UPLINK.what}; {ARCHIVE_CACHE.what}; {LAN_CACHE.what}")
    if before is not None:
        print_contention(f"Before ({args.compare}): {heading}:", before, args.trials)
        print_contention(f"After (this tree): {heading}:", points, args.trials)
    else:
        print_contention(f"{heading}:", points, args.trials)

    ages = [a for r in results for a in r.token_ages]
    if ages:
        oldest, minted, used, ttl = max(ages)
        worst_slack = min(p.scenarios["uplink"].token_slack for p in points)
        print(f"Join token: the oldest one a join uses was issued at {minted:.0f} s and is used at {used:.0f} s: "
              f"{oldest:.0f} s of its {ttl:.0f} s lifetime (slack {ttl - oldest:.0f} s without contention, "
              f"{worst_slack:.0f} s at the slowest point through the 1 Gbit/s uplink)"
              + (" -- WARNING: that join would fail with an expired token." if min(ttl - oldest, worst_slack) < 0 else "."))
    if len(points) > 1:
        p0, pn = points[0], points[-1]
        for name in ("sshd", "uplink", "archive-cache", "lan-cache"):
            a, b = p0.scenarios[name].ready, pn.scenarios[name].ready
            title = next(s.title for s in SCENARIOS if s.name == name)
            verdict = "within 5%" if b <= a * 1.05 else "NOT within 5%"
            print(f"{pn.workers} workers all Ready at {b:.0f} s against {a:.0f} s for {p0.workers} "
                  f"({_pct(b, a)}), {title}: {verdict}.")
    bad = [r for r in results if r.depth > first.depth or r.critical > first.critical + 1e-6]
    print(f"Evaluated {len(results)} plans in {time.perf_counter() - started:.0f} s.")
    if bad:
        worst = bad[-1]
        print(f"FAIL: depth or critical path grows with N (N={first.workers}: depth {first.depth}, "
              f"{_duration(first.critical)}; N={worst.workers}: depth {worst.depth}, {_duration(worst.critical)}). "
              "The program serializes steps that could run in parallel; the chain responsible:")
        print_chain(f"Deepest chain at N={worst.workers}:", worst.depth_chain)
        return 1
    print(f"OK: depth {first.depth} and critical path {_duration(first.critical)} are the same for every N "
          f"({', '.join(str(r.workers) for r in results)} GPU workers): hosts are set up in parallel.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
