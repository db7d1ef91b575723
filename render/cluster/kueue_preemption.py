"""Preemption in Kueue's admission model: which admitted workloads the modelled Kueue evicts to admit a
waiting one, with ClusterQueue `spec.preemption` as configured (components/queues/objects.py sets
withinClusterQueue LowerPriority and reclaimWithinCohort Any, and leaves borrowWithinCohort at its
default, Never). Fair sharing is not modelled: the program's Kueue configuration does not enable it
(no `fairSharing` in the manager's Configuration, components/queues/kueue.py), and Kueue then uses
this classical preemption.

What it follows (Kueue kueue_objects.MODELLED_VERSION, pkg/scheduler/preemption/preemption.go classicalPreemptions,
classical/candidate_generator.go and hierarchical_preemption.go, common/ordering.go and
preemption_policy.go, flavorassigner.go fitsResourceQuota), for one cohort level:

- Priority: the workload's WorkloadPriorityClass (label kueue.x-k8s.io/priority-class), else its
  pods' PriorityClass (priorityClassName), else a globalDefault PriorityClass, else 0. A label
  naming no WorkloadPriorityClass gets no Workload at all: never admitted, it evicts no one.
- A waiting workload may preempt for the (flavor, resource) pairs its request does not fit in
  what is unused (`frsNeedPreemption`), only when it fits the ClusterQueue's most (nominal +
  borrowingLimit, what the cohort lends) and: its request is within the nominal quota, or the
  queue stays within nominal with it and is in a cohort, or borrowWithinCohort is not Never.
- Candidates: its own ClusterQueue's admitted workloads that withinClusterQueue allows (LowerPriority:
  a strictly lower priority); and, with reclaimWithinCohort, the workloads of the cohort's other
  ClusterQueues that use more than their nominal quota of a resource needing preemption. If the
  preemptor's queue stays within its nominal quota with the workload it has the advantage
  (reclaim: any such candidate reclaimWithinCohort allows, whatever its priority); otherwise a
  candidate of another queue may be preempted only if the preemptor will then not borrow, unless
  borrowWithinCohort allows preempting lower priorities (below maxPriorityThreshold) while borrowing.
- Order: other queues' candidates before its own, lower priority first, the last admitted first.
  Candidates are removed in that order (one of another queue only while its queue still uses
  more than nominal) until the workload fits (available quota, and not borrowing where that is the
  condition); then those not needed are added back, last removed first. No set that makes it fit:
  it waits, nothing is evicted.

Approximations: the workload's flavors are the ones it would get on an idle cluster; topology is
checked once the victims are gone (the workload must then be admitted, nodes included).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import render.cluster.kueue_admission as ka
from render.cluster.kueue_objects import GROUP, ClusterQueue, KueueWorld, QueuedWorkload
from render.cluster.objects import Obj
from render.cluster.scheduling import Capacity

PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
PREEMPTED = "preempted"  # a Verdict state: admitted, then evicted to admit another (requeued)
# Kueue's reasons (apis/kueue/v1beta2: InClusterQueue, InCohortReclamation, InCohortReclaimWhileBorrowing)
IN_CLUSTER_QUEUE, RECLAMATION, RECLAIM_WHILE_BORROWING = "InClusterQueue", "InCohortReclamation", "InCohortReclaimWhileBorrowing"


@dataclass(frozen=True)
class Preemption:
    """A ClusterQueue's spec.preemption, Kueue's defaults where unset."""

    within_cluster_queue: str = "Never"
    reclaim_within_cohort: str = "Never"
    borrow_within_cohort: str = "Never"
    max_priority_threshold: int | None = None


@dataclass
class Rules:
    """What preemption reads besides quota: each ClusterQueue's policy and the priority classes."""

    policies: dict[str, Preemption] = field(default_factory=dict)
    workload_classes: dict[str, int] = field(default_factory=dict)  # WorkloadPriorityClass -> value
    pod_classes: dict[str, int] = field(default_factory=dict)  # scheduling.k8s.io PriorityClass -> value
    default_pod_priority: int = 0  # a globalDefault PriorityClass's value

    def policy(self, cq: ClusterQueue) -> Preemption:
        return self.policies.get(cq.name, Preemption())

    def missing_class(self, wl: QueuedWorkload) -> str | None:
        """Why Kueue makes no Workload for `wl`: its label names no WorkloadPriorityClass
        (jobframework's GetPriorityFromWorkloadPriorityClass fails, the reconciler retries and the
        job stays suspended), so it is never admitted and preempts nothing."""
        name = ((wl.obj.body.get("metadata") or {}).get("labels") or {}).get(PRIORITY_LABEL)
        if name is None or str(name) in self.workload_classes:
            return None
        return (f"its label {PRIORITY_LABEL}: {name} names no WorkloadPriorityClass of the plan: Kueue makes no "
                f"Workload for it, it stays suspended (classes: {', '.join(sorted(self.workload_classes)) or 'none'})")

    def priority(self, wl: QueuedWorkload) -> int:
        labels = (wl.obj.body.get("metadata") or {}).get("labels") or {}
        if PRIORITY_LABEL in labels:
            return self.workload_classes.get(str(labels[PRIORITY_LABEL]), 0)
        name = next((ps.spec.get("priorityClassName") for ps in wl.pod_sets if ps.spec.get("priorityClassName")), None)
        return self.pod_classes.get(str(name), 0) if name else self.default_pod_priority


