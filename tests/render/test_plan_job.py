"""`python -m render <stack> --job FILE...` (render/job_question.py): would a team's job be admitted?
The docs' own examples (docs/queues.md), taken from the page, and jobs a team gets wrong, answered on
lab-ha with the whole-cluster check's models: the plan's admission policy (its CEL run by cel-python),
Kueue's admission with the program's own jobs still running once `up` ends, the scheduler with the
flavor's node labels and tolerations."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from render import cluster, job_question, program
from tests.conftest import PROJECT_DIR
from tests.workloads.test_queues_docs_examples import _example

QUEUE = "kueue.x-k8s.io/queue-name"


def _report(training: dict[str, Any] | None = None, nccl_acceptance: bool = True, racks: bool = False) -> Any:
    values, secrets = program.stack_config("lab-ha")
    if racks:  # each GPU host in a rack of its own, jobs placed by Kueue's topology (TAS)
        hosts = json.loads(values["gpu-cluster:hosts"])
        for host in hosts:
            if host["name"] in ("gpu-1", "gpu-2"):
                host["rack"] = f"r{host['name'][-1]}"
        values["gpu-cluster:hosts"] = json.dumps(hosts)
        values["gpu-cluster:queues"] = json.dumps({**json.loads(values["gpu-cluster:queues"]), "rdmaTopologyLevel": "rack"})
    if training is not None:
        values["gpu-cluster:training"] = json.dumps({**json.loads(values["gpu-cluster:training"]), **training})
    values["gpu-cluster:acceptance"] = json.dumps({"nccl": nccl_acceptance})
    plan = program.run("lab-ha", config=(values, secrets))
    report = cluster.check(plan, plan.config, cluster.upstream_dir())
    assert report.ok, report.problems
    return report


@pytest.fixture(scope="module")
def committed() -> Any:
    """lab-ha as committed: the training run (2 GPUs, pulumi.com/skipAwait) still runs after `up`."""
    return _report()


@pytest.fixture(scope="module")
def idle() -> Any:
    """lab-ha with neither training nor the acceptance Job: the teams' GPUs are free."""
    return _report(training={"enabled": False}, nccl_acceptance=False)


def _ask(report: Any, *docs: dict[str, Any], tmp_path: Path) -> list[job_question.Answer]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all(list(docs)))
    return [job_question.answer(report, source, job) for source, job in job_question.read([path])]


def _gpu_job(name: str, gpus_per_pod: int = 1, pods: int = 1, **requests: str) -> dict[str, Any]:
    job = copy.deepcopy(_example("Job"))
    job["metadata"]["name"] = name
    job["spec"].update(parallelism=pods, completions=pods)
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": gpus_per_pod, **requests})
    return job


def test_the_docs_job_is_admitted_on_the_teams_gpus(idle, tmp_path):
    (a,) = _ask(idle, _example("Job"), tmp_path=tmp_path)
    assert a.state == job_question.ADMITTED, a.line()
    # two pods of one GPU: the team's nominal GPU and one borrowed, one pod on each GPU host, placed
    # although the page's pods tolerate no GPU taint: the flavor adds its tolerations
    assert "ClusterQueue vision, pod set main on flavor gpu" in a.reasons[0]
    assert a.reasons[1] == "nodes: main → gpu-1, gpu-2"
    assert a.reasons[2] == "borrows 1 nvidia.com/gpu of gpu from cohort"
    assert not a.blocks


def test_with_racks_a_job_requiring_one_rack_lands_where_kueues_topology_puts_it(tmp_path):
    report = _report(training={"enabled": False}, nccl_acceptance=False, racks=True)
    two, one = _gpu_job("rack2", pods=2), _gpu_job("rack1")
    for job in (two, one):
        job["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": "gpu-cluster.io/rack"}}
    a, b = _ask(report, two, one, tmp_path=tmp_path)
    assert a.state == job_question.NEVER, a.line()  # one GPU host per rack: no rack holds two pods
    assert "no gpu-cluster.io/rack domain holds all 2 pods" in a.reasons[0]
    assert b.state == job_question.ADMITTED and b.reasons[1] == "nodes: main → gpu-1", b.line()


def test_on_lab_ha_as_committed_the_docs_job_waits_behind_the_training_run(committed, tmp_path):
    job, torch = _ask(committed, _example("Job"), _example("PyTorchJob"), tmp_path=tmp_path)
    assert job.state == job_question.WAITS, job.line()
    assert "behind: Job training/train (ClusterQueue gpu-cluster) holds" in job.reasons[-1]
    assert "2 nvidia.com/gpu of gpu" in job.reasons[-1]
    # lab-ha's launcher is indexed-job: no training operator, so no PyTorchJob kind to create
    assert torch.state == job_question.REFUSED and torch.blocks
    assert "no matches for kind \"PyTorchJob\" in version \"kubeflow.org/v1\"" in torch.reasons[0]


