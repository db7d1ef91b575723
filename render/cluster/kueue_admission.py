"""Would Kueue admit it? Quota, flavors, cohorts and topology, as the modelled Kueue decides, on the nodes
the whole-cluster check models.

What it follows (the sources of Kueue kueue_objects.MODELLED_VERSION; docs "Cluster Queue" and "Topology Aware Scheduling"):

- A queued workload's namespace must match the manager's managedJobsNamespaceSelector, where set
  (jobframework/reconciler.go checks it for every job: no Workload otherwise). Its LocalQueue must
  exist in its namespace and name an existing ClusterQueue whose namespaceSelector matches the
  namespace (null matches none, {} every one); a ClusterQueue that names a ResourceFlavor (or a
  flavor a Topology) that does not exist is inactive and admits nothing.
- Every resource a pod set requests (every name: ephemeral-storage and hugepages-* too) must be
  covered by a resource group (quotaCheckStrategy BlockUndeclared, the default), minus
  resources.excludeResourcePrefixes; a zero request needs no cover.
- Flavor assignment (pkg/scheduler/flavorassigner/flavorassigner.go, findFlavorForPodSets): per
  pod set and resource group, the group's flavors in order; a flavor whose nodeTaints the pods do
  not tolerate (with the flavor's own tolerations) or whose nodeLabels contradict the pods' node
  selection (only the flavor's own label keys count: flavorSelector) is skipped; the quota of each
  covered resource, counting the pod sets of the same workload already assigned, must fit:
  more than the most the ClusterQueue can ever use (potentialAvailable) is no fit, more than what
  is unused now (available) waits. whenCanBorrow MayStopSearch (the default) keeps the first
  flavor that fits, borrowing or not; TryNextFlavor looks for one that fits without borrowing.
- Cohorts (pkg/cache/scheduler/resource_node.go, available/potentialAvailable): a ClusterQueue
  keeps nominalQuota - lendingLimit for itself (all of it lendable without a lendingLimit), the
  cohort pools what its members lend, a member borrows from the pool's unused part at most its
  borrowingLimit.
- Admission is all-or-nothing and in order: a workload's whole quota is reserved when it is
  admitted (admit_in_order); the next waits until that quota is free again.
- Topology (TAS): a flavor with topologyName places its pod sets on its nodes that carry every
  level's label (a node without one is left out: GKE's topology labels exist on some capacity
  only; the check's node model has them where the plan writes them, and on A4 / A3 Ultra
  reservation pools without their values: there a required level is judged on per-node fit only,
  and render warns that the domain is Google's placement), after DaemonSets and
  long-running pods: a pod set annotated podset-required-topology: <level>
  needs one domain of that level (nodes sharing the label's value) that holds all its pods, the
  tightest such domain is taken (Kueue's BestFit); a flavor whose nodes cannot hold it is no
  flavor for it, and the next one is tried.
- Nodes (the brief of issue 25, beyond Kueue's quota): a flavor without topology admits on quota
  alone, so a workload admitted whose pods its flavor's nodes can never hold (taints they do not
  tolerate, such as the GPU health service's gpu-cluster.io/gpu-unhealthy, selectors, too few
  GPUs) is reported: its pods would stay Pending and waitForPodsReady would requeue it forever
  (kueue#9616 is the same trap with pods pinned to a tainted node: what Kueue does when a host
  under an admitted topology-placed workload is tainted is kueue_node_replacement.py).

Not modelled here: preemption (kueue_preemption.py wraps admit_in_order with it; here a workload
that would fit after preempting lower priorities is counted as waiting), fair sharing, hierarchical
Cohort objects, admission checks (GKE's queued provisioning: kueue_provisioning.py, applied by
kueue_check.py; others counted as passing), partial admission, and the timing of waitForPodsReady
and requeueing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from render.cluster.kueue_objects import (
    FRAMEWORKS,
    ClusterQueue,
    KueueWorld,
    PodSet,
    QueuedWorkload,
    ResourceFlavor,
    admitted_pod_spec,
)
from render.cluster.network_policy import selector_matches
from render.cluster.nodes import Node
from render.cluster.scheduling import Capacity, Placement, place, pod_requests, selector_reasons, tolerates
from render.cluster.workloads import Workload

ADMITTED, WAITING, NEVER = "admitted", "waiting", "never"
NO_FIT, WAITS, FITS = 0, 1, 2  # a flavor's mode, best last
# The nodes whose level label exists but whose value no offline check knows (nodes.py: Google's
# topology labels on A4 / A3 Ultra reservation pools), taken together as one domain.
UNKNOWN_DOMAIN = "(value unknown offline)"


@dataclass
class Verdict:
    workload: QueuedWorkload
    state: str  # ADMITTED, WAITING (fits once quota is free again) or NEVER
    cluster_queue: str = ""
    reasons: list[str] = field(default_factory=list)
    flavors: dict[str, str] = field(default_factory=dict)  # pod set -> flavors it got ("gpu-a100")
    usage: dict[tuple[str, str], float] = field(default_factory=dict)  # (flavor, resource) -> quota it takes
    borrowed: dict[tuple[str, str], float] = field(default_factory=dict)  # of which borrowed from the cohort
    nodes: dict[str, list[str]] = field(default_factory=dict)  # pod set -> nodes its pods would take

    @property
    def queue(self) -> str:
        return f"{self.workload.namespace}/{self.workload.queue}"


def _fmt(resource: str, v: float) -> str:
    if resource == "memory":
        return f"{v / 1024**3:g}Gi"
    return f"{v:g}"


class QuotaBook:
    """What each ClusterQueue uses per (flavor, resource), and what it may still use: Kueue's
    resource tree with one cohort level."""

    def __init__(self, world: KueueWorld):
        self.world = world
        self.usage: dict[str, dict[tuple[str, str], float]] = {name: {} for name in world.cluster_queues}

    def _members(self, cohort: str) -> list[ClusterQueue]:
        return [cq for cq in self.world.cluster_queues.values() if cq.cohort == cohort]

    @staticmethod
    def nominal(cq: ClusterQueue, fr: tuple[str, str]) -> float:
        q = cq.quota(*fr)
        return q.nominal if q else 0.0

    @staticmethod
    def _guaranteed(cq: ClusterQueue, fr: tuple[str, str]) -> float:
        q = cq.quota(*fr)
        if q is None or q.lending_limit is None:
            return 0.0
        return max(0.0, q.nominal - q.lending_limit)

    def used(self, cq: ClusterQueue, fr: tuple[str, str]) -> float:
        return self.usage.setdefault(cq.name, {}).get(fr, 0.0)

    def _cohort(self, cohort: str, fr: tuple[str, str]) -> tuple[float, float]:
        """(what the cohort's members lend, what of it they use beyond what they keep)."""
        members = self._members(cohort)
        lent = sum(self.nominal(m, fr) - self._guaranteed(m, fr) for m in members)
        used = sum(max(0.0, self.used(m, fr) - self._guaranteed(m, fr)) for m in members)
        return lent, used

    def available(self, cq: ClusterQueue, fr: tuple[str, str]) -> float:
        nominal, guaranteed, usage = self.nominal(cq, fr), self._guaranteed(cq, fr), self.used(cq, fr)
        if not cq.cohort:
            return nominal - usage
        lent, lent_used = self._cohort(cq.cohort, fr)
        parent = lent - lent_used
        q = cq.quota(*fr)
        if q is not None and q.borrowing_limit is not None:
            parent = min(nominal - guaranteed - max(0.0, usage - guaranteed) + q.borrowing_limit, parent)
        return max(0.0, guaranteed - usage) + parent

    def potential(self, cq: ClusterQueue, fr: tuple[str, str]) -> float:
        nominal = self.nominal(cq, fr)
        if not cq.cohort:
            return nominal
        most = self._guaranteed(cq, fr) + self._cohort(cq.cohort, fr)[0]
        q = cq.quota(*fr)
        if q is not None and q.borrowing_limit is not None:
            most = min(nominal + q.borrowing_limit, most)
        return most

    def add(self, cq: ClusterQueue, usage: dict[tuple[str, str], float]) -> None:
        book = self.usage.setdefault(cq.name, {})
        for fr, v in usage.items():
            book[fr] = book.get(fr, 0.0) + v


def _structure(world: KueueWorld, wl: QueuedWorkload) -> tuple[ClusterQueue | None, list[str]]:
    """The workload's ClusterQueue, or why Kueue would never take it."""
    if world.config is None:
        return None, [f"it names LocalQueue {wl.queue}, but the plan installs no Kueue (no kueue manager "
                      "Configuration): nothing queues it"]
    framework = FRAMEWORKS[wl.obj.kind]
    if framework not in world.config.frameworks:
        return None, [f"Kueue does not manage {wl.obj.kind}s: {framework} is not in the manager's "
                      "integrations.frameworks, so it would start at once, unqueued"]
    managed = world.config.managed_namespaces
    if managed is not None and not selector_matches(managed, world.labels_of(wl.namespace)):
        return None, [f"namespace {wl.namespace} is outside the manager's managedJobsNamespaceSelector {managed}: "
                      "Kueue makes no Workload for its jobs, queue-name label or not, and they stay suspended"]
    key = (wl.namespace, wl.queue)
    if key not in world.local_queues:
        return None, [f"LocalQueue {wl.namespace}/{wl.queue} does not exist"]
    if key in world.local_stopped:
        return None, [f"LocalQueue {wl.namespace}/{wl.queue} is stopped (stopPolicy)"]
    name = world.local_queues[key]
    cq = world.cluster_queues.get(name)
    if cq is None:
        return None, [f"LocalQueue {wl.namespace}/{wl.queue} points at ClusterQueue {name}, which does not exist"]
    problems = []
    for group in cq.groups:
        for flavor, _ in group.flavors:
            rf = world.flavors.get(flavor)
            if rf is None:
                problems.append(f"ClusterQueue {name} is inactive: its ResourceFlavor {flavor} does not exist")
            elif rf.topology and rf.topology not in world.topologies:
                problems.append(f"ClusterQueue {name} is inactive: ResourceFlavor {flavor} names Topology "
                                f"{rf.topology}, which does not exist")
    if cq.stop_policy != "None":
        problems.append(f"ClusterQueue {name} is stopped (stopPolicy {cq.stop_policy})")
    if cq.namespace_selector is None or not selector_matches(cq.namespace_selector, world.labels_of(wl.namespace)):
        problems.append(f"ClusterQueue {name} does not admit workloads from namespace {wl.namespace} "
                        f"(namespaceSelector {cq.namespace_selector if cq.namespace_selector is not None else 'unset: none'})")
    return cq, problems


def _flavor_mismatch(ps: PodSet, rf: ResourceFlavor) -> str | None:
    """Kueue's checkFlavorForPodSets: taints of the flavor tolerated, its labels not contradicted."""
    tolerations = [*(ps.spec.get("tolerations") or []), *rf.tolerations]
    for taint in rf.node_taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"flavor {rf.name}: untolerated taint {taint.get('key')}:{taint.get('effect')}"
    own_keys = {**ps.spec, "nodeSelector": {k: v for k, v in (ps.spec.get("nodeSelector") or {}).items() if k in rf.node_labels}}
    terms: list[dict[str, Any]] = []
    required = (((ps.spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") in rf.node_labels]
        if not exprs:  # a term left empty matches every flavor (the terms are ORed)
            terms = []
            break
        terms.append({"matchExpressions": exprs})
    own_keys["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}} if terms else {}
    own_keys.pop("nodeName", None)
    as_node = Node(f"flavor {rf.name}", "flavor", dict(rf.node_labels), [])
    if selector_reasons(own_keys, as_node):
        return f"flavor {rf.name}: its nodeLabels {rf.node_labels} do not match the pods' node selection"
    return None


def on_flavor(ps: PodSet, rf: ResourceFlavor, obj_ref: QueuedWorkload) -> Workload:
    """The pod set as its pods run once admitted: Kueue adds the flavor's nodeLabels to their
    nodeSelector and its tolerations to theirs."""
    return Workload(obj_ref.obj.kind, obj_ref.namespace, f"{obj_ref.obj.name}/{ps.name}", obj_ref.obj,
                    admitted_pod_spec(ps.spec, [rf]),
                    ps.metadata, ps.count, job=True)


def _scratch(capacity: list[Capacity]) -> list[Capacity]:
    return [Capacity(c.node, dict(c.free), c.pods) for c in capacity]


def _pods_that_fit(cap: Capacity, per_pod: dict[str, float]) -> float:
    counts = [math.floor(cap.free.get(k, 0.0) / v + 1e-9) for k, v in per_pod.items() if v > 0 and not math.isinf(cap.free.get(k, 0.0))]
    return float(min(counts)) if counts else math.inf


def place_in_topology(w: Workload, rf: ResourceFlavor, level: str | None, levels: list[str],
                      capacity: list[Capacity]) -> tuple[Placement | None, str]:
    """Where TAS puts the pod set: one domain of `level` (the tightest that holds it), or anywhere
    on the flavor's nodes. Reserves what it takes in `capacity`; (None, why) when nothing holds it."""
    if level is not None and level not in levels:
        return None, f"flavor {rf.name}: its Topology has no level {level} (levels: {', '.join(levels)})"
    domains: dict[str, list[Capacity]] = {}
    for cap in capacity:
        if level is None:
            domains.setdefault("", []).append(cap)
        elif level in cap.node.labels:
            domains.setdefault(cap.node.labels[level], []).append(cap)
        elif level in cap.node.unvalued:  # Google's label, its value unknown: per-node fit only (render warns)
            domains.setdefault(UNKNOWN_DOMAIN, []).append(cap)
    per_pod = pod_requests(w.spec)
    fitting: list[tuple[float, str, list[Capacity]]] = []
    shortfalls = []
    for value, caps in sorted(domains.items()):
        trial = place(w, _scratch(caps), keep=True)
        if trial.ok:
            room = sum(_pods_that_fit(c, per_pod) for c in caps if not selector_reasons(w.spec, c.node))
            fitting.append((room, value, caps))
        else:
            shortfalls.append(f"{level}={value}: {trial.placed} of {w.pods}" if level else f"{trial.placed} of {w.pods}")
    if not fitting:
        where = f"no {level} domain holds all {w.pods} pods" if level else f"its nodes hold only {shortfalls[0] if shortfalls else '0'} pods"
        detail = f" ({'; '.join(shortfalls)})" if level and shortfalls else ""
        if list(domains) == [UNKNOWN_DOMAIN]:  # not even one domain of all the flavor's nodes holds it
            where, detail = f"its nodes hold only {shortfalls[0].rsplit(': ', 1)[1]} pods, whatever {level} Google gives them", ""
        return None, f"flavor {rf.name}: {where}{detail}"
    _, _, caps = min(fitting, key=lambda f: (f[0], f[1]))
    return place(w, caps, keep=True), ""


def evaluate(world: KueueWorld, book: QuotaBook, wl: QueuedWorkload, free: list[Capacity],
             base: list[Capacity] | None = None) -> Verdict:
    """Kueue's decision for one workload against `book` and the nodes' `free` capacity (a TAS flavor
    reserves what it takes there); `base` is the idle cluster's (default: `free`)."""
    cq, problems = _structure(world, wl)
    if cq is None or problems:
        return Verdict(wl, NEVER, cq.name if cq else "", problems)
    assert world.config is not None
    verdict = Verdict(wl, ADMITTED, cq.name)
    taken_capacity = _scratch(free)
    for ps in wl.pod_sets:
        requests = {k: v for k, v in ps.total.items()
                    if v > 0 and not any(k.startswith(p) for p in world.config.exclude_prefixes)}
        by_group: dict[int, dict[str, float]] = {}
        for resource, v in requests.items():
            group = cq.group_of(resource)
            if group is None:
                # Kueue kueue_objects.MODELLED_VERSION, pkg/scheduler/flavorassigner/flavorassigner.go, findFlavorForPodSetResource:
                # no resource group covers it -> "resource X unavailable in ClusterQueue", never admitted.
                if not world.config.ignore_undeclared:
                    return Verdict(wl, NEVER, cq.name, [f"pod set {ps.name} asks for {resource}, which ClusterQueue "
                                                        f"{cq.name} does not cover (coveredResources): Kueue "
                                                        f"reports \"resource {resource} unavailable in ClusterQueue\""])
                continue
            by_group.setdefault(cq.groups.index(group), {})[resource] = v
        names = []
        for index in sorted(by_group):
            outcome = _assign_group(world, book, cq, wl, ps, by_group[index], verdict.usage, taken_capacity,
                                    base if base is not None else free, cq.groups[index].flavors)
            if isinstance(outcome, Verdict):
                return outcome
            flavor, usage, placed = outcome
            names.append(flavor)
            for fr, v in usage.items():
                verdict.usage[fr] = verdict.usage.get(fr, 0.0) + v
            verdict.nodes[ps.name] = placed.nodes  # the last group's placement carries every resource
        verdict.flavors[ps.name] = ", ".join(dict.fromkeys(names))
    for fr, v in verdict.usage.items():
        over = book.used(cq, fr) + v - book.nominal(cq, fr)
        if over > 1e-9:
            verdict.borrowed[fr] = min(over, v)
    free[:] = taken_capacity
    return verdict


def _assign_group(world: KueueWorld, book: QuotaBook, cq: ClusterQueue, wl: QueuedWorkload, ps: PodSet,
                  requests: dict[str, float], assigned: dict[tuple[str, str], float], free: list[Capacity],
                  base: list[Capacity], flavors: list[tuple[str, Any]]) -> Verdict | tuple[str, dict[tuple[str, str], float], Placement]:
    """findFlavorForPodSets for one resource group: (flavor, its usage, where the pods go) or why not."""
    reasons: list[str] = []
    best: tuple[int, str, dict[tuple[str, str], float], Placement | None, list[Capacity]] | None = None
    for flavor, _ in flavors:
        rf = world.flavors[flavor]
        mismatch = _flavor_mismatch(ps, rf)
        if mismatch:
            reasons.append(mismatch)
            continue
        usage = {(flavor, r): v for r, v in requests.items()}
        mode, borrows = FITS, False
        for fr, v in usage.items():
            want = assigned.get(fr, 0.0) + v
            most, nominal = book.potential(cq, fr), book.nominal(cq, fr)
            if want > most + 1e-9:
                lend = f" + {_fmt(fr[1], most - nominal)} borrowed from cohort {cq.cohort}" if cq.cohort else ", no cohort"
                reasons.append(f"flavor {flavor}: {fr[1]} asks {_fmt(fr[1], want)}, ClusterQueue {cq.name} can use at "
                               f"most {_fmt(fr[1], most)} (nominal {_fmt(fr[1], nominal)}{lend})")
                mode = NO_FIT
                break
            if want > book.available(cq, fr) + 1e-9:
                mode = min(mode, WAITS)
            borrows = borrows or book.used(cq, fr) + want > nominal + 1e-9
        if mode == NO_FIT:
            continue
        scratch = _scratch(free)
        placed: Placement | None = None
        if rf.topology:
            levels = world.topologies.get(rf.topology, [])
            unlabelled = _unlabelled(rf, levels, base, ps.required_topology)
            if unlabelled:
                reasons.append(unlabelled)
                continue
            placed, why = place_in_topology(on_flavor(ps, rf, wl), rf, ps.required_topology, levels,
                                            _flavor_nodes(scratch, rf, levels))
            if placed is None:
                idle, _ = place_in_topology(on_flavor(ps, rf, wl), rf, ps.required_topology, levels,
                                            _flavor_nodes(_scratch(base), rf, levels))
                if idle is None:
                    reasons.append(why)
                    continue
                mode = WAITS  # its domain is taken by workloads admitted before it
        rank = mode * 2 + (0 if borrows else 1)
        if best is None or rank > best[0]:
            best = (rank, flavor, usage, placed, scratch)
        if mode == FITS and (not borrows or cq.when_can_borrow == "MayStopSearch"):
            break
    if best is None:
        return Verdict(wl, NEVER, cq.name, [f"pod set {ps.name} fits no flavor of ClusterQueue {cq.name}: "
                                            + "; ".join(reasons or ["no flavor"])])
    rank, flavor, usage, placed, scratch = best
    if rank < FITS * 2:  # fits only once the workloads admitted before it free their quota or nodes
        short = [f"{fr[1]} in flavor {fr[0]} ({_fmt(fr[1], assigned.get(fr, 0.0) + v)} asked, "
                 f"{_fmt(fr[1], max(0.0, book.available(cq, fr)))} unused)" for fr, v in usage.items()
                 if assigned.get(fr, 0.0) + v > book.available(cq, fr) + 1e-9]
        return Verdict(wl, WAITING, cq.name, [f"waits for {'quota: ' + ', '.join(short) if short else 'nodes of its topology domain'}"])
    if placed is None:  # no topology: quota admits it; can the flavor's nodes ever hold its pods?
        rf = world.flavors[flavor]
        placed = place(on_flavor(ps, rf, wl), _flavor_nodes(_scratch(base), rf), keep=True)
        if not placed.ok:
            why = " | ".join(f"{n}: {'; '.join(r)}" for n, r in sorted(placed.reasons.items())) or "the flavor matches no node"
            return Verdict(wl, NEVER, cq.name, [
                f"admitted by quota to flavor {flavor}, but only {placed.placed} of {ps.count} pods of pod set "
                f"{ps.name} can be placed on its nodes ({why}): they would stay Pending"])
    else:
        free[:] = scratch
    return flavor, usage, placed


def _flavor_nodes(capacity: list[Capacity], rf: ResourceFlavor, levels: list[str] | None = None) -> list[Capacity]:
    """The flavor's nodes: its nodeLabels; on a TAS flavor (`levels`) only those that carry every
    level's label, as Kueue finds them (pkg/cache/scheduler/tas_flavor.go: nodesCache.find)."""
    return [c for c in capacity if all(c.node.labels.get(k) == v for k, v in rf.node_labels.items())
            and all(_carries(c.node, level) for level in levels or [])]


def _carries(node: Node, label: str) -> bool:
    return label in node.labels or label in node.unvalued


def _unlabelled(rf: ResourceFlavor, levels: list[str], capacity: list[Capacity], required: str | None) -> str | None:
    """Why a TAS flavor has no node at all: none of its nodes carries every level's label (GKE writes
    its topology labels on some capacity only; a lab host without its rack)."""
    nodes = _flavor_nodes(capacity, rf)
    if _flavor_nodes(nodes, rf, levels) or not nodes:
        return None
    missing = [level for level in levels if not all(_carries(c.node, level) for c in nodes)]
    need = f"; the job requires one {required} domain" if required else ""
    google = ("; Google writes cloud.google.com/gce-topology-* on A4 and A3 Ultra nodes of a reservation only"
              if any(m.startswith("cloud.google.com/gce-topology-") for m in missing) else "")
    return (f"flavor {rf.name}: none of its {len(nodes)} node(s) carries every level of Topology {rf.topology} "
            f"(missing: {', '.join(missing)}), and Kueue leaves such a node out of the flavor{need}{google}")


def admit_in_order(world: KueueWorld, workloads: list[QueuedWorkload], capacity: list[Capacity]) -> list[Verdict]:
    """Kueue's queue: each workload, in order, admitted whole when its quota (and, on a TAS
    flavor, its nodes) is free, its quota then reserved for the next; otherwise it waits."""
    book = QuotaBook(world)
    free = _scratch(capacity)
    out = []
    for wl in workloads:
        v = evaluate(world, book, wl, free, base=capacity)
        if v.state == ADMITTED:
            book.add(world.cluster_queues[v.cluster_queue], v.usage)
        out.append(v)
    return out


def each_alone(world: KueueWorld, capacity: list[Capacity]) -> list[Verdict]:
    """Each queued workload against an otherwise idle cluster: NEVER means it can never run."""
    return [evaluate(world, QuotaBook(world), wl, _scratch(capacity)) for wl in world.workloads]


def capacity_after(nodes: list[Node], placements: list[Placement]) -> list[Capacity]:
    """What each node has left for queued jobs once DaemonSets and long-running pods run (as
    scheduling.schedule counts them: DaemonSet pods take CPU and memory only)."""
    capacity = [Capacity.of(n) for n in nodes]
    by_name = {c.node.name: c for c in capacity}
    for p in placements:
        w = p.workload
        if w.job or not w.runs_on_install:
            continue
        requests = pod_requests(w.spec)
        if w.daemon:
            requests = {k: v for k, v in requests.items() if k in ("cpu", "memory")}
        for name in p.nodes:
            if name in by_name:
                by_name[name].take(requests)
    return capacity
