"""Critical path of `pulumi up` for the lab stack: how long the longest chain of dependent steps takes.

    .venv/bin/python bench/critical_path.py                      # N = 2, 8, 32, 128 GPU workers
    .venv/bin/python bench/critical_path.py --points 2,64 --cost nvidia-driver=300
    .venv/bin/python bench/critical_path.py --launcher pytorchjob   # the training operator path
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

Columns:
  resources      registrations in the plan
  costed steps   resources with a nonzero cost (real work on a host or in the cluster)
  depth          the largest number of costed steps on any chain of the graph (zero-cost components
                 and providers are not counted). Independent of N when hosts are set up in parallel.
  critical path  the largest sum of costs along a chain: the estimated time until `pulumi up` is done
                 (every node Ready, CNI and GPU software rolled out, the GPU-ready gate passed), with
                 unbounded parallelism
  sum of steps   every step's cost added up: the time of doing it one step, one server after another
  speedup        sum of steps / critical path

Also printed: the chain behind the critical path and the deepest chain, and how old the oldest join
token is when its join runs (tokens live 15 minutes; a token minted long before its host is
prepared could expire).

Exits 1 (and says which chain) if depth or the critical path grows with N: that means the program
serializes work that could run in parallel, a bug to fix in the program. Exits 2 on a step with no
cost. What the model leaves out: contention (every host downloading the driver from one mirror at
once; every token and readiness check opening an SSH session on the control plane, where sshd's
default MaxStartups 10:30:100 starts refusing concurrent unauthenticated connections), retries and
failures. It is an estimate of the structure, not a promise of minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(os.path.abspath(__file__)).parent.parent))
from bench import _configs  # noqa: E402

DEFAULT_POINTS = (2, 8, 32, 128)
TOKEN_TTL = 15 * 60  # scripts.mint_join_token: kubeadm token create --ttl 15m
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
    Cost("token", COMMAND, ("-token",), 2, "kubeadm token create: one SSH session, one API call",
         source="estimate: one SSH round trip and one API call (kubernetes.io, kubeadm token reference)"),
    Cost("join", COMMAND, ("-join",), 30,
         "kubeadm join: discovery, TLS bootstrap, kubelet start (kube-proxy/pause images pulled after)",
         source="estimate: kubeadm join's phases: preflight, kubelet-start, TLS bootstrap (kubernetes.io, kubeadm join reference)"),
    Cost("ready", COMMAND, ("-ready",), 30,
         "kubectl wait node Ready: ~30 s once the CNI pod runs on the node (kube-proxy + CNI image pull)",
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
    Cost("k8s-object", "kubernetes:*", (), 1,
         "any other Kubernetes object (Namespace, ConfigMap, RBAC, ...) and any annotated "
         "pulumi.com/skipAwait (the training Job, PyTorchJobs): one API call, nothing to await",
         source="pulumi-kubernetes docs: an object annotated pulumi.com/skipAwait (or a kind without await logic) is done when the API call returns"),
)

# Kinds Pulumi's Kubernetes provider awaits (readiness, rollout, completion): they must have an
# entry of their own; the 1 s "k8s-object" fallback would make them look free.
AWAITED_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod", "Service", "Ingress",
                 "PersistentVolumeClaim", "helm.sh/")

# Waits that happen in the cluster, not in Pulumi's graph: (cost key of the waiting step, cost key of
# what it waits for, why). The gate Job runs one pod per GPU node (completions = GPU nodes), so
# it can only complete once every node is Ready; it does not depend on the join steps in the program.
IMPLICIT_WAITS: tuple[tuple[str, str, str], ...] = (
    ("gate", "ready", "cluster: one gate pod per GPU node needs every node Ready"),
)


class UnknownStep(Exception):
    pass


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
    if reg.type.startswith("kubernetes:") and fallback and not any(k in reg.type for k in AWAITED_KINDS):
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
        graph[r.urn] = Node(r.urn, r.name, seconds, key, preds, r.parent)
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


def _token_ages(graph: dict[str, Node], finish: dict[str, float]) -> list[tuple[float, float, float]]:
    """A join token lives TOKEN_TTL from when its step runs; the join step must start before that."""
    tokens = {n.parent: u for u, n in graph.items() if n.key == "token"}
    ages = []
    for u, n in graph.items():
        if n.key == "join" and n.parent in tokens:
            minted, used = finish[tokens[n.parent]], finish[u] - n.cost
            ages.append((used - minted, minted, used))
    return ages


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--points", type=_configs.parse_points, default=list(DEFAULT_POINTS),
                        help="comma-separated GPU worker counts (default: %(default)s)")
    parser.add_argument("--cost", action="append", default=[], metavar="KEY=SECONDS",
                        help="override one step's cost (keys: " + ", ".join(c.key for c in COSTS) + ")")
    parser.add_argument("--launcher", choices=("indexed-job", "pytorchjob"), default="indexed-job",
                        help="training.launcher of the evaluated stack (default: %(default)s)")
    args = parser.parse_args(argv)
    costs = _overrides(args.cost)

    from render import program

    print("Cost table (seconds per step; components and providers 0):")
    print("| key | matches | s | rationale | source |")
    print("|---|---|---:|---|---|")
    for c in costs:
        match = f"{c.type} " + " or ".join(f"*{x}" for x in c.suffixes) if c.suffixes else c.type
        print(f"| {c.key} | `{match}` | {c.seconds:.0f} | {c.why} | {c.source} |")
    print()

    results: list[Result] = []
    started = time.perf_counter()
    for n in args.points:
        plan = program.run("lab", config=_configs.lab_config(n, **_configs.lab_layers(args.launcher)))
        try:
            graph = build_graph(plan, costs)
        except UnknownStep as e:
            print(f"critical_path: {e}; add it to COSTS in bench/critical_path.py", file=sys.stderr)
            return 2
        results.append(analyse(n, graph))

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

    ages = [a for r in results for a in r.token_ages]
    if ages:
        oldest, minted, used = max(ages)
        print(f"Join tokens: the oldest is minted at {minted:.0f} s and used by its join at {used:.0f} s: "
              f"{oldest:.0f} s of its {TOKEN_TTL} s TTL (slack {TOKEN_TTL - oldest:.0f} s)"
              + (" -- WARNING: that join would fail with an expired token." if oldest > TOKEN_TTL else "."))
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
