"""Kueue's classical preemption in the admission model (render/cluster/kueue_preemption.py), on small
worlds and on the program's own queues (lab-ha: teams vision and language, one GPU each, lending
each other the rest):

* inside a ClusterQueue (withinClusterQueue LowerPriority): a higher priority preempts a lower one,
  an equal one waits; Kueue's default (Never) preempts nothing;
* reclaiming (reclaimWithinCohort Any): a team within its nominal quota takes it back from a team
  borrowing it, whatever the borrower's priority;
* borrowing: a workload that would borrow never preempts another queue's workloads under
  borrowWithinCohort Never (the program's), does with LowerPriority (and not above
  maxPriorityThreshold), and never to go beyond nominal + borrowingLimit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config.queues import BATCH_PRIORITY_CLASS, PRIORITY_LABEL, PROGRAM_PRIORITY_CLASS
from render import program
from render.cluster import kueue_admission as ka
from render.cluster import kueue_objects
from render.cluster import kueue_preemption as kp
from render.cluster.objects import Obj, collect
from tests.render.kueue_builders import (
    API,
    GPU,
    capacity,
    cluster_queue,
    flavor,
    gpu_node,
    job,
    local_queue,
    manager_config,
    namespace,
    obj,
    quota,
)

PROGRAM = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}  # components/queues/objects.py


def classes() -> list[Obj]:
    return [obj({"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})
            for name, value in (("low", 100), ("high", 1000))]


def prio(o: Obj, name: str) -> Obj:
    o.body["metadata"]["labels"][PRIORITY_LABEL] = name
    return o


def _run(objects: list[Obj], *nodes) -> dict[str, ka.Verdict]:
    world = kueue_objects.read(objects)
    verdicts = kp.admit_in_order(world, kp.read(objects), world.workloads, capacity(*nodes))
    return {v.workload.obj.name: v for v in verdicts}


NODES = [gpu_node(f"gpu-{i}", 1) for i in range(1, 5)]


# --- inside one ClusterQueue ------------------------------------------------------------------------

def _one_queue(preemption: dict[str, Any] | None, *jobs: Obj) -> list[Obj]:
    spec = {"preemption": preemption} if preemption is not None else {}
    return [manager_config(), namespace("team-a"), flavor("gpu"), *classes(),
            cluster_queue("team-a", [("gpu", [quota(GPU, 2)])], **spec), local_queue("team-a", "team", "team-a"), *jobs]


def test_a_higher_priority_workload_preempts_a_lower_one_in_its_cluster_queue() -> None:
    out = _run(_one_queue(PROGRAM, prio(job("batch", 2), "low"), prio(job("urgent", 2), "high")), *NODES[:2])
    assert out["urgent"].state == ka.ADMITTED, out["urgent"]
    assert out["batch"].state == kp.PREEMPTED
    assert out["batch"].reasons == ["preempted by Job team-a/urgent (InClusterQueue)"]
    # The model without preemption (each workload waits its turn) would leave it waiting.
    world = kueue_objects.read(_one_queue(PROGRAM, prio(job("batch", 2), "low"), prio(job("urgent", 2), "high")))
    assert [v.state for v in ka.admit_in_order(world, world.workloads, capacity(*NODES[:2]))] == [ka.ADMITTED, ka.WAITING]


@pytest.mark.parametrize("preemption,second", [(PROGRAM, "low"), (None, "high"), ({"withinClusterQueue": "Never"}, "high")])
def test_an_equal_priority_or_no_policy_waits_and_evicts_nothing(preemption, second) -> None:
    out = _run(_one_queue(preemption, prio(job("first", 2), "low"), prio(job("second", 2), second)), *NODES[:2])
    assert out["first"].state == ka.ADMITTED and out["second"].state == ka.WAITING


def test_only_what_is_needed_is_preempted_lowest_priority_and_latest_first() -> None:
    jobs = [prio(job("old-low", 1), "low"), prio(job("new-low", 1), "low"), prio(job("urgent", 1), "high")]
    out = _run(_one_queue(PROGRAM, *jobs), *NODES[:2])
    assert out["urgent"].state == ka.ADMITTED
    assert out["new-low"].state == kp.PREEMPTED and out["old-low"].state == ka.ADMITTED


def test_a_job_whose_priority_class_is_missing_is_never_admitted_and_preempts_no_one() -> None:
    """Kueue makes no Workload for a job whose kueue.x-k8s.io/priority-class names no
    WorkloadPriorityClass (jobframework: GetPriorityFromWorkloadPriorityClass fails): it stays
    suspended, takes no quota and evicts no one, as the whole-cluster check says elsewhere."""
    out = _run(_one_queue(PROGRAM, prio(job("batch", 2), "low"), prio(job("ghost", 2), "missing"),
                          prio(job("next", 2), "low")), *NODES[:2])
    assert out["ghost"].state == ka.NEVER and "names no WorkloadPriorityClass" in out["ghost"].reasons[0], out["ghost"]
    assert out["batch"].state == ka.ADMITTED and out["next"].state == ka.WAITING
    # Alone in its queue it still gets no quota.
    (v,) = _run(_one_queue(PROGRAM, prio(job("ghost", 1), "missing")), *NODES[:2]).values()
    assert v.state == ka.NEVER and "stays suspended (classes: high, low)" in v.reasons[0]


# --- cohorts ----------------------------------------------------------------------------------------

def _cohort(a: dict[str, Any], b: dict[str, Any], a_preemption: dict[str, Any], b_preemption: dict[str, Any],
            *jobs: Obj) -> list[Obj]:
    return [manager_config(), namespace("team-a"), namespace("team-b"), flavor("gpu"), *classes(),
            cluster_queue("team-a", [("gpu", [quota(GPU, **a)])], cohort="c", preemption=a_preemption),
            cluster_queue("team-b", [("gpu", [quota(GPU, **b)])], cohort="c", preemption=b_preemption),
            local_queue("team-a", "team", "team-a"), local_queue("team-b", "team", "team-b"), *jobs]


def _b(name: str, pods: int, priority: str) -> Obj:
    return prio(job(name, pods, namespace="team-b"), priority)


@pytest.mark.parametrize("reclaim,reclaimed", [("Any", True), ("LowerPriority", False), ("Never", False)])
def test_a_team_reclaims_its_nominal_quota_from_a_borrower(reclaim: str, reclaimed: bool) -> None:
    """b borrows team-a's two idle GPUs with a high priority job; team-a's low priority job then
    asks for its nominal quota: with reclaimWithinCohort Any it takes it back."""
    objects = _cohort({"nominal": 2}, {"nominal": 2, "borrowing": 2}, {**PROGRAM, "reclaimWithinCohort": reclaim}, PROGRAM,
                      _b("borrower", 4, "high"), prio(job("owner", 2), "low"))
    out = _run(objects, *NODES)
    if reclaimed:
        assert out["owner"].state == ka.ADMITTED and not out["owner"].borrowed
        assert out["borrower"].state == kp.PREEMPTED
        assert out["borrower"].reasons == ["preempted by Job team-a/owner (InCohortReclamation)"]
    else:
        assert out["owner"].state == ka.WAITING and out["borrower"].state == ka.ADMITTED


def _borrowing(borrow_within_cohort: dict[str, Any] | None, need: int) -> dict[str, ka.Verdict]:
    """team-a (nominal 3) runs two low-priority 2-GPU jobs, borrowing one GPU of team-b's nominal 1;
    team-b (borrowingLimit 1) asks for `need` GPUs at a high priority."""
    b_preemption = {**PROGRAM, **({"borrowWithinCohort": borrow_within_cohort} if borrow_within_cohort else {})}
    objects = _cohort({"nominal": 3}, {"nominal": 1, "borrowing": 1}, PROGRAM, b_preemption,
                      prio(job("a-1", 2), "low"), prio(job("a-2", 2), "low"), _b("b", need, "high"))
    return _run(objects, *NODES)


def test_a_workload_that_would_borrow_never_preempts_under_borrow_within_cohort_never() -> None:
    out = _borrowing(None, 2)  # the program's ClusterQueues: borrowWithinCohort unset (Never)
    assert out["b"].state == ka.WAITING
    assert out["a-1"].state == out["a-2"].state == ka.ADMITTED


def test_borrow_within_cohort_lower_priority_preempts_while_borrowing() -> None:
    out = _borrowing({"policy": "LowerPriority"}, 2)
    assert out["b"].state == ka.ADMITTED and out["b"].borrowed == {("gpu", GPU): 1.0}
    assert out["a-2"].state == kp.PREEMPTED and out["a-1"].state == ka.ADMITTED  # the last admitted goes
    assert out["a-2"].reasons == ["preempted by Job team-b/b (InCohortReclaimWhileBorrowing)"]
    # ... but not a candidate above maxPriorityThreshold.
    out = _borrowing({"policy": "LowerPriority", "maxPriorityThreshold": 50}, 2)
    assert out["b"].state == ka.WAITING and out["a-2"].state == ka.ADMITTED


def test_a_workload_never_preempts_to_borrow_beyond_its_limit() -> None:
    out = _borrowing({"policy": "LowerPriority"}, 3)  # nominal 1 + borrowingLimit 1 < 3
    assert out["b"].state == ka.NEVER
    assert out["a-1"].state == out["a-2"].state == ka.ADMITTED


# --- the program's own queues -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_ha_objects(upstream_dir: Path) -> list[Obj]:
    plan = program.run("lab-ha")
    return [o for o in collect(plan, upstream_dir, plan.config.kubernetes_version).objects
            if o.kind != "Job" or o.namespace != "training"]  # the program's own jobs left out


def _team_job(name: str, team: str, pods: int, priority: str) -> Obj:
    o = prio(job(name, pods, queue=team, namespace=f"team-{team}"), priority)
    o.body["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    return o


def _lab_ha(objects: list[Obj], *jobs: Obj) -> dict[str, ka.Verdict]:
    nodes = [gpu_node(f"gpu-{i}", 1, **{"nvidia.com/gpu.present": "true"}) for i in (1, 2)]
    return _run([*objects, *jobs], *nodes)


def test_the_programs_queues_training_preempts_batch_and_a_team_reclaims(lab_ha_objects: list[Obj]) -> None:
    rules = kp.read(lab_ha_objects)
    assert rules.policy(kueue_objects.read(lab_ha_objects).cluster_queues["vision"]) == kp.Preemption(
        "LowerPriority", "Any", "Never")
    # vision's training job preempts vision's batch job in its own ClusterQueue (language busy).
    busy = _team_job("other", "language", 1, BATCH_PRIORITY_CLASS)
    out = _lab_ha(lab_ha_objects, busy, _team_job("sweep", "vision", 1, BATCH_PRIORITY_CLASS),
                  _team_job("train", "vision", 1, PROGRAM_PRIORITY_CLASS))
    assert out["train"].state == ka.ADMITTED and out["other"].state == ka.ADMITTED
    assert out["sweep"].reasons == ["preempted by Job team-vision/train (InClusterQueue)"]
    # A request above vision's nominal GPU (1) preempts nothing: borrowWithinCohort is Never, so
    # Kueue does not try (flavorassigner fitsResourceQuota); it waits for the GPUs to free up.
    out = _lab_ha(lab_ha_objects, _team_job("sweep", "vision", 2, BATCH_PRIORITY_CLASS),
                  _team_job("train", "vision", 2, PROGRAM_PRIORITY_CLASS))
    assert out["train"].state == ka.WAITING and out["sweep"].state == ka.ADMITTED
    # language borrows vision's idle GPU; vision's batch job takes its nominal GPU back.
    out = _lab_ha(lab_ha_objects, _team_job("wide", "language", 2, BATCH_PRIORITY_CLASS),
                  _team_job("mine", "vision", 1, BATCH_PRIORITY_CLASS))
    assert out["mine"].state == ka.ADMITTED
    assert out["wide"].reasons == ["preempted by Job team-vision/mine (InCohortReclamation)"]
