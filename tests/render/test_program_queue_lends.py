"""The program's own ClusterQueue exists whenever queues are on (components/queues/__init__.py), so
the GPUs the teams' nominal quotas leave belong to the cohort and a team may borrow them. Held on
lab-ha (2 GPUs) with neither training nor the acceptance Job and one team of 1 nominal GPU: the
cohort still holds both GPUs, and the whole-cluster check's Kueue model (./plan --job) admits the
docs' two-GPU job, borrowing the program's unused GPU. Without the program's queue the cohort held
1 GPU and the same job was "never"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.queues import PROGRAM_QUEUE
from render import cluster, job_question, program
from tests.conftest import stack_config_with
from tests.workloads.test_queues_docs_examples import _example


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    values, secrets = program.stack_config("lab-ha")
    queues = json.loads(values["gpu-cluster:queues"])
    queues["teams"] = [t for t in queues["teams"] if t["name"] == "vision"]  # 1 nominal GPU, borrows up to 1
    return program.run("lab-ha", config=stack_config_with(
        "lab-ha", training={"enabled": False}, acceptance={"nccl": False}, queues=queues))


def _cluster_queues(plan: program.Plan) -> dict[str, dict[str, Any]]:
    return {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in plan.resources if r.type.endswith(":ClusterQueue")}


def test_without_program_jobs_the_program_queue_still_holds_the_gpus_the_teams_leave(plan: program.Plan) -> None:
    queues = _cluster_queues(plan)
    assert set(queues) == {"vision", PROGRAM_QUEUE}
    (group,) = queues[PROGRAM_QUEUE]["resourceGroups"]
    quota = {r["name"]: r["nominalQuota"] for f in group["flavors"] for r in f["resources"]}
    assert quota == {"nvidia.com/gpu": "1", "cpu": "0", "memory": "0"}  # it runs nothing: it only lends
    assert queues[PROGRAM_QUEUE]["cohortName"] == queues["vision"]["cohortName"]
    nominal = sum(int(f["resources"][0]["nominalQuota"]) for spec in queues.values()
                  for f in spec["resourceGroups"][0]["flavors"])
    assert nominal == sum(h.gpus for h in plan.config.hosts) == 2
    # no program job, so no LocalQueue of the program's
    assert [r.inputs["metadata"]["namespace"] for r in plan.resources if r.type.endswith(":LocalQueue")] == ["team-vision"]


def test_a_team_borrows_the_programs_unused_gpus_through_the_cohort(plan: program.Plan, tmp_path: Path,
                                                                    upstream_dir: Path) -> None:
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_example("Job")))  # two pods of one GPU each
    ((source, job),) = job_question.read([path])
    answer = job_question.answer(report, source, job)
    assert answer.state == job_question.ADMITTED, answer.line()
    assert answer.reasons[2] == "borrows 1 nvidia.com/gpu of gpu from cohort"
