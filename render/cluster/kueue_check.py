"""The whole-cluster check's Kueue part: every queued workload of the plan judged by Kueue's
admission model (kueue_admission.py) on its own against an idle cluster. One line each (Report.queued);
a workload Kueue could never admit, or whose pods could never run once admitted, is a problem
(exit 3) naming the job, its queue and what is short. A workload that only waits for quota is not.
With the plan, every queued job must also be created after Kueue's webhooks answer
(kueue_webhook_order.py): a problem otherwise, naming the job. A job whose label
kueue.x-k8s.io/priority-class names a WorkloadPriorityClass the plan does not have is a problem too:
Kueue cannot make its Workload (jobframework's GetPriorityFromWorkloadPriorityClass fails), so the
job stays suspended. Preemption (kueue_preemption.py) decides who runs first, never whether a job
can run at all, so judging each alone needs none of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import render.cluster.kueue_admission as kueue_admission
import render.cluster.kueue_objects as kueue_objects
import render.cluster.kueue_preemption as kueue_preemption
import render.cluster.kueue_provisioning as kueue_provisioning
import render.cluster.kueue_webhook_order as kueue_webhook_order
from render import program
from render.cluster.admission import Ancestry, plan_dependencies
from render.cluster.kueue_node_replacement import pinned_after_taint
from render.cluster.nodes import Node
from render.cluster.objects import Obj
from render.cluster.scheduling import Placement

if TYPE_CHECKING:
    from render.cluster.report import Report


def _fmt(resource: str, v: float) -> str:
    return f"{v / 1024**3:g}Gi" if resource == "memory" else f"{v:g}"


def line(v: kueue_admission.Verdict) -> str:
    wl = v.workload
    queue = f"LocalQueue {v.queue}" + (f" → ClusterQueue {v.cluster_queue}" if v.cluster_queue else "")
    if v.state != kueue_admission.ADMITTED:
        return f"{wl.ref} ({queue}): {'; '.join(v.reasons)}"
    flavors = ", ".join(f"{ps} on {flavor}" for ps, flavor in v.flavors.items())
    borrowed = ", ".join(f"{_fmt(r, amount)} {r} of {f}" for (f, r), amount in sorted(v.borrowed.items()))
    return f"{wl.ref} ({queue}): admitted whole, {flavors}" + (f"; borrows {borrowed} from its cohort" if borrowed else "")


def created_after(plan: program.Plan) -> tuple[Callable[[str], set[str]], set[str]]:
    """What a resource is created after (its dependencies and parents, transitively), and the
    Helm Releases that skip waiting for their workloads."""
    return Ancestry(plan_dependencies(plan)), {r.urn for r in plan.resources if r.inputs.get("skipAwait") is True}


def judge(report: Report, objects: list[Obj], nodes: list[Node], placements: list[Placement],
          plan: program.Plan | None = None) -> None:
    world = kueue_objects.read(objects)
    if not world.workloads:
        return
    if plan is not None:
        ancestors, no_wait = created_after(plan)
        report.problems += kueue_webhook_order.problems(world, objects, ancestors, no_wait.__contains__)
    rules = kueue_preemption.read(objects)
    for wl in world.workloads:
        missing = rules.missing_class(wl)
        if missing is not None and world.config is not None:
            report.problems.append(f"{wl.ref} ({wl.obj.origin}): {missing}")
    capacity = kueue_admission.capacity_after(nodes, placements)
    provisioning = kueue_provisioning.read(objects)
    verdicts = kueue_admission.each_alone(world, capacity)
    report.problems += pinned_after_taint(world, objects, verdicts, capacity)  # kueue#9616
    for v in verdicts:
        v = kueue_provisioning.refine(v, world, provisioning, capacity)
        text = line(v) + kueue_provisioning.provisioned_by(v, world, provisioning)
        if v.state == kueue_admission.NEVER:
            report.problems += [f"{v.workload.ref} (LocalQueue {v.queue}"
                                + (f" → ClusterQueue {v.cluster_queue}" if v.cluster_queue else "")
                                + f", {v.workload.obj.origin}): {reason}" for reason in v.reasons]
            text = f"✗ {text}"
        report.queued.append(text)
    report.notes.append("Kueue: each queued job is judged alone against an idle cluster (quota, flavors, cohort "
                        "borrowing, topology, a flex-start pool at its maximum behind its ProvisioningRequest check); "
                        "preemption orders jobs but never makes one admissible (modelled in kueue_preemption.py), "
                        "fair sharing is off, other admission checks are not modelled")
