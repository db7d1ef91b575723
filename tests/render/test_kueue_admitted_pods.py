"""The whole-cluster check places a queued job's pods as Kueue starts them (issue 33's audit): with
the node labels and tolerations its ResourceFlavor adds at admission (render/cluster/kueue_admitted_pods.py).

The jobs are docs/queues.md's own team examples, read from the page, added to lab-ha's plan (queues
on, two teams); they tolerate no GPU taint and select no GPU node, as the page says they need not."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from render import cluster, program
from render.cluster import kueue_objects

DOCS = Path(__file__).resolve().parents[2] / "docs" / "queues.md"


def _docs_example(kind: str) -> dict:
    (text,) = [b for b in re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S) if f"\nkind: {kind}\n" in b]
    body = yaml.safe_load(text)
    assert body["metadata"]["labels"][kueue_objects.QUEUE_LABEL] == "vision"
    return body


def _check(upstream_dir: Path, *, flavor_tolerations: bool) -> cluster.Report:
    plan = program.run("lab-ha")
    for r in plan.of_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"):
        if not flavor_tolerations:
            r.inputs = copy.deepcopy(r.inputs)
            r.inputs["spec"].pop("tolerations")
    for kind in ("Job", "PyTorchJob"):
        body = _docs_example(kind)
        plan.resources.append(program.Registration(f"urn:team:{kind}", f"kubernetes:{body['apiVersion']}:{kind}",
                                                   body["metadata"]["name"], True, "", [], "", body))
    return cluster.check(plan, plan.config, upstream_dir)


def _lines(report: cluster.Report, *names: str) -> list[str]:
    return [line for line in report.lines if any(f"team-vision/{n} " in line for n in names)]


TEAM_PODS = ("resnet-sweep", "bert-finetune-master", "bert-finetune-worker")


def test_docs_team_jobs_run_on_the_gpu_nodes_their_flavor_admits_them_to(upstream_dir: Path) -> None:
    report = _check(upstream_dir, flavor_tolerations=True)
    lines = _lines(report, *TEAM_PODS)
    assert len(lines) == 3, report.lines
    # Before: "0 of 2 pods can be placed; ... gpu-1, gpu-2: untolerated taint nvidia.com/gpu=present:NoSchedule".
    assert lines[0].startswith("Job team-vision/resnet-sweep (plan): 2 pods → gpu-1, gpu-2"), lines
    for line in lines[1:]:
        assert re.search(r": 1 pod → gpu-[12]$", line), lines
    assert not [p for p in report.problems if "can be placed" in p and "team-vision" in p], report.problems
    assert any(q.startswith("Job team-vision/resnet-sweep") and "admitted whole, main on gpu" in q for q in report.queued)


def test_a_flavor_without_the_gpu_toleration_leaves_the_docs_job_unplaceable(upstream_dir: Path) -> None:
    report = _check(upstream_dir, flavor_tolerations=False)
    (line,) = _lines(report, "resnet-sweep")
    assert "0 of 2 pods can be placed" in line and "untolerated taint nvidia.com/gpu=present:NoSchedule" in line, line
    assert any("team-vision/resnet-sweep" in p and "only 0 of 2 pods can be placed" in p for p in report.problems)
