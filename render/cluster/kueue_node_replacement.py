"""A host under an admitted topology-placed workload is tainted and its pod evicted: what the modelled
Kueue does with the replacement pod (kueue#9616: pinned to the tainted host, Pending forever).

What it follows (Kueue kueue_objects.MODELLED_VERSION: pkg/controller/tas/node_controller.go, pkg/scheduler/scheduler.go,
pkg/features/kube_features.go, apis/config/v1beta2 waitForPodsReady):

- TAS pins each pod of an admitted workload to the host of its topology assignment (a nodeSelector
  on kubernetes.io/hostname): a pod the Job recreates goes back to the same host.
- With TASFailedNodeReplacement and TASReplaceNodeOnNodeTaints (both need TopologyAwareScheduling),
  a NoSchedule/NoExecute taint the pod set does not tolerate, once its pod there is gone
  (TASReplaceNodeOnPodTermination), marks the host unhealthy for the workload, and the scheduler
  looks for a replacement host: in the same domain of the pod set's required topology level
  (anywhere on the flavor's nodes without one), a host with room for the pod that it tolerates.
- None found: TASFailedNodeReplacementFailFast evicts the workload (reason NodeFailures, requeued
  at once: pkg/controller/core/workload_controller.go backs off PodsReadyTimeout evictions only);
  without it the pod waits, and waitForPodsReady.recoveryTimeout (default: its timeout; "0s" turns
  it off) evicts the workload once PodsReady has been false that long, requeued after the backoff.
- Gates off: the pod stays pinned; only recoveryTimeout ends the wait. Both off: Pending forever.

The gates take the modelled Kueue's defaults (all on) unless the manager's Configuration.featureGates
says otherwise; the chart's --feature-gates flag is not read (components/queues/kueue.py keeps it
empty: Kueue refuses both at once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from components.gpu_health import TAINT_KEY, UNSCHEDULABLE_TAINT
from render.cluster.kueue_admission import ADMITTED, Verdict, _flavor_nodes, on_flavor
from render.cluster.kueue_objects import MANAGER_CONFIG_KEY, KueueWorld, PodSet
from render.cluster.nodes import Node
from render.cluster.objects import Obj
from render.cluster.scheduling import Capacity, place, pod_requests

REPLACED, REQUEUED, PINNED = "replaced", "requeued", "pinned"
# What a node the GPU health service takes out carries (workloads/gpuhealth/actions.py: its taint,
# valued by the reason, e.g. a fatal XID; cordoned, so the node controller's taint too).
GPU_UNHEALTHY_TAINTS = ({"key": TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"},
                        {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
HOSTNAME = "kubernetes.io/hostname"
# The modelled Kueue's (kueue_objects.MODELLED_VERSION) defaults (pkg/features/kube_features.go: Beta, on since 0.14; OnNodeTaints since 0.17).
DEFAULT_GATES = {"TopologyAwareScheduling": True, "TASFailedNodeReplacement": True, "TASReplaceNodeOnNodeTaints": True,
                 "TASReplaceNodeOnPodTermination": True, "TASFailedNodeReplacementFailFast": True}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def go_duration(text: str) -> float:
    """Seconds in a Go duration ("10m", "1h30m", "0s")."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * _SECONDS[u] for n, u in parts)


@dataclass
class Recovery:
    """What the manager's Configuration says about failed-node replacement and recovery."""
    gates: dict[str, bool] = field(default_factory=lambda: dict(DEFAULT_GATES))
    recovery_timeout_s: float | None = None  # None: waitForPodsReady off; 0: recovery checking off

    def on(self, *gates: str) -> bool:
        return all(self.gates.get(g, False) for g in gates)

    @property
    def replaces_tainted_nodes(self) -> bool:
        return self.on("TopologyAwareScheduling", "TASFailedNodeReplacement", "TASReplaceNodeOnNodeTaints")

    @property
    def fail_fast(self) -> bool:
        return self.replaces_tainted_nodes and self.on("TASFailedNodeReplacementFailFast")

    @classmethod
    def from_config(cls, doc: dict[str, Any]) -> Recovery:
        gates = {**DEFAULT_GATES, **{str(k): bool(v) for k, v in (doc.get("featureGates") or {}).items()}}
        ready = doc.get("waitForPodsReady")
        if ready is None or ready.get("enable") is False:  # v1beta1 had `enable`; v1beta2: the block's presence
            return cls(gates, None)
        timeout = go_duration(str(ready.get("timeout") or "5m"))
        recovery = ready.get("recoveryTimeout")
        return cls(gates, timeout if recovery is None else go_duration(str(recovery)))


def recovery_of(objects: list[Obj]) -> Recovery | None:
    """The manager Configuration's recovery settings, from its ConfigMap; None without one."""
    for o in objects:
        text = (o.body.get("data") or {}).get(MANAGER_CONFIG_KEY) if o.kind == "ConfigMap" else None
        if isinstance(text, str):
            doc = yaml.safe_load(text) or {}
            if doc.get("kind") == "Configuration":
                return Recovery.from_config(doc)
    return None


@dataclass
class Outcome:
    state: str  # REPLACED, REQUEUED or PINNED
    node: str | None = None  # REPLACED: the host the new pod goes to
    after_s: float | None = None  # REQUEUED: seconds after the pod was lost (0: at once)
    reason: str = ""


def tainted(node: Node, taints: tuple[dict[str, str], ...]) -> Node:
    return replace(node, labels=dict(node.labels), taints=[*node.taints, *taints], extended=dict(node.extended))