def read(objects: list[Obj]) -> Rules:
    rules = Rules()
    for o in objects:
        if o.kind == "ClusterQueue" and o.api_version.startswith(f"{GROUP}/"):
            p = (o.body.get("spec") or {}).get("preemption") or {}
            borrow = p.get("borrowWithinCohort") or {}
            threshold = borrow.get("maxPriorityThreshold")
            rules.policies[o.name] = Preemption(str(p.get("withinClusterQueue", "Never")),
                                                str(p.get("reclaimWithinCohort", "Never")),
                                                str(borrow.get("policy", "Never")),
                                                int(threshold) if threshold is not None else None)
        elif o.kind == "WorkloadPriorityClass" and o.api_version.startswith(f"{GROUP}/"):
            rules.workload_classes[o.name] = int(o.body.get("value", 0))
        elif o.kind == "PriorityClass" and o.api_version.startswith("scheduling.k8s.io/"):
            rules.pod_classes[o.name] = int(o.body.get("value", 0))
            if o.body.get("globalDefault"):
                rules.default_pod_priority = int(o.body.get("value", 0))
    return rules


def _satisfies(policy: str, preemptor: int, candidate: int) -> bool:
    """SatisfiesPreemptionPolicy (without LowerOrNewerEqualPriority's timestamps: as LowerPriority)."""
    if policy in ("LowerPriority", "LowerOrNewerEqualPriority"):
        return preemptor > candidate
    return policy == "Any"


@dataclass
class _Admitted:
    workload: QueuedWorkload
    verdict: ka.Verdict
    cq: ClusterQueue


class _Queue:
    """Kueue's cache in miniature: the admitted workloads in admission order, their quota and nodes."""

    def __init__(self, world: KueueWorld, capacity: list[Capacity]):
        self.world, self.capacity = world, capacity
        self.admitted: list[_Admitted] = []
        self.book = ka.QuotaBook(world)
        self.free = ka._scratch(capacity)

    def admit(self, wl: QueuedWorkload) -> ka.Verdict:
        v = ka.evaluate(self.world, self.book, wl, self.free, base=self.capacity)
        if v.state == ka.ADMITTED:
            cq = self.world.cluster_queues[v.cluster_queue]
            self.book.add(cq, v.usage)
            self.admitted.append(_Admitted(wl, v, cq))
        return v

    def without(self, gone: list[_Admitted]) -> _Queue:
        """The cache once `gone` are evicted: the others re-admitted in their order (their nodes back)."""
        out = _Queue(self.world, self.capacity)
        for a in self.admitted:
            if all(a is not g for g in gone):
                out.book.add(a.cq, a.verdict.usage)
                out.admitted.append(a)
                if any(self.world.flavors[f].topology for f, _ in a.verdict.usage):
                    ka.evaluate(self.world, ka.QuotaBook(self.world), a.workload, out.free, base=self.capacity)
        return out


def _over_nominal(book: ka.QuotaBook, cq: ClusterQueue, frs: set[tuple[str, str]]) -> bool:
    return any(book.used(cq, fr) > book.nominal(cq, fr) + 1e-9 for fr in frs)


def _fits(book: ka.QuotaBook, cq: ClusterQueue, usage: dict[tuple[str, str], float], borrowing: bool) -> bool:
    """workloadFits: every resource within what is available, and within nominal without borrowing."""
    for fr, v in usage.items():
        if not borrowing and book.used(cq, fr) + v > book.nominal(cq, fr) + 1e-9:
            return False
        if v > book.available(cq, fr) + 1e-9:
            return False
    return True


