"""The whole-cluster check counts MIG slices where the lab config sizes them: under the operator's
MIG manager with hosts[].gpuModel, each GPU offers the profile's instances (config/queue_units.py,
the same count Kueue's quotas use), as nvidia.com/mig-<profile> (mixed) or nvidia.com/gpu (single).
Before, every MIG node offered an unbounded number, so the check could not refuse a demand beyond
the slices, and the e2e tier could not give a KWOK node its MIG capacity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from render import cluster, program
from tests.conftest import stack_config_with

H100 = "NVIDIA-H100-80GB-HBM3"  # 1g.10gb: 7 per H100 80GB (config/mig_profiles.py)


def _modelled(upstream: Path, strategy: str) -> dict[str, dict[str, float]]:
    values, _ = program.stack_config("lab-ha")
    hosts: list[dict[str, Any]] = json.loads(values["gpu-cluster:hosts"])
    for h in hosts:
        if h.get("gpus"):
            h["gpuModel"] = H100
    gpu = {"stack": "operator", "sharing": {"mode": "mig", "migStrategy": strategy, "migProfile": "all-1g.10gb"}}
    plan = program.run("lab-ha", config=stack_config_with("lab-ha", hosts=hosts, gpu=gpu))
    assert plan.config is not None
    report = cluster.check(plan, plan.config, upstream)
    return {n.name: n.extended for n in report.modelled if n.is_gpu}


def test_mixed_strategy_offers_the_profiles_instances_per_gpu(upstream_dir: Path) -> None:
    nodes = _modelled(upstream_dir, "mixed")
    assert nodes and all(extended.get("nvidia.com/mig-1g.10gb") == 7 for extended in nodes.values()), nodes


def test_single_strategy_offers_them_as_gpus(upstream_dir: Path) -> None:
    nodes = _modelled(upstream_dir, "single")
    assert nodes and all(extended.get("nvidia.com/gpu") == 7 for extended in nodes.values()), nodes