def test_the_docs_pytorchjob_with_the_training_operator_queues(tmp_path):
    report = _report(training={"launcher": "pytorchjob"}, nccl_acceptance=False)
    (a,) = _ask(report, _example("PyTorchJob"), tmp_path=tmp_path)
    # the operator's CRD serves it and the policy admits it; its 2 GPUs wait for the training run's
    assert a.state == job_question.WAITS, a.line()
    assert "behind: PyTorchJob training/train" in a.reasons[-1]


def test_a_job_within_the_nominal_quota_reclaims_it_from_the_training_run(committed, tmp_path):
    (a,) = _ask(committed, _gpu_job("one"), tmp_path=tmp_path)
    assert a.state == job_question.ADMITTED, a.line()
    assert "within its nominal quota (borrows nothing)" in a.reasons
    assert "preempts Job training/train" in a.reasons


def test_more_gpus_than_the_cohort_holds_is_never_admitted(committed, tmp_path):
    (a,) = _ask(committed, _gpu_job("big", gpus_per_pod=16), tmp_path=tmp_path)
    assert a.state == job_question.NEVER and a.blocks
    assert "nvidia.com/gpu asks 16, ClusterQueue vision can use at most 2 (nominal 1 + 1 borrowed" in a.reasons[0]


def test_a_resource_no_queue_covers_is_never_admitted(committed, tmp_path):
    (a,) = _ask(committed, _gpu_job("scratch", **{"ephemeral-storage": "10Gi"}), tmp_path=tmp_path)
    assert a.state == job_question.NEVER
    assert "asks for ephemeral-storage, which ClusterQueue vision does not cover" in a.reasons[0]


def test_a_missing_priority_class_is_never_admitted(committed, tmp_path):
    """In the training namespace (no team policy there) Kueue makes no Workload for it; in a team's
    namespace the team policy refuses it first (no team may name it)."""
    job = _gpu_job("urgent")
    job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent"
    program_job = copy.deepcopy(job)
    program_job["metadata"]["namespace"] = "training"
    program_job["metadata"]["labels"][QUEUE] = "gpu-cluster"
    team, program_answer = _ask(committed, job, program_job, tmp_path=tmp_path)
    assert program_answer.state == job_question.NEVER, program_answer.line()
    assert "names no WorkloadPriorityClass of the plan" in program_answer.reasons[0]
    assert team.state == job_question.REFUSED and "the priority class urgent" in team.reasons[0], team.line()


def test_the_team_policy_refuses_a_priority_class_above_the_teams(committed, tmp_path):
    """teams[].priority: language is batch, so its job may not name gpu-cluster-training; vision
    (training) may; a pod priorityClassName is refused for both."""
    language = _gpu_job("urgent")
    language["metadata"].update(namespace="team-language", labels={QUEUE: "language",
                                                                   "kueue.x-k8s.io/priority-class": "gpu-cluster-training"})
    pod_priority = _gpu_job("critical")
    pod_priority["spec"]["template"]["spec"]["priorityClassName"] = "system-node-critical"
    refused, vision, pods = _ask(committed, language, _gpu_job("mine"), pod_priority, tmp_path=tmp_path)
    assert refused.state == job_question.REFUSED, refused.line()
    assert refused.reasons == ["ValidatingAdmissionPolicy 'gpu-cluster-team-queue' with binding 'gpu-cluster-team-queue' "
                               "denied request: the priority class gpu-cluster-training (kueue.x-k8s.io/priority-class) "
                               "is not one the team of namespace team-language may use: gpu-cluster-batch (its "
                               "priority is batch)"]
    assert vision.state != job_question.REFUSED, vision.line()
    assert pods.state == job_question.REFUSED and "may not set priorityClassName" in pods.reasons[0], pods.line()


def test_the_team_policy_refuses_a_job_without_its_queue(committed, tmp_path):
    unlabelled, other_team = _gpu_job("nolabel"), _gpu_job("theirs")
    del unlabelled["metadata"]["labels"][QUEUE]
    other_team["metadata"]["labels"][QUEUE] = "language"
    answers = _ask(committed, unlabelled, other_team, tmp_path=tmp_path)
    for a in answers:
        assert a.state == job_question.REFUSED, a.line()
        assert a.reasons == ["ValidatingAdmissionPolicy 'gpu-cluster-team-queue' with binding 'gpu-cluster-team-queue' "
                             "denied request: a Job or PyTorchJob in namespace team-vision must carry the label "
                             "kueue.x-k8s.io/queue-name: vision (its LocalQueue), so that Kueue admits it within "
                             "the team quota"]


