"""Would each pod land? kube-scheduler's filters, on the modelled nodes:

- NodeName, NodeSelector, required NodeAffinity (matchExpressions In/NotIn/Exists/DoesNotExist/
  Gt/Lt, matchFields on metadata.name);
- TaintToleration: every NoSchedule and NoExecute taint must be tolerated (PreferNoSchedule only
  scores); a DaemonSet's pods get the DaemonSet controller's own tolerations (node conditions);
- NodeResourcesFit: the pod's requests (sum of its containers, or the largest init container if
  larger; a limit alone counts as the request) against what the node has left, for CPU and memory
  where the node's size is known, and for extended resources (nvidia.com/gpu, MIG slices), which a
  node has only while a device plugin runs on it;
- required pod anti-affinity on kubernetes.io/hostname among the pods of one workload.

Order, as `up` brings things up: DaemonSets first (their node labels and device plugins change
what later pods see), then long-running pods (Deployments, StatefulSets, operator-made pods),
which keep their resources; then each Job (and PyTorchJob) on its own against what is left,
since they run one after another (gate, acceptance, training).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from config import LabStack, StackConfig
from config.gpu import GpuStack, MigStrategy, SharingMode
from config.quantities import parse_quantity
from config.queue_units import units_per_gpu
from render.cluster.nodes import Node
from render.cluster.workloads import Workload

# Tolerations the DaemonSet controller adds to every DaemonSet pod (pkg/controller/daemon/util).
DAEMONSET_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]
GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
# GKE runs its own NVIDIA device plugin on GPU nodes unless the pool carries this label.
GKE_NO_DEVICE_PLUGIN = "gke-no-default-nvidia-gpu-device-plugin"


def quantity(value: Any) -> float:
    """A resource quantity as the API server reads it, by the parser the config layer uses too
    (config/quantities.py: so a quantity config accepts never stops the check); a JSON number as it
    is. Quantity.UnmarshalJSON trims spaces before it parses. ValueError for what it would refuse."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    return float(parse_quantity(str(value).strip()))


def _container_requests(c: dict[str, Any], every_resource: bool) -> dict[str, float]:
    res = c.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: quantity(v) for k, v in merged.items() if every_resource or k in ("cpu", "memory") or "/" in k}


