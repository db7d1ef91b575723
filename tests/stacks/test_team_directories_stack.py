"""The teams' directories on a static NFS export come with `pulumi up`, no manual step: dev with
storage.nfs and gke with its Filestore share, queues on, as ./plan renders them.

* a Job in the training namespace mounts the training claim (the export's root), made after that
  claim and Kueue's release; each team's PersistentVolume waits for it (Pulumi waits for a Job);
* its command, as the plan holds it, run with bash in a directory standing in for the export,
  makes exactly the teams' directories;
* the whole-cluster check validates and places it, and Kueue would not queue it;
* a team added later: the Job is replaced (a new name, created first), the other teams' volumes
  stay as they are;
* lab (the NFS CSI driver makes each claim's directory) and dev storage.hostPath (the kubelet
  makes it) have no such Job.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from render import cluster, program
from render.update import Action, compare
from render.update_inputs import Resource
from tests.conftest import stack_config_with

JOB = "kubernetes:batch/v1:Job"
PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
RELEASE = "kubernetes:helm.sh/v3:Release"
DIRECTORIES_LABEL = ("app.kubernetes.io/name", "gpu-cluster-team-directories")
NFS = {"nfs": {"server": "192.168.49.1", "path": "/srv/nfs/kubedata"}, "size": "100Gi"}


def _teams(extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """lab-ha's two teams (and `extra`), lending each other everything (dev has one GPU)."""
    values, _ = program.stack_config("lab-ha")
    teams = json.loads(values["gpu-cluster:queues"])["teams"]
    return [{**t, "gpus": 0} for t in [*teams, *(extra or [])]]


def _queues(teams: list[dict[str, Any]]) -> dict[str, Any]:
    values, _ = program.stack_config("lab-ha")
    return {**json.loads(values["gpu-cluster:queues"]), "teams": teams}


def _dev(storage: dict[str, Any], teams: list[dict[str, Any]] | None = None) -> program.Plan:
    return program.run("dev", config=stack_config_with("dev", storage=json.dumps(storage),
                                                         queues=_queues(teams or _teams())))


@pytest.fixture(scope="module")
def dev_nfs() -> program.Plan:
    return _dev(NFS)


@pytest.fixture(scope="module")
def gke() -> program.Plan:
    return program.run("gke", config=stack_config_with("gke", queues=_queues(_teams())))


def _directories_jobs(plan: program.Plan) -> list[program.Registration]:
    key, value = DIRECTORIES_LABEL
    return [r for r in plan.of_type(JOB) if (r.inputs["metadata"].get("labels") or {}).get(key) == value]


def _team_namespaces(plan: program.Plan) -> list[str]:
    return [t["namespace"] for t in plan.outputs["queues"].values()]


def _training_claim(plan: program.Plan) -> program.Registration:
    (claim,) = [r for r in plan.of_type(PVC) if r.inputs["metadata"]["namespace"] == "training"]
    return claim


