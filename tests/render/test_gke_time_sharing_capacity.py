"""A GKE pool whose GPUs are time-shared (gke.gpuPools[].sharing): GKE's device plugin advertises
maxSharedClientsPerGpu nvidia.com/gpu per physical GPU (Google Container API, AcceleratorConfig
maxTimeSharedClientsPerGpu: "the number of time-shared GPU resources to expose for each physical
GPU"), so the check's nodes of that pool hold that many GPU pods; the old model counted one per GPU."""

from __future__ import annotations

import json
from pathlib import Path

from render import cluster, program
from tests.conftest import stack_config_with


def _shared_l4_pool() -> tuple[dict[str, str], list[str]]:
    values, _ = program.stack_config("gke")
    gke = json.loads(values["gpu-cluster:gke"])
    for pool in gke["gpuPools"]:
        if pool["name"] == "l4-spot":
            pool["sharing"] = {"strategy": "time-sharing", "maxClients": 4}
    return stack_config_with("gke", gke=gke)


def test_a_time_shared_pools_nodes_advertise_each_gpu_as_its_clients(upstream_dir: Path) -> None:
    plan = program.run("gke", config=_shared_l4_pool())
    report = cluster.check(plan, plan.config, upstream_dir)
    gpus = {n.name: n.extended.get("nvidia.com/gpu") for n in report.scheduled if n.is_gpu}
    assert gpus == {"a100-1": 1.0, "a100-2": 1.0, "l4-spot-1": 4.0, "l4-spot-2": 4.0, "l4-spot-3": 4.0,
                    "l4-spot-4": 4.0}
