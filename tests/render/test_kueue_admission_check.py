"""Kueue in the whole-cluster check: Kueue's custom resources held to the CRDs of the chart of the
release the model follows (rendered offline like every chart), and queued jobs of a real lab plan judged on
its modelled nodes: a job Kueue would never admit is a problem naming the job, its queue and what
is short; one it admits is a line of the report."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from render import __main__ as render_main
from render import cluster, program
from render.cluster import kueue_objects
from render.cluster import objects as cluster_objects
from render.cluster.admission import Admission
from render.cluster.objects import Obj, parse_documents, render_chart
from render.summary import planned_cluster
from tests.render.kueue_builders import (
    GPU,
    cluster_queue,
    flavor,
    job,
    local_queue,
    namespace,
    quota,
    topology,
)

KUEUE_CHART, KUEUE_VERSION = "kueue", kueue_objects.MODELLED_VERSION  # the chart of the release modelled
RELEASE_URN = "urn:pulumi:lab::gpu-cluster::kubernetes:helm.sh/v3:Release::kueue"


def _chart_objects(upstream: Path) -> list[Obj]:
    path = cluster_objects.chart_dir(upstream, KUEUE_CHART, KUEUE_VERSION)
    rendered, _ = render_chart(path, {}, "kueue", "kueue-system", "1.33.0")
    return [Obj(doc, RELEASE_URN, "release kueue") for text in rendered.values() for doc in parse_documents(text)]


def _schema_problems(upstream: Path, *custom: Obj, depends: bool = True) -> list[str]:
    objects = [*_chart_objects(upstream), *custom]
    deps = {"urn:queues": [RELEASE_URN] if depends else []}
    return [f"{p.subject}: {p.reason}" for p in Admission(objects, deps, "1.33").schema()
            if p.subject.split(" ", 1)[0] in ("ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology")]


def _valid_set() -> list[Obj]:
    return [flavor("gpu", {"nvidia.com/gpu.present": "true"}, topology="racks"), topology("racks", "rack"),
            cluster_queue("team-a", [("gpu", [quota(GPU, 2, borrowing=2)])], cohort="gpu-cluster"),
            local_queue("team-a", "team", "team-a")]


def test_the_pinned_chart_brings_kueue_crds(upstream_dir: Path) -> None:
    crds = {o.name for o in _chart_objects(upstream_dir) if o.kind == "CustomResourceDefinition"}
    assert {"clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io",
            "topologies.kueue.x-k8s.io", "workloads.kueue.x-k8s.io"} <= crds


def test_kueue_objects_are_valid_against_the_chart_crds(upstream_dir: Path) -> None:
    assert _schema_problems(upstream_dir, *_valid_set()) == []


def test_without_the_chart_kueue_objects_have_no_crd() -> None:
    problems = [f"{p.subject}: {p.reason}" for p in Admission(_valid_set(), {}, "1.33").schema()]
    assert any(p.startswith("ClusterQueue team-a: no CRD for kueue.x-k8s.io/v1beta2 ClusterQueue") for p in problems)


@pytest.mark.parametrize("break_it,expected", [
    # v1beta1's field name in a v1beta2 object: the API server would prune it, the cohort is lost.
    (lambda s: s.update(cohort=s.pop("cohortName")), "Additional properties are not allowed ('cohort' was unexpected)"),
    (lambda s: s["resourceGroups"][0].pop("coveredResources"), "'coveredResources' is a required property"),
    (lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].pop("nominalQuota"),
     "'nominalQuota' is a required property"),
    (lambda s: s.update(queueingStrategy="Fastest"), "'Fastest' is not one of"),
], ids=["v1beta1-cohort", "no-covered-resources", "no-nominal-quota", "unknown-strategy"])
def test_a_malformed_cluster_queue_is_refused(upstream_dir: Path, break_it: Any, expected: str) -> None:
    objects = _valid_set()
    break_it(objects[2].body["spec"])
    problems = _schema_problems(upstream_dir, *objects)
    assert problems and all(p.startswith("ClusterQueue team-a: not valid against CRD clusterqueues.kueue.x-k8s.io")
                            for p in problems), problems
    assert any(expected in p for p in problems), problems


def test_a_local_queue_naming_no_valid_cluster_queue_is_refused(upstream_dir: Path) -> None:
    objects = _valid_set()
    objects[3].body["spec"]["clusterQueue"] = "Team_A"  # not a DNS subdomain: no ClusterQueue can have it
    assert any("LocalQueue team-a/team: not valid against CRD localqueues.kueue.x-k8s.io: spec.clusterQueue" in p
               for p in _schema_problems(upstream_dir, *objects))


def test_kueue_objects_must_wait_for_the_release_that_installs_the_crds(upstream_dir: Path) -> None:
    problems = _schema_problems(upstream_dir, *_valid_set(), depends=False)
    assert any("its CRD clusterqueues.kueue.x-k8s.io (release kueue) is not installed before it" in p for p in problems)


# --- the whole check on a lab plan ------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_plan() -> program.Plan:
    return program.run("lab")


def _registration(urn_kind: str, body: dict[str, Any], deps: list[str]) -> program.Registration:
    api = body["apiVersion"]
    group_version = api if "/" in api else f"core/{api}"
    name = body["metadata"]["name"]
    return program.Registration(f"urn:queues:{body['kind']}:{name}", f"kubernetes:{group_version}:{urn_kind}", name,
                                True, "", deps, "", copy.deepcopy(body))


def _with_kueue(plan: program.Plan, quota_gpus: int, train: Obj) -> program.Plan:
    """The lab plan plus Kueue's chart and one team's queue, its Job queued in it."""
    plan = copy.deepcopy(plan)
    ns = _registration("Namespace", namespace("kueue-system").body, [])
    release = program.Registration(RELEASE_URN, cluster_objects.RELEASE_TYPE, "kueue", True, "", [ns.urn], "",
                                   {"chart": KUEUE_CHART, "version": KUEUE_VERSION, "name": "kueue",
                                    "namespace": "kueue-system", "values": {}})
    team = _registration("Namespace", namespace("team-a").body, [])
    queue_objects = [flavor("gpu", {"nvidia.com/gpu.present": "true"}),
                     cluster_queue("team-a", [("gpu", [quota(GPU, quota_gpus)])]), local_queue("team-a", "team", "team-a")]
    plan.resources += [ns, release, team]
    plan.resources += [_registration(o.kind, o.body, [release.urn, team.urn]) for o in queue_objects]
    plan.resources.append(_registration("Job", train.body, [team.urn, release.urn]))  # after Kueue's webhooks
    return plan


def _kueue_problems(report: cluster.Report) -> list[str]:
    return [p for p in report.problems if p.startswith("Job team-a/train (LocalQueue")]


def test_a_queued_job_the_quota_admits_is_reported_admitted(lab_plan: program.Plan, upstream_dir: Path) -> None:
    plan = _with_kueue(lab_plan, 2, job("train", 2))
    report = cluster.check(plan, plan.config, upstream_dir)
    assert not [p for p in report.problems if "kueue.x-k8s.io" in p or p.startswith("Job team-a/")], report.problems
    assert report.queued == ["Job team-a/train (LocalQueue team-a/team → ClusterQueue team-a): admitted whole, main on gpu"]
    assert "### Queued in Kueue" in "\n".join(planned_cluster(report, ""))


def test_a_job_beyond_its_queue_quota_fails_the_check(lab_plan: program.Plan, upstream_dir: Path) -> None:
    plan = _with_kueue(lab_plan, 1, job("train", 2))
    report = cluster.check(plan, plan.config, upstream_dir)
    assert _kueue_problems(report) == [
        "Job team-a/train (LocalQueue team-a/team → ClusterQueue team-a, plan): pod set main fits no flavor of "
        "ClusterQueue team-a: flavor gpu: nvidia.com/gpu asks 2, ClusterQueue team-a can use at most 1 "
        "(nominal 1, no cohort)"]
    assert not report.ok and report.queued[0].startswith("✗ ")


def test_quota_beyond_the_gpus_of_the_plan_fails_the_check(lab_plan: program.Plan, upstream_dir: Path) -> None:
    """lab has two 1-GPU workers: a quota of 4 admits a 3-pod job whose pods can never all run."""
    plan = _with_kueue(lab_plan, 4, job("train", 3))
    (problem,) = _kueue_problems(cluster.check(plan, plan.config, upstream_dir))
    assert "admitted by quota to flavor gpu, but only 2 of 3 pods of pod set main can be placed on its nodes" in problem
    assert "cp-1" not in problem, "the control plane carries no GPU label: it is not a node of the flavor"


def test_a_queued_job_naming_a_missing_local_queue_fails_the_check(lab_plan: program.Plan, upstream_dir: Path) -> None:
    plan = _with_kueue(lab_plan, 2, job("train", 1, queue="typo"))
    assert _kueue_problems(cluster.check(plan, plan.config, upstream_dir)) == [
        "Job team-a/train (LocalQueue team-a/typo, plan): LocalQueue team-a/typo does not exist"]


def test_render_exits_3_on_a_job_kueue_never_admits(lab_plan: program.Plan, upstream_dir: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPU_CLUSTER_UPSTREAM", str(upstream_dir))
    monkeypatch.setattr(program, "run", lambda stack, *a, **k: _with_kueue(lab_plan, 1, job("train", 2)))
    assert render_main.main(["lab", "--out", str(tmp_path)]) == 3
    assert "Job team-a/train (LocalQueue team-a/team → ClusterQueue team-a, plan): pod set main fits no flavor" \
        in capsys.readouterr().err
    summary = (tmp_path / "summary.md").read_text()
    assert "**no**" in summary and "- ✗ Job team-a/train (LocalQueue team-a/team" in summary
