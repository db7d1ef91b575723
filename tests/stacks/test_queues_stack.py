"""queues.enabled on the committed HA example (Pulumi.lab-ha.yaml: two teams), evaluated by the real
program under the recording mocks and checked by the whole-cluster check:

  - Kueue's objects are in the plan, validated against the CRDs of the pinned chart (the check
    renders the release), created after the release that installs those CRDs;
  - every job the program runs carries the program's queue label, is created suspended and waits
    for the Kueue release (its webhooks) and the program's LocalQueue;
  - each team's namespace and LocalQueue are stack outputs.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from config.queues import PROGRAM_QUEUE, QUEUE_LABEL
from render import cluster, program
from render.cluster import kueue_check
from tests.conftest import SEED_002_ROCE, stack_config_with

RELEASE = "kubernetes:helm.sh/v3:Release"
KUEUE_TYPES = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    return program.run("lab-ha")


def _ancestors(plan: program.Plan, urn: str) -> set[str]:
    """What `urn` is created after: the check's own reading of the plan (kueue_check)."""
    return kueue_check.created_after(plan)[0](urn)


def _kueue_release(plan: program.Plan) -> program.Registration:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs.get("name") == "kueue"]
    return release


def _queued(plan: program.Plan) -> list[program.Registration]:
    kinds = ("kubernetes:batch/v1:Job", "kubernetes:kubeflow.org/v1:PyTorchJob")
    return [r for r in plan.resources if r.type in kinds and r.inputs["metadata"]["namespace"] == "training"
            and "gpu-cluster.io/training-job" in r.inputs["metadata"].get("labels", {})]


def test_the_whole_cluster_check_validates_kueue_objects_against_the_charts_crds(plan, upstream_dir: Path):
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    kinds = [r.type.rsplit(":", 1)[-1] for r in plan.resources if r.type.startswith("kubernetes:kueue.x-k8s.io/")]
    assert sorted(set(kinds)) == sorted(KUEUE_TYPES)
    assert kinds.count("ClusterQueue") == 3 and kinds.count("LocalQueue") == 3  # two teams and the program


def test_a_kueue_object_the_crd_refuses_or_that_skips_the_release_fails_the_check(plan, upstream_dir: Path):
    broken = copy.deepcopy(plan)
    (cq,) = [r for r in broken.resources if r.type.endswith(":ClusterQueue") and r.inputs["metadata"]["name"] == "vision"]
    cq.inputs["spec"]["cohort"] = cq.inputs["spec"].pop("cohortName")
    cq.dependencies = []
    cq.parent = None
    problems = cluster.check(broken, broken.config, upstream_dir).problems
    assert any("ClusterQueue vision" in p and "not valid against CRD" in p for p in problems), problems
    assert any("ClusterQueue vision" in p and "is not installed before it" in p for p in problems), problems


def test_every_program_job_is_queued_suspended_after_kueue_and_its_queue(plan):
    jobs = _queued(plan)
    assert {r.inputs["metadata"]["name"] for r in jobs} == {"nccl-acceptance", "train"}
    release = _kueue_release(plan).urn
    (local_queue,) = [r.urn for r in plan.resources if r.type.endswith(":LocalQueue")
                      and r.inputs["metadata"]["namespace"] == "training"]
    for job in jobs:
        assert job.inputs["metadata"]["labels"][QUEUE_LABEL] == PROGRAM_QUEUE
        assert job.inputs["spec"]["suspend"] is True
        assert {release, local_queue} <= _ancestors(plan, job.urn), job.name


def test_a_pytorchjob_is_queued_suspended_too(upstream_dir: Path):
    pytorch = program.run("lab-ha", config=stack_config_with("lab-ha", training={"launcher": "pytorchjob"},
                                                             acceptance={"nccl": False}))
    report = cluster.check(pytorch, pytorch.config, upstream_dir)  # the PyTorchJob against its CRD
    assert report.ok, report.problems
    (train,) = [r for r in _queued(pytorch) if r.inputs["metadata"]["name"] == "train"]
    assert train.type == "kubernetes:kubeflow.org/v1:PyTorchJob"
    assert train.inputs["metadata"]["labels"][QUEUE_LABEL] == PROGRAM_QUEUE
    assert train.inputs["spec"]["runPolicy"]["suspend"] is True
    assert _kueue_release(pytorch).urn in _ancestors(pytorch, train.urn)


def test_without_queues_no_job_is_queued_and_kueue_is_absent():
    off = program.run("lab-ha", config=stack_config_with("lab-ha", queues=None))
    assert not [r for r in off.of_type(RELEASE) if r.inputs.get("name") == "kueue"]
    for job in _queued(off):
        assert QUEUE_LABEL not in job.inputs["metadata"]["labels"] and "suspend" not in job.inputs["spec"]


def test_each_teams_namespace_and_local_queue_are_outputs(plan):
    teams = plan.outputs["queues"]
    assert teams["vision"]["namespace"] == "team-vision" and teams["vision"]["localQueue"] == "vision"
    assert teams["language"]["namespace"] == "team-language"
    assert teams["vision"]["priorityClass"] == "gpu-cluster-training"


def test_the_cohort_holds_the_gpus_the_cluster_has(plan):
    """The program's queue takes what the teams leave: every nominal GPU of the cohort is a real one."""
    nominal = 0
    for cq in (r for r in plan.resources if r.type.endswith(":ClusterQueue")):
        (group,) = cq.inputs["spec"]["resourceGroups"]
        nominal += sum(int(f["resources"][0]["nominalQuota"]) for f in group["flavors"])
    assert nominal == sum(h.gpus for h in plan.config.hosts) == 2


def test_the_rdma_link_test_is_queued_and_its_rdma_device_left_out_of_quota(upstream_dir: Path):
    roce = {"rdma": True, "linkGbps": 25, "roce": SEED_002_ROCE}
    rdma = program.run("lab-ha", config=stack_config_with("lab-ha", network=roce))
    (link,) = [r for r in _queued(rdma) if r.inputs["metadata"]["name"] == "rdma-link"]
    assert link.inputs["metadata"]["labels"][QUEUE_LABEL] == PROGRAM_QUEUE and link.inputs["spec"]["suspend"] is True
    (pod,) = link.inputs["spec"]["template"]["spec"]["containers"][:1]
    assert any(k.startswith("rdma/") for k in pod["resources"]["limits"])  # asked for, but not a quota
    (cq,) = [r for r in rdma.resources if r.type.endswith(":ClusterQueue") and r.inputs["metadata"]["name"] == PROGRAM_QUEUE]
    assert not [k for k in cq.inputs["spec"]["resourceGroups"][0]["coveredResources"] if k.startswith("rdma/")]
    report = cluster.check(rdma, rdma.config, upstream_dir)
    assert report.ok, report.problems
