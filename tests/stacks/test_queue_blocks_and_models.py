"""Blocks over racks, one flavor per GPU model on lab, and Google's topology on gke, through the plan
and the whole-cluster check (objects validated against the pinned Kueue chart's CRDs):

* lab: hosts[].block beside the rack on the same NodePatch; the Topology block -> rack -> hostname;
  queues.rdmaTopologyLevel: block makes the RDMA jobs require one block: both GPU hosts in one block
  (two racks) come up, in two blocks the check exits 3 naming the job and the level;
* lab: hosts[].gpuModel gives one ResourceFlavor per model on the label the NodePatch writes, the
  teams' quotas per model; the program's two-node jobs are admitted in the model that holds them;
* gke: rdmaTopologyLevel makes the GPU flavors name a Topology of Google's labels and the multi-node
  jobs require the level; the check's nodes of a pool Google does not label carry none of them, so a
  job only such a pool holds exits 3 naming the job and the level (a pool Google labels, and the
  refusal without one: tests/stacks/test_gke_google_topology.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config.queue_flavors import GKE_LEVELS, TOPOLOGY_NAME
from config.queues import REQUIRED_TOPOLOGY
from config.scheduling_contract import BLOCK_LABEL, GKE_SUBBLOCK_LABEL, GPU_MODEL_LABEL, RACK_LABEL
from render import cluster, program
from render.__main__ import kubernetes_objects
from tests.conftest import ED25519, SEED_002_ROCE, host, stack_config_with
from tests.render_cli import render_cli

ROCE = {"rdma": True, "linkGbps": 25, "roce": SEED_002_ROCE}
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def _lab_ha_hosts(**per_gpu_host: list[Any]) -> list[dict[str, Any]]:
    """lab-ha's hosts, each GPU host given the fields `per_gpu_host` lists for it in order."""
    values, _ = program.stack_config("lab-ha")
    hosts = json.loads(values["gpu-cluster:hosts"])
    gpu = [h for h in hosts if h.get("gpus")]
    for key, per in per_gpu_host.items():
        for h, v in zip(gpu, per, strict=True):
            h[key] = v
    return hosts


def _queued_jobs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"
            and o["metadata"].get("labels", {}).get("kueue.x-k8s.io/queue-name")}


def test_blocks_over_racks_and_rdma_jobs_in_one_block(upstream_dir: Path) -> None:
    hosts = _lab_ha_hosts(rack=["r1", "r2"], block=["b1", "b1"])
    plan = program.run("lab-ha", config=stack_config_with(
        "lab-ha", hosts=hosts, network=ROCE, queues={"rdmaTopologyLevel": "block"}))
    objects = kubernetes_objects(plan)
    (topology,) = [o for o in objects if o["kind"] == "Topology"]
    assert topology["metadata"]["name"] == TOPOLOGY_NAME
    assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == [BLOCK_LABEL, RACK_LABEL, "kubernetes.io/hostname"]
    patches = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"]
               for r in plan.of_type("kubernetes:core/v1:NodePatch") if r.name.endswith("-rack")}
    assert patches == {"gpu-1": {BLOCK_LABEL: "b1", RACK_LABEL: "r1"}, "gpu-2": {BLOCK_LABEL: "b1", RACK_LABEL: "r2"}}
    jobs = _queued_jobs(objects)
    assert jobs and all(j["spec"]["template"]["metadata"]["annotations"][REQUIRED_TOPOLOGY] == BLOCK_LABEL
                        for j in jobs.values()), jobs
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    assert any("nccl-acceptance" in line and "admitted whole" in line for line in report.queued), report.queued


@pytest.mark.would_not_come_up
def test_rdma_jobs_requiring_one_block_across_two_blocks_never_come_up(tmp_path: Path, upstream_dir: Path) -> None:
    hosts = _lab_ha_hosts(rack=["r1", "r2"], block=["b1", "b2"])
    values, _ = program.stack_config("lab-ha")
    queues = {**json.loads(values["gpu-cluster:queues"]), "rdmaTopologyLevel": "block"}
    result = render_cli(tmp_path, "lab-ha", {"hosts": hosts, "network": ROCE, "queues": queues}, upstream=upstream_dir)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "nccl-acceptance" in result.stderr and f"no {BLOCK_LABEL} domain" in result.stderr, result.stderr


def _four_gpu_hosts() -> list[dict[str, Any]]:
    """lab-ha's hosts as H100 hosts in rack r1, then two A100 hosts of 2 GPUs each in rack r2."""
    hosts = _lab_ha_hosts(gpuModel=[H100, H100], rack=["r1", "r1"])
    return hosts + [host(f"a100-{i}", f"192.0.2.4{i}", gpus=2, gpuModel=A100, rack="r2", hostKey=ED25519)
                    for i in (1, 2)]