def test_the_api_servers_schema_refuses_a_malformed_job(committed, tmp_path):
    job, torch = _gpu_job("typo"), copy.deepcopy(_example("PyTorchJob"))
    job["spec"]["parallelizm"] = 2  # not a field of batch/v1 Job: strict validation refuses it
    torch["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    report = _report(training={"launcher": "pytorchjob"}, nccl_acceptance=False)
    (a,) = _ask(committed, job, tmp_path=tmp_path)
    (b,) = _ask(report, torch, tmp_path=tmp_path)
    assert a.state == job_question.REFUSED and "parallelizm" in a.reasons[0], a.line()
    assert b.state == job_question.REFUSED, b.line()
    assert b.reasons[0].startswith("schema: spec.pytorchReplicaSpecs.Worker.replicas: 'two' is not of type 'integer'")


def test_every_validation_of_a_bound_policy_is_evaluated_with_its_variables(committed, tmp_path):
    """A policy refusing a priority class the team may not use (teams[].priority), as another
    validation with a variable: answered from the policy the plan holds, whatever it says."""
    checked = copy.deepcopy(committed.checked)
    (policy,) = [o for o in checked if o.kind == "ValidatingAdmissionPolicy"]
    policy.body["spec"]["variables"] = [{"name": "priority", "expression": (
        "has(object.metadata.labels) && 'kueue.x-k8s.io/priority-class' in object.metadata.labels ? "
        "object.metadata.labels['kueue.x-k8s.io/priority-class'] : ''")}]
    policy.body["spec"]["validations"].append({
        "expression": "variables.priority in ['', 'gpu-cluster-batch']",
        "messageExpression": "'priority class ' + variables.priority + ' is not allowed in ' + namespaceObject.metadata.name"})
    report = dataclasses.replace(committed, checked=checked)
    batch = _gpu_job("batch")
    batch["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "gpu-cluster-batch"
    training, batch_answer = _ask(report, _gpu_job("training"), batch, tmp_path=tmp_path)
    assert training.state == job_question.REFUSED, training.line()
    assert training.reasons == ["ValidatingAdmissionPolicy 'gpu-cluster-team-queue' with binding 'gpu-cluster-team-queue' "
                                "denied request: priority class gpu-cluster-training is not allowed in team-vision"]
    assert batch_answer.state != job_question.REFUSED, batch_answer.line()


def test_a_namespace_the_plan_lacks_is_refused(committed, tmp_path):
    job = _gpu_job("lost")
    job["metadata"]["namespace"] = "team-nope"
    (a,) = _ask(committed, job, tmp_path=tmp_path)
    assert a.state == job_question.REFUSED and "namespaces \"team-nope\" not found" in a.reasons[0]


def test_an_unqueued_job_outside_the_team_namespaces_is_a_bad_job_file(committed, tmp_path):
    job = _gpu_job("free")
    job["metadata"]["namespace"] = "training"
    del job["metadata"]["labels"][QUEUE]
    with pytest.raises(job_question.JobFileError, match=r"job.yaml#1: Job training/free has no label kueue"):
        _ask(committed, job, tmp_path=tmp_path)


def _render(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_CLUSTER_UPSTREAM": str(cluster.upstream_dir())}
    return subprocess.run([sys.executable, "-m", "render", "lab-ha", "--out", str(tmp_path / "out"), *args],
                          cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it"),
    ("kind: [unclosed", "not YAML"),
    ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n", "#1: is apps/v1 Deployment; only a batch/v1 Job"),
    ("", "holds no document"),
])
def test_a_bad_job_file_exits_2_naming_it(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    done = _render("--job", str(path), tmp_path=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"error: --job {path}" in done.stderr and message in done.stderr


def test_the_command_answers_each_job_and_exits_3_for_one_never_admitted(tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump_all([_gpu_job("one"), _gpu_job("big", gpus_per_pod=16)]))
    done = _render("--job", str(jobs), tmp_path=tmp_path)
    assert done.returncode == 3, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("job ")]
    assert lines[0].startswith(f"job Job team-vision/one ({jobs}#1): admitted: ClusterQueue vision")
    assert lines[1].startswith(f"job Job team-vision/big ({jobs}#2): never: ")
    summary_md = (tmp_path / "out" / "summary.md").read_text()
    assert "## Would these jobs be admitted (--job)" in summary_md
    assert f"- ✗ Job team-vision/big ({jobs}#2): never: " in summary_md


def test_the_pages_output_excerpt_is_what_the_command_answers(committed, tmp_path):
    """docs/queues.md "Would my job be admitted?": its text block is this command's answer, on
    the page's Job and a copy asking 4 GPUs and ephemeral-storage, as the page describes them."""
    page = (PROJECT_DIR / "docs" / "queues.md").read_text()
    section = page.split("## Would my job be admitted?", 1)[1].split("\n## ", 1)[0]
    excerpt = section.split("```text\n", 1)[1].split("```", 1)[0]
    shown = [" ".join(line.split()) for line in re.split(r"\n(?=job )", excerpt.strip())]  # one per job, unwrapped
    big = _gpu_job("resnet-big", gpus_per_pod=4, **{"ephemeral-storage": "50Gi"})
    big["spec"].update(parallelism=2, completions=2)
    files = []
    for name, doc in (("resnet-sweep.yaml", _example("Job")), ("resnet-big.yaml", big)):
        (tmp_path / name).write_text(yaml.safe_dump(doc))
        files.append(tmp_path / name)
    answers = [job_question.answer(committed, source, job) for source, job in job_question.read(files)]
    assert [" ".join(f"job {a.line()}".replace(f"{tmp_path}/", "").split()) for a in answers] == shown
