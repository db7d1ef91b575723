"""Kueue's ProvisioningRequest admission check in the whole-cluster check: GKE queued provisioning
(a flexStart pool, components/queues/provisioning.py), as the modelled Kueue
(kueue_objects.MODELLED_VERSION) and GKE run it.

- A ClusterQueue's admission checks (spec.admissionChecks, or admissionChecksStrategy with
  onFlavors: empty means every flavor) must exist, or the ClusterQueue is inactive and admits
  nothing; an AdmissionCheck of controller kueue.x-k8s.io/provisioning-request whose parameters
  name a ProvisioningRequestConfig that does not exist is inactive, and so is the queue.
- A flavor under such a check whose config's provisioningClassName is queued-provisioning.gke.io
  has no nodes until GKE satisfies the ProvisioningRequest Kueue makes for the admitted workload,
  and then all of them at once. A workload there is admissible when the pool behind the flavor
  (the nodes its nodeLabels pick, each pool one node shape) can hold it at its maximum node count,
  whatever runs now: the admission model (kueue_admission.py) already places on the pool's nodes
  up to its maximum; here a workload it never admits gets the pool's count: how many nodes each
  pod set needs on that machine, what the pool scales to, and the shortfall.

Not modelled: whether Google has the capacity (Dynamic Workload Scheduler may wait for hours, or
fail the request after its timeout and Kueue retries), the project's quota, and the
ProvisioningRequest's own limits (maxRunDuration).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from render.cluster.kueue_admission import NEVER, Verdict, on_flavor
from render.cluster.kueue_objects import GROUP, KueueWorld
from render.cluster.objects import Obj
from render.cluster.scheduling import Capacity, place

CONTROLLER = "kueue.x-k8s.io/provisioning-request"
QUEUED_CLASS = "queued-provisioning.gke.io"


@dataclass
class AdmissionCheck:
    name: str
    controller: str
    parameters: dict[str, Any]


@dataclass
class ProvisioningWorld:
    checks: dict[str, AdmissionCheck] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)  # ProvisioningRequestConfig -> its class
    # ClusterQueue -> (AdmissionCheck, the flavors it runs on: empty for all)
    on_queues: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)


def read(objects: list[Obj]) -> ProvisioningWorld:
    pw = ProvisioningWorld()
    for o in objects:
        if not o.api_version.startswith(f"{GROUP}/"):
            continue
        spec = o.body.get("spec") or {}
        if o.kind == "AdmissionCheck":
            pw.checks[o.name] = AdmissionCheck(o.name, str(spec.get("controllerName", "")),
                                               dict(spec.get("parameters") or {}))
        elif o.kind == "ProvisioningRequestConfig":
            pw.configs[o.name] = str(spec.get("provisioningClassName", ""))
        elif o.kind == "ClusterQueue":
            strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
            pw.on_queues[o.name] = ([(str(c), []) for c in spec.get("admissionChecks") or []]
                                    + [(str(c.get("name")), [str(f) for f in c.get("onFlavors") or []]) for c in strategy])
    return pw


def _inactive(pw: ProvisioningWorld, cq: str) -> list[str]:
    """Why the ClusterQueue's admission checks leave it inactive (Kueue admits nothing there)."""
    out = []
    for name, _ in pw.on_queues.get(cq, []):
        check = pw.checks.get(name)
        if check is None:
            out.append(f"ClusterQueue {cq} is inactive: its AdmissionCheck {name} does not exist")
        elif check.controller == CONTROLLER and check.parameters.get("kind") == "ProvisioningRequestConfig" \
                and str(check.parameters.get("name")) not in pw.configs:
            out.append(f"ClusterQueue {cq} is inactive: AdmissionCheck {name} names ProvisioningRequestConfig "
                       f"{check.parameters.get('name')}, which does not exist")
    return out


def queued_flavors(pw: ProvisioningWorld, world: KueueWorld, cq: str) -> list[str]:
    """The ClusterQueue's flavors whose nodes come only through GKE queued provisioning."""
    queue = world.cluster_queues.get(cq)
    if queue is None:
        return []
    own = [name for g in queue.groups for name, _ in g.flavors]
    out: list[str] = []
    for name, on in pw.on_queues.get(cq, []):
        check = pw.checks.get(name)
        if check is None or check.controller != CONTROLLER:
            continue
        if pw.configs.get(str(check.parameters.get("name"))) != QUEUED_CLASS:
            continue
        out += [f for f in (on or own) if f in own and f not in out]
    return out


def pool_shortfalls(world: KueueWorld, v: Verdict, flavor: str, capacity: list[Capacity]) -> list[str]:
    """For each pool behind a queued flavor: the nodes the workload needs there against its maximum."""
    rf = world.flavors.get(flavor)
    if rf is None:
        return []
    pools: dict[str, list[Capacity]] = {}
    for c in capacity:
        if all(c.node.labels.get(k) == val for k, val in rf.node_labels.items()):
            pools.setdefault(c.node.group, []).append(c)
    if not pools:
        return [f"flex-start flavor {flavor}: no node pool carries its nodeLabels {rf.node_labels}"]
    out = []
    for pool, caps in sorted(pools.items()):
        needed, per_set = 0, []
        for ps in v.workload.pod_sets:
            w = on_flavor(ps, rf, v.workload)
            one = place(w, [Capacity(caps[0].node, dict(caps[0].free), caps[0].pods)], keep=False)
            if one.placed == 0:
                why = "; ".join(r for rs in one.reasons.values() for r in rs) or "it does not fit"
                out.append(f"flex-start pool {pool}: a node of it cannot hold one pod of pod set {ps.name} ({why})")
                break
            needed += math.ceil(ps.count / one.placed)
            per_set.append(f"{ps.count} pods of {ps.name} at {one.placed} per node")
        else:
            if needed > len(caps):
                out.append(f"flex-start pool {pool} scales to at most {len(caps)} node{'s' if len(caps) != 1 else ''} "
                           f"(gke.gpuPools[].autoscaling.maxNodes x zones) but the job needs {needed} "
                           f"({', '.join(per_set)}): {needed - len(caps)} node{'s' if needed - len(caps) != 1 else ''} short")
    return out


def refine(v: Verdict, world: KueueWorld, pw: ProvisioningWorld, capacity: list[Capacity]) -> Verdict:
    """The admission model's verdict with what the provisioning checks add: an inactive queue, and
    for a workload never admitted, the flex-start pools that are too small for it."""
    if not v.cluster_queue:
        return v
    inactive = _inactive(pw, v.cluster_queue)
    if inactive:
        return replace(v, state=NEVER, reasons=[*inactive, *(v.reasons if v.state == NEVER else [])])
    if v.state == NEVER:
        extra = [r for f in queued_flavors(pw, world, v.cluster_queue) for r in pool_shortfalls(world, v, f, capacity)]
        return replace(v, reasons=[*v.reasons, *extra])
    return v


def provisioned_by(v: Verdict, world: KueueWorld, pw: ProvisioningWorld) -> str:
    """For the queue line of a workload admitted to a flex-start flavor: how its nodes come."""
    queued = set(queued_flavors(pw, world, v.cluster_queue))
    used = [f for names in v.flavors.values() for f in names.split(", ") if f in queued]
    if v.state == NEVER or not used:
        return ""
    return f"; its nodes come from a ProvisioningRequest ({QUEUED_CLASS}, flavor {', '.join(dict.fromkeys(used))})"
