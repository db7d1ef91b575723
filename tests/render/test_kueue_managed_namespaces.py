"""Kueue v0.19.2's job reconciler (jobframework/reconciler.go) makes no Workload for a Job in a
namespace outside the manager's managedJobsNamespaceSelector, even one with a queue-name label
(found by tests/e2e/test_kueue_real_scenarios.py: the model admitted such Jobs, real Kueue left them
suspended); the model says never, naming the selector."""

from __future__ import annotations

from render.cluster import kueue_admission as ka
from render.cluster import kueue_objects
from tests.render.kueue_builders import capacity, gpu_node, job, manager_config, one_team

ONLY_TRAINING = ("managedJobsNamespaceSelector:\n  matchExpressions:\n  - key: kubernetes.io/metadata.name\n"
                 "    operator: In\n    values: [training]\n")


def _verdicts(config_resources: str) -> list[ka.Verdict]:
    objects = [o for o in one_team(2, job("train", pods=1)) if o.kind != "ConfigMap"]
    world = kueue_objects.read([manager_config(resources=config_resources), *objects])
    return ka.admit_in_order(world, world.workloads, capacity(gpu_node("gpu-1", 2)))


def test_a_queued_job_outside_the_managed_namespaces_is_never_admitted() -> None:
    [verdict] = _verdicts(ONLY_TRAINING)
    assert verdict.state == ka.NEVER
    assert "managedJobsNamespaceSelector" in verdict.reasons[0] and "team-a" in verdict.reasons[0]


def test_a_queued_job_inside_them_or_with_no_selector_is_admitted() -> None:
    inside = ONLY_TRAINING.replace("[training]", "[training, team-a]")
    assert [v.state for v in _verdicts(inside)] == [ka.ADMITTED]
    assert [v.state for v in _verdicts("")] == [ka.ADMITTED]
