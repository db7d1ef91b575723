"""The whole-cluster check refuses a queued job whose kueue.x-k8s.io/priority-class names no
WorkloadPriorityClass of the plan (Kueue 0.19.2 makes no Workload for it: the job stays suspended
forever); lab-ha's own jobs name the program's class, which the plan creates."""

from __future__ import annotations

import copy
from pathlib import Path

from render import cluster, program


def test_a_queued_job_naming_a_missing_priority_class_fails_the_check(upstream_dir: Path) -> None:
    plan = program.run("lab-ha")
    assert cluster.check(plan, plan.config, upstream_dir).ok
    broken = copy.deepcopy(plan)
    broken.resources = [r for r in broken.resources if not r.type.endswith(":WorkloadPriorityClass")]
    problems = cluster.check(broken, broken.config, upstream_dir).problems
    train = [p for p in problems if p.startswith("Job training/train") and "names no WorkloadPriorityClass" in p]
    assert train and "gpu-cluster-training" in train[0] and "stays suspended" in train[0], problems
