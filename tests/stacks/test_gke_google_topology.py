"""GKE topology made usable and honest (config/gcp/accelerators.py, config/queue_flavors.py,
render/cluster/nodes.py, render/cluster/kueue_admission.py), through config, the plan, the
whole-cluster check (Kueue's objects validated against the pinned chart's CRDs) and `python -m render`:

* the A3 Ultra (a3-ultragpu-8g, 8 nvidia-h200-141gb) and A4 (a4-highgpu-8g, 8 nvidia-b200) machine
  types are accepted with Google's accelerator and count, and refused with any other;
* Google labels A4 / A3 Ultra nodes of a reservation with their block, sub-block and host, values
  unknown offline: a two-node job requiring the sub-block level on an A3 Ultra reservation pool is
  admitted on quota and per-node fit, and render warns (stderr and summary.md) that whether its
  nodes land in one sub-block is Google's placement; the check's nodes get no invented value;
* a job that can only land on a pool Google does not label (g2, on-demand A3 Ultra) still exits 3:
  Kueue leaves unlabelled nodes out of a topology flavor;
* queues.rdmaTopologyLevel on gke with no labelled GPU pool is refused, exit 2, naming the key and
  the pools.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from config.queue_flavors import GKE_LEVELS, TOPOLOGY_NAME
from config.queues import REQUIRED_TOPOLOGY
from config.scheduling_contract import GKE_BLOCK_LABEL, GKE_HOST_LABEL, GKE_SUBBLOCK_LABEL
from render import cluster, program
from render.__main__ import kubernetes_objects
from tests.config.refusals import accepted, reported
from tests.config.test_gke_config import gke_raw
from tests.conftest import stack_config_with
from tests.render_cli import render_cli

H200_RES = {"name": "h200-res", "machineType": "a3-ultragpu-8g", "accelerator": {"type": "nvidia-h200-141gb", "count": 8},
            "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 2}, "provisioning": "reservation",
            "reservation": "h200-block"}
B200_RES = {**H200_RES, "name": "b200-res", "machineType": "a4-highgpu-8g",
            "accelerator": {"type": "nvidia-b200", "count": 8}, "reservation": "b200-block"}
RACK = {"enabled": True, "rdmaTopologyLevel": "rack"}
TWO_NODES = {"nodes": 2, "gpusPerNode": 8}


def _gke(*pools: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    gke = json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"])
    gke["gpuPools"] = [p for p in gke["gpuPools"] if p["name"] in keep] + [copy.deepcopy(p) for p in pools]
    return gke


def _training(**changes: Any) -> dict[str, Any]:
    return {**json.loads(program.stack_config("gke")[0]["gpu-cluster:training"]), **changes}


# --- the machine types ----------------------------------------------------------------------------

@pytest.mark.parametrize("pool", [H200_RES, B200_RES], ids=["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_a3_ultra_and_a4_pools_are_accepted_with_googles_accelerator(pool: dict[str, Any]) -> None:
    cfg = accepted(gke_raw(pool))
    (got,) = cfg.gke.gpu_pools
    assert (got.machine_type, got.accelerator.type, got.accelerator.count) == (
        pool["machineType"], pool["accelerator"]["type"], 8)


def test_a3_ultra_and_a4_refuse_another_accelerator_or_count() -> None:
    wrong_type = {**H200_RES, "accelerator": {"type": "nvidia-h100-80gb", "count": 8}}
    reported(gke_raw(wrong_type), "gke.gpuPools[0].accelerator.type", "a3-ultragpu-8g comes with nvidia-h200-141gb")
    wrong_count = {**B200_RES, "accelerator": {"type": "nvidia-b200", "count": 4}}
    reported(gke_raw(wrong_count), "gke.gpuPools[0].accelerator.count", "a4-highgpu-8g comes with exactly 8")


# --- the config refusal ---------------------------------------------------------------------------

def test_a_level_on_gke_without_a_labelled_pool_is_refused_naming_the_pools() -> None:
    # The committed pools (g2 on spot, a2) and an A3 Ultra pool that is not from a reservation.
    on_demand = {k: v for k, v in H200_RES.items() if k not in ("provisioning", "reservation")}
    for pools in ((), (on_demand,)):
        raw = {**gke_raw(*pools), "queues": {"enabled": True, "rdmaTopologyLevel": "rack"}}
        reported(raw, "queues.rdmaTopologyLevel", "no GPU pool carries Google's topology labels",
                 "a3-ultragpu-8g and a4-highgpu-8g nodes of a reservation", "provisioning reservation")
    reported({**gke_raw(on_demand), "queues": {"enabled": True, "rdmaTopologyLevel": "rack"}},
             "queues.rdmaTopologyLevel", "h200-res (a3-ultragpu-8g, onDemand)")


def test_the_render_of_a_level_without_a_labelled_pool_exits_2(tmp_path: Path) -> None:
    result = render_cli(tmp_path, "gke", {"queues": RACK, "training": _training(nodes=2)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gpu-cluster:queues.rdmaTopologyLevel" in result.stderr and "l4-spot (g2-standard-8" in result.stderr


# --- the warning path -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def labelled_plan() -> program.Plan:
    return program.run("gke", config=stack_config_with("gke", gke=_gke(H200_RES), queues=RACK, training=TWO_NODES))


def test_the_check_knows_the_labels_but_invents_no_value(labelled_plan: program.Plan, upstream_dir: Path) -> None:
    objects = kubernetes_objects(labelled_plan)
    (topology,) = [o for o in objects if o["kind"] == "Topology"]
    assert tuple(lvl["nodeLabel"] for lvl in topology["spec"]["levels"]) == GKE_LEVELS
    assert {o["spec"].get("topologyName") for o in objects if o["kind"] == "ResourceFlavor"} == {TOPOLOGY_NAME}
    train = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "train")
    assert train["spec"]["template"]["metadata"]["annotations"][REQUIRED_TOPOLOGY] == GKE_SUBBLOCK_LABEL
    report = cluster.check(labelled_plan, labelled_plan.config, upstream_dir)  # Kueue's objects against the CRDs
    assert report.ok, report.problems
    (pool,) = [n for n in report.modelled if n.group == "h200-res"]
    assert pool.unvalued == (GKE_BLOCK_LABEL, GKE_SUBBLOCK_LABEL, GKE_HOST_LABEL)
    assert not any(k.startswith("cloud.google.com/gce-topology") for k in pool.labels), pool.labels
    admitted = [q for q in report.queued if q.startswith("Job training/train ")]
    assert admitted and "admitted whole" in admitted[0], report.queued


def test_a_subblock_job_on_an_a3_ultra_reservation_renders_with_the_warning(tmp_path: Path, upstream_dir: Path) -> None:
    result = render_cli(tmp_path, "gke", {"gke": _gke(H200_RES), "queues": RACK, "training": _training(**TWO_NODES)},
                        upstream=upstream_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    warning = (f"2 nodes in one {GKE_SUBBLOCK_LABEL} domain; Google writes that label on "
               "gke.gpuPools[0] (h200-res, a3-ultragpu-8g, reservation h200-block) but its values are not known "
               "offline")
    assert "warning: gpu-cluster:queues.rdmaTopologyLevel rack: training requires its 2 nodes" in result.stderr
    assert warning in result.stderr and "depends on Google's placement and is not checked offline" in result.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Warnings" in summary and warning in summary


# --- the exit 3 on an unlabelled pool -------------------------------------------------------------

@pytest.mark.would_not_come_up
def test_a_job_only_an_unlabelled_pool_holds_exits_3(tmp_path: Path, upstream_dir: Path) -> None:
    """A one-node A3 Ultra reservation (labelled) beside the g2 pool (unlabelled, four nodes): two
    one-GPU pods fit the g2 pool only, and Kueue leaves its nodes out of the topology flavor."""
    small = {**H200_RES, "autoscaling": {"minNodes": 0, "maxNodes": 1}}
    training = _training(nodes=2, gpusPerNode=1)
    result = render_cli(tmp_path, "gke", {"gke": _gke(small, keep=("l4-spot",)), "queues": RACK, "training": training},
                        upstream=upstream_dir)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Job training/train (LocalQueue training/gpu-cluster → ClusterQueue gpu-cluster" in result.stderr
    assert ("flavor nvidia-h200-141gb: its nodes hold only 1 of 2 pods, whatever "
            f"{GKE_SUBBLOCK_LABEL} Google gives them") in result.stderr, result.stderr
    assert ("flavor nvidia-l4: none of its 4 node(s) carries every level of Topology gpu-cluster-topology (missing: "
            f"{GKE_BLOCK_LABEL}, {GKE_SUBBLOCK_LABEL}, {GKE_HOST_LABEL}), and Kueue leaves such a node out of the "
            f"flavor; the job requires one {GKE_SUBBLOCK_LABEL} domain; Google writes cloud.google.com/gce-topology-* "
            "on A4 and A3 Ultra nodes of a reservation only") in result.stderr, result.stderr