def targets(queue: _Queue, rules: Rules, wl: QueuedWorkload, cq: ClusterQueue,
            usage: dict[tuple[str, str], float]) -> list[tuple[_Admitted, str]]:
    """classicalPreemptions: the admitted workloads to evict so that `wl` (taking `usage`) fits, with
    Kueue's reason for each; [] when no set does."""
    book, policy, mine = queue.book, rules.policy(cq), rules.priority(wl)
    need = {fr for fr, v in usage.items() if v > book.available(cq, fr) + 1e-9}
    if not need or any(v > book.potential(cq, fr) + 1e-9 for fr, v in usage.items()):
        return []
    borrow_forbidden = policy.borrow_within_cohort == "Never"
    within_nominal = all(book.used(cq, fr) + v <= book.nominal(cq, fr) + 1e-9 for fr, v in usage.items())
    # fitsResourceQuota: preemption is tried only on these conditions
    if not all(book.nominal(cq, fr) >= usage[fr] - 1e-9 or (cq.cohort and book.used(cq, fr) + usage[fr]
               <= book.nominal(cq, fr) + 1e-9) or not borrow_forbidden for fr in need):
        return []
    uses = [a for a in queue.admitted if any(fr in need for fr in a.verdict.usage)]
    candidates: list[tuple[_Admitted, str]] = []
    for a in uses:
        theirs = rules.priority(a.workload)
        if a.cq.name == cq.name:
            if _satisfies(policy.within_cluster_queue, mine, theirs):
                candidates.append((a, IN_CLUSTER_QUEUE))
        elif cq.cohort and a.cq.cohort == cq.cohort and _over_nominal(book, a.cq, need) \
                and _satisfies(policy.reclaim_within_cohort, mine, theirs):
            if within_nominal:
                candidates.append((a, RECLAMATION))  # hierarchical advantage
            elif borrow_forbidden or theirs >= mine or (policy.max_priority_threshold is not None
                                                        and theirs > policy.max_priority_threshold):
                candidates.append((a, "without-borrowing"))
            else:
                candidates.append((a, RECLAIM_WHILE_BORROWING))
    order = {id(a): i for i, a in enumerate(queue.admitted)}
    candidates.sort(key=lambda c: (c[0].cq.name == cq.name, rules.priority(c[0].workload), -order[id(c[0])]))
    others = [c for c in candidates if c[0].cq.name != cq.name]
    hierarchy = [c for c in others if c[1] == RECLAMATION]
    under_nominal = all(book.used(cq, fr) < book.nominal(cq, fr) - 1e-9 for fr in need)
    if not others or (borrow_forbidden and not under_nominal):
        attempts = [True]
    elif borrow_forbidden and not hierarchy:
        attempts = [False, True]
    else:
        attempts = [True, False]
    for borrowing in attempts:
        trial = _Queue(queue.world, queue.capacity)
        trial.admitted, trial.book = list(queue.admitted), _copy(book)
        chosen: list[tuple[_Admitted, str]] = []
        for a, reason in candidates:
            if a.cq.name != cq.name:
                if borrowing and reason == "without-borrowing":
                    continue
                if not _over_nominal(trial.book, a.cq, need):
                    continue
            trial.book.add(a.cq, {fr: -v for fr, v in a.verdict.usage.items()})
            chosen.append((a, RECLAMATION if reason == "without-borrowing" else reason))
            if _fits(trial.book, cq, usage, borrowing):
                for i in range(len(chosen) - 2, -1, -1):  # fillBackWorkloads
                    back = chosen[i][0]
                    trial.book.add(back.cq, back.verdict.usage)
                    if _fits(trial.book, cq, usage, borrowing):
                        chosen.pop(i)
                    else:
                        trial.book.add(back.cq, {fr: -v for fr, v in back.verdict.usage.items()})
                return chosen
    return []


def _copy(book: ka.QuotaBook) -> ka.QuotaBook:
    out = ka.QuotaBook(book.world)
    out.usage = {name: dict(u) for name, u in book.usage.items()}
    return out


def admit_in_order(world: KueueWorld, rules: Rules, workloads: list[QueuedWorkload],
                   capacity: list[Capacity]) -> list[ka.Verdict]:
    """kueue_admission.admit_in_order with preemption: a workload that would wait evicts the
    targets Kueue picks (their verdicts become PREEMPTED, naming it and the reason) when it is then
    admitted whole; otherwise it waits and nothing is evicted."""
    queue = _Queue(world, capacity)
    out = []
    for wl in workloads:
        missing = rules.missing_class(wl)
        if missing is not None:  # no Workload: it takes no quota and evicts no one
            out.append(ka.Verdict(wl, ka.NEVER, reasons=[missing]))
            continue
        v = queue.admit(wl)
        if v.state == ka.WAITING:
            alone = ka.evaluate(world, ka.QuotaBook(world), wl, ka._scratch(capacity))
            if alone.state == ka.ADMITTED:
                cq = world.cluster_queues[alone.cluster_queue]
                victims = targets(queue, rules, wl, cq, alone.usage)
                if victims:
                    after = queue.without([a for a, _ in victims])
                    again = after.admit(wl)
                    if again.state == ka.ADMITTED:
                        queue, v = after, again
                        for a, reason in victims:
                            a.verdict.state = PREEMPTED
                            a.verdict.reasons = [f"preempted by {wl.ref} ({reason})"]
        out.append(v)
    return out
