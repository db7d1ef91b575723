"""lab with MIG under the mixed strategy, end to end: the ClusterQueues cover the slice type the
program's pods request (nvidia.com/mig-<profile>), their quotas are in slices (2 H100 80GB cut
all-1g.10gb: 14), the whole-cluster check's Kueue model admits the program's jobs requesting
slices, and the Grafana row's quota panel reads Kueue's quota metrics for that resource."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring import kueue as kueue_monitoring
from render import cluster, program
from render.__main__ import kubernetes_objects
from tests.conftest import stack_config_with

SLICE = "nvidia.com/mig-1g.10gb"
MIXED = {"stack": "operator", "sharing": {"mode": "mig", "migStrategy": "mixed", "migProfile": "all-1g.10gb"}}


def _hosts() -> list[dict[str, Any]]:
    """lab-ha's hosts, its two 1-GPU workers named as H100 80GB."""
    raw = yaml.safe_load((program.PROJECT_DIR / "Pulumi.lab-ha.yaml").read_text())["config"]["gpu-cluster:hosts"]
    return [{**h, "gpuModel": "NVIDIA-H100-80GB-HBM3"} if h.get("gpus") else h for h in raw]


def _teams(gpus: int) -> list[dict[str, Any]]:
    return [{"name": n, "namespace": f"team-{n}", "group": f"gpu-{n}", "gpus": gpus, "cpu": "16", "memory": "64Gi"}
            for n in ("vision", "language")]


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    # 6 + 6 slices of the 14: main counted the flavor as 2 GPUs and refused each team's 6
    return program.run("lab-ha", config=stack_config_with("lab-ha", hosts=_hosts(), gpu=MIXED,
                                                          queues={"teams": _teams(6)}))


def _cluster_queues(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"] for o in objects if o.get("kind") == "ClusterQueue"}


def _nominal(spec: dict[str, Any], resource: str) -> dict[str, str]:
    return {f["name"]: r["nominalQuota"] for g in spec["resourceGroups"] for f in g["flavors"]
            for r in f["resources"] if r["name"] == resource}


def test_the_cluster_queues_cover_the_slice_the_pods_request_in_slices(plan: program.Plan) -> None:
    objects = kubernetes_objects(plan)
    queues = _cluster_queues(objects)
    assert {q["resourceGroups"][0]["coveredResources"][0] for q in queues.values()} == {SLICE}
    flavor = "nvidia-h100-80gb-hbm3"
    assert _nominal(queues["vision"], SLICE) == {flavor: "6"} == _nominal(queues["language"], SLICE)
    assert _nominal(queues["gpu-cluster"], SLICE) == {flavor: "2"}  # 14 - 6 - 6: the cohort holds the 14
    jobs = [o for o in objects if o.get("kind") == "Job" and o["metadata"].get("name") in ("nccl-acceptance", "train")]
    assert len(jobs) == 2
    for job in jobs:
        limits = [c["resources"]["limits"] for c in job["spec"]["template"]["spec"]["containers"]]
        assert any(SLICE in lim for lim in limits), job["metadata"]["name"]


def test_the_kueue_model_admits_the_jobs_requesting_slices(plan: program.Plan, upstream_dir: Path) -> None:
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    admitted = [line for line in report.queued if "admitted whole" in line]
    assert any(line.startswith("Job training/train ") for line in admitted), report.queued
    assert any(line.startswith("Job training/nccl-acceptance ") for line in admitted), report.queued


def test_the_quota_panel_reads_the_covered_resource(plan: program.Plan) -> None:
    panels = [p for o in kubernetes_objects(plan) if o.get("kind") == "ConfigMap"
              for text in (o.get("data") or {}).values() if text.lstrip().startswith("{")
              for p in json.loads(text).get("panels", []) if p.get("title") == "GPU quota used"]
    assert panels, "the fleet dashboard has the Kueue row"
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    assert exprs and all(f'resource="{SLICE}"' in e and 'resource="nvidia.com/gpu"' not in e for e in exprs)
    assert kueue_monitoring.USAGE in exprs[0]