def test_one_flavor_per_gpu_model_and_quotas_per_model(upstream_dir: Path) -> None:
    teams = [{"name": "vision", "namespace": "team-vision", "group": "gpu-vision", "gpus": {H100: 1},
              "cpu": "16", "memory": "64Gi"},
             {"name": "language", "namespace": "team-language", "group": "gpu-language", "gpus": {A100: 2},
              "borrowingLimitGpus": 1, "cpu": "16", "memory": "64Gi"}]
    plan = program.run("lab-ha", config=stack_config_with("lab-ha", hosts=_four_gpu_hosts(), queues={"teams": teams}))
    objects = kubernetes_objects(plan)
    rf = {o["metadata"]["name"]: o["spec"]["nodeLabels"] for o in objects if o["kind"] == "ResourceFlavor"}
    assert rf == {"nvidia-h100-80gb-hbm3": {GPU_MODEL_LABEL: H100}, "nvidia-a100-sxm4-80gb": {GPU_MODEL_LABEL: A100}}
    # Both flavors name the one Topology of the racks, created once.
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Topology"] == [TOPOLOGY_NAME]
    assert {o["spec"]["topologyName"] for o in objects if o["kind"] == "ResourceFlavor"} == {TOPOLOGY_NAME}
    gpu_quota = {o["metadata"]["name"]: {f["name"]: f["resources"][0]["nominalQuota"]
                                         for f in o["spec"]["resourceGroups"][0]["flavors"]}
                 for o in objects if o["kind"] == "ClusterQueue"}
    assert gpu_quota["vision"] == {"nvidia-h100-80gb-hbm3": "1", "nvidia-a100-sxm4-80gb": "0"}
    assert gpu_quota["language"] == {"nvidia-h100-80gb-hbm3": "0", "nvidia-a100-sxm4-80gb": "2"}
    # The program's queue holds what the teams leave of each model: 2 - 1 H100s, 4 - 2 A100s.
    assert gpu_quota["gpu-cluster"] == {"nvidia-h100-80gb-hbm3": "1", "nvidia-a100-sxm4-80gb": "2"}
    patches = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"]
               for r in plan.of_type("kubernetes:core/v1:NodePatch") if r.name.endswith("-rack")}
    assert patches == {"gpu-1": {RACK_LABEL: "r1", GPU_MODEL_LABEL: H100}, "gpu-2": {RACK_LABEL: "r1", GPU_MODEL_LABEL: H100},
                       "a100-1": {RACK_LABEL: "r2", GPU_MODEL_LABEL: A100}, "a100-2": {RACK_LABEL: "r2", GPU_MODEL_LABEL: A100}}
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    # Two pods of one GPU: the H100 flavor comes first and fits (borrowing its second GPU).
    assert any("nccl-acceptance" in line and "on nvidia-h100-80gb-hbm3" in line for line in report.queued), report.queued


@pytest.mark.would_not_come_up
def test_a_two_node_job_over_two_single_host_models_never_comes_up(upstream_dir: Path) -> None:
    """Kueue gives a pod set one flavor: two pods on two hosts of two models fit in neither."""
    plan = program.run("lab-ha", config=stack_config_with("lab-ha", hosts=_lab_ha_hosts(gpuModel=[H100, A100]),
                                                          queues={"teams": []}))
    report = cluster.check(plan, plan.config, upstream_dir)
    assert any("nccl-acceptance" in p and "fits no flavor" in p for p in report.problems), report.problems


@pytest.mark.would_not_come_up
def test_gke_requires_googles_level_and_nodes_without_the_labels_never_admit(tmp_path: Path, upstream_dir: Path) -> None:
    queues = {"enabled": True, "rdmaTopologyLevel": "rack"}
    # One A3 Ultra reservation node (Google labels it; the level is refused without such a pool) cannot
    # hold the two pods; the committed pools' nodes carry no label.
    gke = _committed("gke", "gke")
    gke["gpuPools"].append({"name": "h200-res", "machineType": "a3-ultragpu-8g", "zones": ["us-central1-a"],
                            "accelerator": {"type": "nvidia-h200-141gb", "count": 8}, "provisioning": "reservation",
                            "reservation": "h200-block", "autoscaling": {"minNodes": 0, "maxNodes": 1}})
    plan = program.run("gke", config=stack_config_with("gke", gke=gke, queues=queues, training={"nodes": 2}))
    objects = kubernetes_objects(plan)
    (topology,) = [o for o in objects if o["kind"] == "Topology"]
    assert tuple(lvl["nodeLabel"] for lvl in topology["spec"]["levels"]) == GKE_LEVELS
    assert {o["spec"].get("topologyName") for o in objects if o["kind"] == "ResourceFlavor"} == {TOPOLOGY_NAME}
    training = _queued_jobs(objects)["train"]
    assert training["spec"]["template"]["metadata"]["annotations"][REQUIRED_TOPOLOGY] == GKE_SUBBLOCK_LABEL
    result = render_cli(tmp_path, "gke", {"gke": gke, "queues": queues,
                                          "training": {**_committed("gke", "training"), "nodes": 2}},
                        upstream=upstream_dir)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Job training/train" in result.stderr and GKE_SUBBLOCK_LABEL in result.stderr, result.stderr


def _committed(stack: str, key: str) -> Any:
    values, _ = program.stack_config(stack)
    return json.loads(values[f"gpu-cluster:{key}"])
