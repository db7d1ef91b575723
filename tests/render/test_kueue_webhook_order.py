"""The whole-cluster check holds every queued job to Kueue's webhooks (render/cluster/
kueue_webhook_order.py): on lab-ha (two teams, the program's acceptance and training Jobs queued)
each queued Job is created after the Kueue release, whose chart registers the webhooks covering
it; a plan where the training Job no longer waits for the release, or where the release skips
waiting for Kueue's controller, makes `python -m render` exit 3 naming the job."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from render import __main__ as render_main
from render import cluster, program
from render.cluster import kueue_objects, kueue_webhook_order
from render.cluster.objects import collect

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    return program.run("lab-ha")


def _train(plan: program.Plan) -> program.Registration:
    (job,) = [r for r in plan.of_type("kubernetes:batch/v1:Job") if r.inputs["metadata"]["name"] == "train"]
    return job


def _kueue(plan: program.Plan) -> program.Registration:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs.get("name") == "kueue"]
    return release


def _without_kueue_ancestry(plan: program.Plan, urn: str) -> program.Plan:
    """The plan with `urn` registered after its shared claim only: its parent component and that
    component's other children (each waits for the Kueue release) cut."""
    broken = copy.deepcopy(plan)
    (job,) = [r for r in broken.resources if r.urn == urn]
    job.dependencies = [d for d in job.dependencies if ":PersistentVolumeClaim::" in d]
    job.parent = ""
    return broken


def _render(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, p: program.Plan, upstream: Path,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    monkeypatch.setattr(program, "run", lambda stack, **_: p)
    monkeypatch.setenv("GPU_CLUSTER_UPSTREAM", str(upstream))
    code = render_main.main(["lab-ha", "--out", str(tmp_path / "out")])
    return code, capsys.readouterr().err + (tmp_path / "out" / "summary.md").read_text()


def test_the_chart_registers_webhooks_for_the_queued_jobs_and_they_wait(plan: program.Plan, upstream_dir: Path) -> None:
    objects = collect(plan, upstream_dir, plan.config.kubernetes_version).objects
    world = kueue_objects.read(objects)
    train = next(w for w in world.workloads if w.obj.name == "train")
    hooks = kueue_webhook_order.webhooks_for(objects, train, world.labels_of("training"))
    # Kueue 0.19.2's chart: a mutating and a validating webhook for batch/v1 Jobs, failurePolicy Fail.
    assert sorted(name for _, name in hooks) == ["mjob.kb.io, failurePolicy Fail", "vjob.kb.io, failurePolicy Fail"]
    assert {o.source for o, _ in hooks} == {_kueue(plan).urn}
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems


def test_a_queued_job_that_does_not_wait_for_kueue_makes_render_exit_3(
        plan: program.Plan, upstream_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    broken = _without_kueue_ancestry(plan, _train(plan).urn)
    code, out = _render(monkeypatch, tmp_path, broken, upstream_dir, capsys)
    assert code == 3, out
    assert "Job training/train" in out and "is not created after Release queues-kueue is ready" in out, out
    assert "Job training/nccl-acceptance" not in out.split("is not created after")[0]  # only the one cut


def test_a_kueue_release_that_skips_waiting_fails_the_check(plan: program.Plan, upstream_dir: Path) -> None:
    broken = copy.deepcopy(plan)
    _kueue(broken).inputs["skipAwait"] = True
    problems = cluster.check(broken, broken.config, upstream_dir).problems
    assert any("Job training/train" in p and "skipAwait" in p for p in problems), problems