def _run_command(job: program.Registration, root: Path) -> None:
    (container,) = job.inputs["spec"]["template"]["spec"]["containers"]
    bash = shutil.which("bash")
    assert bash
    done = subprocess.run([bash, *container["command"][1:]], cwd=root, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("stack", ["dev_nfs", "gke"])
def test_the_job_makes_every_teams_directory_before_its_volume(stack: str, request: pytest.FixtureRequest,
                                                               tmp_path: Path) -> None:
    plan: program.Plan = request.getfixturevalue(stack)
    (job,) = _directories_jobs(plan)
    assert job.inputs["metadata"]["namespace"] == "training"
    pod = job.inputs["spec"]["template"]["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == _training_claim(plan).inputs["metadata"]["name"]
    # The training claim is the export's root: its volume's path is the teams' volumes' parent.
    (root_volume,) = [r for r in plan.of_type(PV) if r.inputs["spec"]["claimRef"]["namespace"] == "training"]
    export = root_volume.inputs["spec"]["nfs"]["path"]
    # After the claim it mounts, and after Kueue's release (its webhook answers for the training namespace's Jobs).
    (kueue,) = [r for r in plan.of_type(RELEASE) if r.inputs.get("name") == "kueue"]
    assert _training_claim(plan).urn in job.dependencies and kueue.urn in job.dependencies
    namespaces = _team_namespaces(plan)
    for ns in namespaces:
        (volume,) = [r for r in plan.of_type(PV) if r.inputs["spec"]["claimRef"]["namespace"] == ns]
        assert volume.inputs["spec"]["nfs"]["path"] == f"{export}/teams/{ns}"
        assert job.urn in volume.dependencies  # nothing mounts it before the directory exists
        assert "create the directory" not in plan.outputs["queues"][next(
            t for t, o in plan.outputs["queues"].items() if o["namespace"] == ns)]["storage"]
    _run_command(job, tmp_path)
    assert sorted(p.name for p in (tmp_path / "teams").iterdir()) == sorted(namespaces)


@pytest.mark.parametrize("stack", ["dev_nfs", "gke"])
def test_the_whole_cluster_check_places_it_and_kueue_leaves_it_alone(stack: str, request: pytest.FixtureRequest,
                                                                     upstream_dir: Path) -> None:
    plan: program.Plan = request.getfixturevalue(stack)
    (job,) = _directories_jobs(plan)
    report = cluster.check(plan, plan.config, upstream_dir)  # strict schema, Pod Security, scheduling
    assert report.ok, report.problems
    name = job.inputs["metadata"]["name"]
    (line,) = [line for line in report.lines if f"Job training/{name} " in line]
    assert "1 pod →" in line, line
    assert not any(name in q for q in report.queued)
    # Kueue would not suspend it: no queue label, and manageJobsWithoutQueueName is not on.
    assert "kueue.x-k8s.io/queue-name" not in job.inputs["metadata"].get("labels", {})
    (kueue,) = [r for r in plan.of_type(RELEASE) if r.inputs.get("name") == "kueue"]
    manager = yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert not manager.get("manageJobsWithoutQueueName", False)


def test_a_team_added_later_reruns_the_job_and_keeps_the_others_volumes(dev_nfs: program.Plan, tmp_path: Path) -> None:
    speech = {**_teams()[0], "name": "speech", "namespace": "team-speech", "group": "gpu-speech"}
    more = _dev(NFS, _teams([speech]))
    (old_job,), (new_job,) = _directories_jobs(dev_nfs), _directories_jobs(more)
    assert old_job.urn == new_job.urn and old_job.inputs["metadata"]["name"] != new_job.inputs["metadata"]["name"]
    steps = {s.resource.urn: s for s in compare(Resource.from_plan(dev_nfs), Resource.from_plan(more)).steps}
    job_step = steps[new_job.urn]
    # A new name: the provider creates the new Job first (no name clash), then deletes the old one.
    assert job_step.action is Action.REPLACE and not job_step.delete_first, job_step
    for r in more.of_type(PV):
        ns = r.inputs["spec"]["claimRef"]["namespace"]
        if ns in ("team-vision", "team-language", "training"):
            assert steps[r.urn].action is Action.SAME, (ns, steps[r.urn])
        if ns == "team-speech":
            assert steps[r.urn].action is Action.CREATE and new_job.urn in r.dependencies
    _run_command(new_job, tmp_path)
    assert sorted(p.name for p in (tmp_path / "teams").iterdir()) == ["team-language", "team-speech", "team-vision"]


@pytest.mark.parametrize("stack,storage", [("lab-ha", None), ("dev", {"hostPath": "/data/gpu-cluster-shared", "size": "50Gi"})])
def test_no_job_where_the_storage_makes_the_directory(stack: str, storage: dict[str, Any] | None) -> None:
    plan = program.run(stack) if storage is None else _dev(storage)
    assert _team_namespaces(plan)
    assert not _directories_jobs(plan)
    assert all(not any(":batch/v1:Job::" in d for d in r.dependencies) for r in [*plan.of_type(PV), *plan.of_type(PVC)])