def _running(world: KueueWorld, verdicts: list[Verdict], capacity: list[Capacity]) -> list[Capacity]:
    """The nodes' capacity with every admitted workload's pods on the hosts they were placed on."""
    free = [Capacity(c.node, dict(c.free), c.pods) for c in capacity]
    by_name = {c.node.name: c for c in free}
    for v in verdicts:
        if v.state != ADMITTED:
            continue
        for ps in v.workload.pod_sets:
            rf = world.flavors[v.flavors[ps.name].split(", ")[-1]]
            requests = pod_requests(on_flavor(ps, rf, v.workload).spec)
            for name in v.nodes.get(ps.name, []):
                if name in by_name:
                    by_name[name].take(requests)
    return free


def _pod_set(v: Verdict, name: str) -> PodSet:
    (ps,) = [p for p in v.workload.pod_sets if p.name == name]
    return ps


def replace_pod(world: KueueWorld, recovery: Recovery, verdicts: list[Verdict], capacity: list[Capacity],
                victim: Verdict, pod_set: str, host: str,
                taints: tuple[dict[str, str], ...] = GPU_UNHEALTHY_TAINTS) -> Outcome:
    """`host`, under one pod of `victim`'s `pod_set`, gets `taints` and that pod is evicted: where
    its replacement goes, or when the workload is requeued, or that it stays pinned."""
    ps = _pod_set(victim, pod_set)
    rf = world.flavors[victim.flavors[ps.name].split(", ")[-1]]
    if host not in victim.nodes.get(ps.name, []):
        raise ValueError(f"{victim.workload.ref} has no pod of {pod_set} on {host}")
    pod = on_flavor(ps, rf, victim.workload)
    free = _running(world, verdicts, capacity)
    for c in free:
        if c.node.name == host:  # tainted, its pod gone
            c.node = tainted(c.node, taints)
            for k, v in pod_requests(pod.spec).items():
                if k in c.free:
                    c.free[k] += v
            c.pods -= 1
    by_name = {c.node.name: c for c in free}
    pinned = {**pod.spec, "nodeSelector": {**(pod.spec.get("nodeSelector") or {}), HOSTNAME: host}}
    if place(replace(pod, spec=pinned, pods=1), [by_name[host]], keep=False).ok:
        return Outcome(REPLACED, host, reason=f"the pods tolerate {', '.join(t['key'] for t in taints)}: the new "
                                             f"pod runs on {host} again")
    if not recovery.replaces_tainted_nodes:
        return _stuck(recovery, host, "the failed-node replacement gates are off: the new pod is pinned to "
                                      f"{host} by its topology assignment")
    level = ps.required_topology
    levels = world.topologies.get(rf.topology or "", [])
    domain = by_name[host].node.labels.get(level) if level else None
    candidates = [c for c in _flavor_nodes(free, rf, levels) if c.node.name != host
                  and (level is None or c.node.labels.get(level) == domain)]
    placed = place(replace(pod, pods=1), candidates, keep=True)
    if placed.ok:
        return Outcome(REPLACED, placed.nodes[0], reason=f"{host} is unhealthy for the workload; replaced by "
                                                         f"{placed.nodes[0]}" + (f" ({level}={domain})" if level else ""))
    where = f"{level}={domain}" if level else f"flavor {rf.name}"
    if recovery.fail_fast:
        return Outcome(REQUEUED, after_s=0.0, reason=f"no host of {where} has room for the pod: "
                                                    "TASFailedNodeReplacementFailFast evicts and requeues it")
    return _stuck(recovery, host, f"no host of {where} has room for the pod")


def _stuck(recovery: Recovery, host: str, why: str) -> Outcome:
    if recovery.recovery_timeout_s:
        return Outcome(REQUEUED, after_s=recovery.recovery_timeout_s,
                       reason=f"{why}; waitForPodsReady.recoveryTimeout evicts and requeues the workload")
    return Outcome(PINNED, host, reason=f"{why}, and no waitForPodsReady.recoveryTimeout ends the wait: "
                                        "Pending forever (kueue#9616)")


def pinned_after_taint(world: KueueWorld, objects: list[Obj], verdicts: list[Verdict],
                       capacity: list[Capacity]) -> list[str]:
    """Each admitted topology-placed workload (judged alone, as `verdicts` are), the GPU health
    service tainting the host of its first pod: a problem where the replacement would stay Pending
    forever."""
    recovery = recovery_of(objects)
    if recovery is None:
        return []
    out = []
    for v in verdicts:
        if v.state != ADMITTED:
            continue
        for ps in v.workload.pod_sets:
            rf = world.flavors[v.flavors[ps.name].split(", ")[-1]]
            hosts = v.nodes.get(ps.name) or []
            if not rf.topology or not hosts:
                continue
            outcome = replace_pod(world, recovery, [v], capacity, v, ps.name, hosts[0])
            if outcome.state == PINNED:
                out.append(f"{v.workload.ref} (LocalQueue {v.queue}, {v.workload.obj.origin}): if the GPU health "
                           f"service taints {hosts[0]} ({TAINT_KEY}) under pod set {ps.name}: {outcome.reason}; keep the Kueue "
                           "manager's featureGates TASFailedNodeReplacement and TASReplaceNodeOnNodeTaints on, or "
                           "waitForPodsReady.recoveryTimeout above 0s")
            break
    return out
