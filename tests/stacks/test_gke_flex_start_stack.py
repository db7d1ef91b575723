"""The gke stack with a flex-start pool (queued provisioning) and Kueue, evaluated by the real program
under the recording mocks and checked by the whole-cluster check (the autouse fixture: it must come
up), and a reservation pool rendered by `python -m render` as a user runs it:

  - the pool registers queued provisioning; Kueue gets the ProvisioningRequestConfig and the
    AdmissionCheck, every ClusterQueue runs it on the flex-start flavor only, all validated
    against the pinned chart's CRDs by the check;
  - the GPU node agents also run on the flex-start pool's (tainted) nodes;
  - a plan whose AdmissionCheck is lost leaves the program's queue inactive: exit 3 material;
  - a training job no single flavor holds exits 3 naming the job, its queue and the flex-start
    pool's shortfall, though the config's room check (pools together) accepted it;
  - a reservation pool renders with a warning that its size is not known offline.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from render import cluster, program
from tests.conftest import stack_config_with
from tests.render_cli import render_cli

FLEX = {"name": "a100-flex", "machineType": "a2-highgpu-1g", "accelerator": {"type": "nvidia-tesla-a100", "count": 1},
        "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 1}, "provisioning": "flexStart"}
TEAM = {"name": "vision", "namespace": "team-vision", "group": "vision@example.com", "gpus": 1, "cpu": "8",
        "memory": "32Gi"}


def _gke(*extra_pools: dict[str, Any], keep: tuple[str, ...] = ("l4-spot", "a100")) -> dict[str, Any]:
    gke = json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"])
    gke["gpuPools"] = [p for p in gke["gpuPools"] if p["name"] in keep] + [copy.deepcopy(p) for p in extra_pools]
    return gke


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    return program.run("gke", config=stack_config_with("gke", gke=_gke(FLEX), queues={"enabled": True, "teams": [TEAM]}))


def _kueue(plan: program.Plan, kind: str) -> list[program.Registration]:
    return [r for r in plan.resources if r.type.startswith("kubernetes:kueue.x-k8s.io/") and r.type.endswith(f":{kind}")]


def test_the_flex_start_pool_and_its_admission_check_are_in_the_plan(plan: program.Plan, upstream_dir: Path):
    (pool,) = [r for r in plan.of_type("gcp:container/nodePool:NodePool") if r.inputs["name"] == "a100-flex"]
    assert pool.inputs["queuedProvisioning"] == {"enabled": True} and pool.inputs["nodeConfig"]["flexStart"] is True
    (prc,) = _kueue(plan, "ProvisioningRequestConfig")
    assert prc.inputs["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    (check,) = _kueue(plan, "AdmissionCheck")
    assert check.inputs["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    queues = _kueue(plan, "ClusterQueue")
    assert {q.inputs["metadata"]["name"] for q in queues} == {"gpu-cluster", "vision"}
    for q in queues:
        assert q.inputs["spec"]["admissionChecksStrategy"] == {
            "admissionChecks": [{"name": "gke-queued-provisioning", "onFlavors": ["a100-flex-flex-start"]}]}
    (flavor,) = [f for f in _kueue(plan, "ResourceFlavor") if f.inputs["metadata"]["name"] == "a100-flex-flex-start"]
    assert {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"} in \
        flavor.inputs["spec"]["tolerations"]
    report = cluster.check(plan, plan.config, upstream_dir)  # Kueue's objects against the chart's CRDs
    assert report.ok, report.problems


def test_the_gpu_node_agents_run_on_the_flex_start_nodes(plan: program.Plan, upstream_dir: Path):
    report = cluster.check(plan, plan.config, upstream_dir)
    flex_nodes = {n for p in report.placements if p.workload.daemon for n in p.nodes if n.startswith("a100-flex-")}
    assert flex_nodes == {"a100-flex-1"}
    dcgm = next(p for p in report.placements if p.workload.daemon and "dcgm-exporter" in p.workload.ref)
    assert "a100-flex-1" in dcgm.nodes


def test_a_plan_without_its_admission_check_leaves_the_queue_inactive(plan: program.Plan, upstream_dir: Path):
    broken = copy.deepcopy(plan)
    broken.resources = [r for r in broken.resources if not r.type.endswith(":AdmissionCheck")]
    problems = cluster.check(broken, broken.config, upstream_dir).problems
    assert any(p.startswith("Job training/train (LocalQueue training/gpu-cluster → ClusterQueue gpu-cluster")
               and "its AdmissionCheck gke-queued-provisioning does not exist" in p for p in problems), problems


def test_a_job_no_flavor_holds_exits_3_naming_the_flex_start_pool(tmp_path: Path, upstream_dir: Path):
    """Three one-GPU pods: the config's room check adds the pools (two on-demand A100 nodes, one
    flex-start), but Kueue puts a pod set in one flavor, and neither holds three."""
    gke = _gke(FLEX, keep=("a100",))
    gke["gpuPools"][0]["autoscaling"] = {"minNodes": 1, "maxNodes": 2}
    training = {**json.loads(program.stack_config("gke")[0]["gpu-cluster:training"]), "nodes": 3}
    result = render_cli(tmp_path, "gke", {"gke": gke, "queues": {"enabled": True}, "training": training},
                        upstream=upstream_dir)
    assert result.returncode == 3, result.stderr
    assert "Job training/train (LocalQueue training/gpu-cluster → ClusterQueue gpu-cluster" in result.stderr
    assert ("flex-start pool a100-flex scales to at most 1 node (gke.gpuPools[].autoscaling.maxNodes x zones) but "
            "the job needs 3 (3 pods of main at 1 per node): 2 nodes short") in result.stderr


def test_a_reservation_pool_renders_with_a_warning_that_its_size_is_unknown(tmp_path: Path):
    reserved = {**FLEX, "name": "a100-res", "provisioning": "reservation", "reservation": "a100-reserved",
                "autoscaling": {"minNodes": 0, "maxNodes": 2}}
    result = render_cli(tmp_path, "gke", {"gke": _gke(reserved)})
    assert result.returncode == 0, result.stderr
    warning = ("gpu-cluster:gke.gpuPools[2] (a100-res) consumes reservation a100-reserved: how many VMs it holds "
               "is not known offline")
    assert f"warning: {warning}" in result.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Warnings" in summary and warning in summary