def pod_requests(spec: dict[str, Any], every_resource: bool = False) -> dict[str, float]:
    """One pod's requests. The scheduler model judges CPU, memory and extended resources only (a
    node's ephemeral-storage and hugepages are not modelled); `every_resource` keeps every name, as
    Kueue counts them against quota (ephemeral-storage, hugepages-2Mi, ...)."""
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in _container_requests(c, every_resource).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in _container_requests(c, every_resource).items():
            total[k] = max(total.get(k, 0.0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0.0) + quantity(v)
    return total


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        op = t.get("operator", "Equal")
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != taint["key"]:
            continue
        if op == "Exists" or str(t.get("value", "")) == taint.get("value", ""):
            return True
    return False


def _expression(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = str(expr.get("key")), expr.get("operator"), [str(v) for v in expr.get("values") or []]
    has = key in labels
    if op == "In":
        return has and labels[key] in values
    if op == "NotIn":
        return not has or labels[key] not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt") and has and values:
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term(term: dict[str, Any], node: Node) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing
    return all(_expression(e, node.labels) for e in exprs) and all(
        _expression(e, {"metadata.name": node.name}) for e in fields
    )


def selector_reasons(spec: dict[str, Any], node: Node) -> list[str]:
    """Why the pod's node selection (not taints or resources) rules the node out."""
    out = []
    if spec.get("nodeName") and spec["nodeName"] != node.name:
        out.append(f"nodeName is {spec['nodeName']}")
    for k, v in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(k) != str(v):
            out.append(f"nodeSelector {k}={v} (node has {k}={node.labels[k]})" if k in node.labels
                       else f"nodeSelector {k}={v} (label missing)")
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if terms is not None and not any(_term(t, node) for t in terms):
        out.append("required node affinity not matched")
    return out


def taint_reasons(spec: dict[str, Any], node: Node, daemon: bool) -> list[str]:
    tolerations = list(spec.get("tolerations") or []) + (DAEMONSET_TOLERATIONS if daemon else [])
    return [f"untolerated taint {t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}"
            for t in node.taints if t["effect"] in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)]


@dataclass
class Capacity:
    node: Node
    free: dict[str, float]  # resource -> what is left (inf where the size is not known)
    pods: int = 0

    @classmethod
    def of(cls, node: Node) -> Capacity:
        free = {"cpu": node.cpu if node.cpu is not None else math.inf,
                "memory": node.memory if node.memory is not None else math.inf}
        free.update(node.extended)
        return cls(node, free)

    def fit_reasons(self, requests: dict[str, float]) -> list[str]:
        out = []
        for k, v in requests.items():
            if v <= 0:
                continue
            have = self.free.get(k, 0.0)
            if v > have + 1e-9:
                if k in ("cpu", "memory") or have > 0:
                    out.append(f"insufficient {k} (asks {_fmt(k, v)}, {_fmt(k, have)} left)")
                else:
                    out.append(f"no {k} on the node")
        return out

    def take(self, requests: dict[str, float]) -> None:
        for k, v in requests.items():
            if k in self.free:
                self.free[k] -= v
        self.pods += 1


def _fmt(resource: str, v: float) -> str:
    if math.isinf(v):
        return "unbounded"
    if resource == "memory":
        return f"{v / 1024**3:.1f}Gi"
    if resource == "cpu":
        return f"{v:g}"
    return f"{v:g}"


@dataclass
class Placement:
    workload: Workload
    nodes: list[str] = field(default_factory=list)  # where its pods land (DaemonSet: every node)
    eligible: list[str] = field(default_factory=list)  # DaemonSet: nodes its selectors pick
    reasons: dict[str, list[str]] = field(default_factory=dict)  # node -> why not
    placed: int = 0

    @property
    def ok(self) -> bool:
        if self.workload.daemon:
            return not self.eligible or set(self.eligible) <= set(self.nodes)
        return self.placed >= self.workload.pods


def _anti_affinity_hostname(w: Workload) -> bool:
    anti = ((w.spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or []
    own = (w.metadata.get("labels") or {})
    for term in anti:
        if term.get("topologyKey") != HOSTNAME:
            continue
        match = (term.get("labelSelector") or {}).get("matchLabels") or {}
        if match and all(own.get(k) == v for k, v in match.items()):
            return True
    return False


def _advertise(cfg: StackConfig, node: Node) -> dict[str, float]:
    """Extended resources a device plugin advertises on `node` under the stack's sharing mode."""
    sharing = cfg.gpu.sharing
    count = float(node.gpus) if node.gpus_known else math.inf
    if sharing.mode is SharingMode.TIME_SLICING:
        return {GPU: count * sharing.replicas}
    if sharing.mode is SharingMode.MIG:
        # Slices per GPU depend on the GPU model: counted as Kueue's quotas count them where the lab
        # config says (config/queue_units.py: hosts[].gpuModel, or a profile all candidate GPUs
        # hold equally often), else not bounded. Under the single strategy the device plugin
        # advertises each MIG device as nvidia.com/gpu.
        profile = sharing.mig_profile.removeprefix("all-")
        slices = _slices_per_gpu(cfg, node)
        amount = count * slices if slices is not None else math.inf
        if sharing.mig_strategy is MigStrategy.MIXED:
            return {f"nvidia.com/mig-{profile}": amount}
        return {GPU: amount}
    return {GPU: count}


def _slices_per_gpu(cfg: StackConfig, node: Node) -> int | None:
    """MIG instances per GPU on a lab host under the operator's MIG manager, where the config sizes them."""
    if not isinstance(cfg, LabStack) or cfg.gpu.stack is not GpuStack.OPERATOR:
        return None
    host = next((h for h in cfg.hosts if h.name == node.name), None)
    units = units_per_gpu(cfg.gpu, host.gpu_model if host is not None else None)
    return units if isinstance(units, int) else None


def _gke_device_plugin(node: Node) -> bool:
    return node.is_gpu and node.labels.get(GKE_NO_DEVICE_PLUGIN) != "true" and "cloud.google.com/gke-accelerator" in node.labels


def expand(nodes: list[Node], limit: int = 512) -> list[Node]:
    """Node pools as individual nodes (up to their maximum), so pods can spread over them."""
    out = []
    for n in nodes:
        if n.max_count == 1 and n.min_count == 1:
            out.append(n)
            continue
        for i in range(min(n.max_count, limit)):
            clone = Node(f"{n.group}-{i + 1}", n.group, {**n.labels, HOSTNAME: f"{n.group}-{i + 1}"},
                         list(n.taints), n.cpu, n.memory, n.gpus, n.gpus_known, 1, 1 if i < n.min_count else 0,
                         unvalued=n.unvalued, gpu_shares=n.gpu_shares)
            out.append(clone)
    return out


def daemonsets(cfg: StackConfig, nodes: list[Node], loads: list[Workload], gke: bool) -> list[Placement]:
    """Where each DaemonSet runs; sets the node labels and extended resources they bring."""
    ds = [w for w in loads if w.daemon and w.runs_on_install]
    results: dict[int, Placement] = {}
    for _ in range(4):  # NFD labels -> GFD / operator labels -> device plugins; stable after three
        for n in nodes:
            n.extended = {}
            if gke and _gke_device_plugin(n):  # a time-shared pool's GPU is maxSharedClientsPerGpu of them
                n.extended = {k: v * n.gpu_shares for k, v in _advertise(cfg, n).items()}
        changed = False
        for w in ds:
            p = Placement(w)
            requests = pod_requests(w.spec)
            for n in nodes:
                reasons = selector_reasons(w.spec, n)
                if reasons:
                    p.reasons[n.name] = reasons
                    continue
                p.eligible.append(n.name)
                reasons = taint_reasons(w.spec, n, daemon=True) + Capacity.of(n).fit_reasons(
                    {k: v for k, v in requests.items() if k in ("cpu", "memory")})
                if reasons:
                    p.reasons[n.name] = reasons
                else:
                    p.nodes.append(n.name)
            results[id(w)] = p
            for n in nodes:
                if n.name not in p.nodes:
                    continue
                if w.labels_nodes and n.is_gpu:
                    for k, v in w.labels_nodes.items():
                        if n.labels.get(k) != v:
                            n.labels[k] = v
                            changed = True
        # The GPU Operator labels the nodes NFD found an NVIDIA device on for each of its operands.
        operator = [w for w in ds if w.via.startswith("ClusterPolicy")]
        for n in nodes:
            if operator and n.labels.get("feature.node.kubernetes.io/pci-10de.present") == "true":
                for w in operator:
                    for k, v in (w.spec.get("nodeSelector") or {}).items():
                        if n.labels.get(k) != v:
                            n.labels[k] = v
                            changed = True
        if not changed:
            break
    for n in nodes:
        if any(results[id(w)].nodes.count(n.name) for w in ds if w.device_plugin):
            n.extended.update(_advertise(cfg, n))
        for w in ds:
            if w.advertises and n.name in results[id(w)].nodes:
                n.extended.update(w.advertises)
    return [results[id(w)] for w in ds]


def place(w: Workload, capacity: list[Capacity], keep: bool) -> Placement:
    p = Placement(w)
    requests = pod_requests(w.spec)
    distinct = _anti_affinity_hostname(w)
    fixed: dict[str, list[str]] = {}
    candidates: list[Capacity] = []
    for cap in capacity:
        reasons = selector_reasons(w.spec, cap.node) + taint_reasons(w.spec, cap.node, daemon=False)
        if reasons:
            fixed[cap.node.name] = reasons
        else:
            candidates.append(cap)
    scratch = capacity if keep else [Capacity(c.node, dict(c.free), c.pods) for c in capacity]
    by_name = {c.node.name: c for c in scratch}
    used: set[str] = set()
    for _ in range(w.pods):
        best: Capacity | None = None
        for cand in candidates:
            cap = by_name[cand.node.name]
            if distinct and cap.node.name in used:
                continue
            if cap.fit_reasons(requests):
                continue
            # Existing nodes before scale-up ones; then the emptiest (spreads like the default scoring).
            if best is None or (cap.node.min_count, -cap.pods) > (best.node.min_count, -best.pods):
                best = cap
        if best is None:
            break
        best.take(requests)
        used.add(best.node.name)
        p.nodes.append(best.node.name)
        p.placed += 1
    if p.placed < w.pods:
        for cap in capacity:
            name = cap.node.name
            if name in fixed:
                p.reasons[name] = fixed[name]
            else:
                reasons = by_name[name].fit_reasons(requests)
                if distinct and name in used:
                    reasons = reasons or ["already runs one of its pods (required anti-affinity)"]
                p.reasons[name] = reasons or ["taken by the other pods"]
    return p


def schedule(cfg: StackConfig, nodes: list[Node], loads: list[Workload], gke: bool) -> list[Placement]:
    results = daemonsets(cfg, nodes, loads, gke)
    capacity = [Capacity.of(n) for n in nodes]
    by_name = {c.node.name: c for c in capacity}
    for p in results:  # DaemonSet pods take their share of every node they run on
        requests = pod_requests(p.workload.spec)
        for name in p.nodes:
            by_name[name].take({k: v for k, v in requests.items() if k in ("cpu", "memory")})
    long_running = [w for w in loads if not w.daemon and not w.job and w.runs_on_install]
    for w in long_running:
        results.append(place(w, capacity, keep=True))
    # Jobs run one after another; a PyTorchJob's Master and Worker pods run together.
    groups: dict[int, list[Workload]] = {}
    for w in loads:
        if w.job:
            groups.setdefault(id(w.obj), []).append(w)
    for group in groups.values():
        scratch = [Capacity(c.node, dict(c.free), c.pods) for c in capacity]
        for w in group:
            results.append(place(w, scratch, keep=True))
    return results
