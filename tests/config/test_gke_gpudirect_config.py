"""gke.gpuPools[].gpuDirect: auto (the machine family's GPUDirect network) or off. What the config
layer refuses before any resource is registered, each naming its key (config/gke_gpudirect.py), and
the acceptance threshold following the machine's documented GPU network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import config
from config.gcp.gpudirect import GPUDIRECT, MACHINE_GPUDIRECT
from config.gcp.machines import GPU_MACHINES
from config.gke_gpudirect import job_gpudirect, jobs_gpudirect, pool_gpudirect
from stacks.addons import acceptance_args
from tests.config.test_gke_config import L4, assert_problem, gke_raw, pool

MEGA = {"name": "h100-mega", "machineType": "a3-megagpu-8g", "accelerator": {"type": "nvidia-h100-mega-80gb", "count": 8},
        "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 2}}
ULTRA = {"name": "h200", "machineType": "a3-ultragpu-8g", "accelerator": {"type": "nvidia-h200-141gb", "count": 8},
         "zones": ["us-central1-b"], "autoscaling": {"minNodes": 0, "maxNodes": 2}}
HIGH = {"name": "h100", "machineType": "a3-highgpu-8g", "accelerator": {"type": "nvidia-h100-80gb", "count": 8},
        "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 2}}
IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"


def jobs(raw: dict[str, Any], nodes: int = 2, **network: Any) -> dict[str, Any]:
    return {**raw, "training": {"enabled": True, "image": IMAGE, "nodes": nodes, "gpusPerNode": 8,
                                "cpuRequest": "8", "cpuLimit": "16", "memoryRequest": "64Gi", "memoryLimit": "96Gi"},
            "acceptance": {"nccl": True}, **({"network": network} if network else {})}


def test_the_machine_table_and_the_gpudirect_table_agree_on_the_nics():
    for name, kind in MACHINE_GPUDIRECT.items():
        assert GPU_MACHINES[name].gpu_nics == GPUDIRECT[kind].gpu_nics, name
    assert set(MACHINE_GPUDIRECT) == {"a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g"}


def test_gpudirect_is_on_by_default_for_the_families_and_off_elsewhere():
    cfg = config.parse(jobs(gke_raw(L4, MEGA)))
    l4, mega = cfg.gke.gpu_pools
    assert pool_gpudirect(l4) is None and pool_gpudirect(mega) is GPUDIRECT[MACHINE_GPUDIRECT["a3-megagpu-8g"]]
    off = config.parse(jobs(gke_raw(pool(MEGA, gpuDirect="off")), linkGbps=200))
    assert job_gpudirect(off.gke.gpu_pools) is None


def test_the_acceptance_follows_the_machines_documented_gpu_network():
    # Google: A3 Mega 8 GPU NICs x 200 Gbps, A3 Ultra 8 CX-7 x 400 Gbps (gpu-network-bandwidth page).
    mega = config.parse(jobs(gke_raw(MEGA)))
    assert acceptance_args(mega)[:2] == ("--link-gbps", "1600")
    ultra = config.parse(jobs(gke_raw(ULTRA)))
    assert acceptance_args(ultra)[:2] == ("--link-gbps", "3200")
    declared = config.parse(jobs(gke_raw(MEGA), linkGbps=1200))
    assert acceptance_args(declared)[:2] == ("--link-gbps", "1200")


def test_a_declared_rate_above_the_machines_network_is_refused():
    assert_problem(jobs(gke_raw(MEGA), linkGbps=3200), "network.linkGbps", "1600", "8 x 200")


def test_a3_high_gets_tcpx_and_the_acceptance_follows_its_four_nics():
    """Was refused ("not built"): A3 High's multi-node jobs attach to TCPX's four GPU networks, and the
    acceptance expects Google's 4 x 200 Gbps (gpu-network-bandwidth page)."""
    cfg = config.parse(jobs(gke_raw(HIGH)))
    job = jobs_gpudirect(cfg)
    assert job is not None and job.gpudirect is GPUDIRECT[MACHINE_GPUDIRECT["a3-highgpu-8g"]]
    assert job.gpudirect.gpu_nics == 4 and job.accelerators == ("nvidia-h100-80gb",)
    assert acceptance_args(cfg)[:2] == ("--link-gbps", "800")
    assert_problem(jobs(gke_raw(HIGH), linkGbps=1000), "network.linkGbps", "4 x 200 = 800")
    assert job_gpudirect(config.parse(gke_raw(pool(HIGH, gpuDirect="off"))).gke.gpu_pools) is None


def test_gpudirect_needs_dataplane_v2():
    assert_problem(gke_raw(MEGA, dataplane="legacy"), "gke.dataplane", "Dataplane V2")


def test_an_rdma_pool_takes_one_zone_and_rdma_pools_share_it():
    assert_problem(gke_raw(pool(ULTRA, zones=["us-central1-a", "us-central1-b"])), "gke.gpuPools[0].zones",
                   "one zone", "vpc-roce")
    a4 = {"name": "b200", "machineType": "a4-highgpu-8g", "accelerator": {"type": "nvidia-b200", "count": 8},
          "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 1}}
    assert_problem(gke_raw(ULTRA, a4), "gke.gpuPools[1].zones", "one RoCE VPC", "us-central1-b")  # the first RDMA pool's zone


def test_two_families_under_one_multi_node_job_are_refused():
    assert_problem(jobs(gke_raw(MEGA, ULTRA)), "gke.gpuPools", "different families", "gpuDirect")
    config.parse(gke_raw(MEGA, ULTRA))  # without a multi-node job each pool keeps its own network


def test_a_bad_gpudirect_value_names_the_key():
    assert_problem(gke_raw(pool(MEGA, gpuDirect="on")), "gke.gpuPools[0].gpuDirect", "auto", "off")


def test_pods_that_take_part_of_the_machine_get_no_gpudirect_and_need_the_declared_rate():
    partial = jobs(gke_raw(L4, MEGA))
    partial["training"]["gpusPerNode"] = 1
    assert_problem(partial, "network.linkGbps", "declared link rate")
    cfg = config.parse({**partial, "network": {"linkGbps": 100}})
    assert jobs_gpudirect(cfg) is None and acceptance_args(cfg)[:2] == ("--link-gbps", "100")
    assert jobs_gpudirect(config.parse(jobs(gke_raw(L4, MEGA)))) is not None


def test_the_gke_pages_a3_ultra_example_is_accepted_and_follows_the_machine():
    page = (Path(__file__).resolve().parents[2] / "docs" / "getting-started" / "gke.md").read_text()
    section = page[page.index("## GPUDirect networking per machine family"):]
    block = section[section.index("```yaml\n") + 8:]
    example = yaml.safe_load(block[:block.index("```")])
    raw = gke_raw()
    raw["gke"] = {**raw["gke"], **example["gpu-cluster:gke"]}
    raw.update(training={**example["gpu-cluster:training"], "cpuRequest": "8", "cpuLimit": "16",
                         "memoryRequest": "64Gi", "memoryLimit": "96Gi"},
               acceptance=example["gpu-cluster:acceptance"])
    cfg = config.parse(raw)
    assert jobs_gpudirect(cfg) is not None and acceptance_args(cfg)[:2] == ("--link-gbps", "3200")
