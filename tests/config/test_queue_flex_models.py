"""A team's per-model quota (`gpus: {<accelerator type>: n}`) on gke flex-start pools: a flexStart
pool's flavor is a flavor of its accelerator type (config/gke_provisioning.py), so a mapping names
it as it names an on-demand pool's; with two flavors of one type (on demand and flex-start) the
count applies in each, capped by each, and is refused only beyond every one of them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

import config
from components.queues.objects import team_cluster_queue
from config.queues import flavors
from config.scheduling_contract import GPU_RESOURCE
from tests.config.refusals import accepted, reported
from tests.config.test_gke_config import A100, gke_raw, pool
from tests.config.test_queues_config import queues, team

DOCS = Path(__file__).resolve().parents[2] / "docs" / "getting-started" / "gke.md"
# 3 nodes x 1 zone x 1 A100; the on-demand A100 pool: 2 nodes x 2 zones x 1 A100.
FLEX = pool(A100, name="a100-flex", zones=["us-central1-a"], autoscaling={"minNodes": 0, "maxNodes": 3},
            provisioning="flexStart")


def quotas(cfg: config.StackConfig, i: int = 0) -> dict[str, str]:
    """The team's ClusterQueue: flavor -> nominal GPUs."""
    cq = team_cluster_queue(cfg.queues, cfg.queues.teams[i], GPU_RESOURCE, flavors(cfg))
    return {f["name"]: r["nominalQuota"] for f in cq["spec"]["resourceGroups"][0]["flavors"]
            for r in f["resources"] if r["name"] == GPU_RESOURCE}


def gke(*pools: dict[str, Any], **gpus: int) -> dict[str, Any]:
    return {**gke_raw(*pools), "queues": queues(team(gpus={k.replace("_", "-"): n for k, n in gpus.items()}))}


def test_a_mapping_names_a_flex_start_pool_by_its_accelerator() -> None:
    cfg = accepted(gke(FLEX, nvidia_tesla_a100=2))
    assert quotas(cfg) == {"a100-flex-flex-start": "2"}


def test_beside_an_on_demand_pool_of_the_same_type_the_count_applies_in_both() -> None:
    assert quotas(accepted(gke(A100, FLEX, nvidia_tesla_a100=2))) == {"nvidia-tesla-a100": "2",
                                                                      "a100-flex-flex-start": "2"}
    # 4: all of the on-demand flavor, capped at the flex-start flavor's 3
    assert quotas(accepted(gke(A100, FLEX, nvidia_tesla_a100=4))) == {"nvidia-tesla-a100": "4",
                                                                      "a100-flex-flex-start": "3"}


def test_a_count_beyond_every_flavor_of_its_model_is_refused() -> None:
    reported(gke(A100, FLEX, nvidia_tesla_a100=5), "queues.teams[0].gpus.nvidia-tesla-a100", "5 GPUs",
             "nvidia-tesla-a100 has 4", "a100-flex-flex-start has 3")
    reported(gke(FLEX, nvidia_tesla_a100=4), "queues.teams[0].gpus.nvidia-tesla-a100", "a100-flex-flex-start has 3")


def test_the_teams_together_are_held_to_each_flavor_as_capped() -> None:
    two = {**gke_raw(A100, FLEX), "queues": queues(team("a", gpus={"nvidia-tesla-a100": 2}),
                                                   team("b", gpus={"nvidia-tesla-a100": 2}))}
    reported(two, "queues.teams", "add up to 4", "a100-flex-flex-start has 3")


def _docs_example() -> dict[str, Any]:
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S) if "flexStart" in b)
    return {k.removeprefix("gpu-cluster:"): v for k, v in yaml.safe_load(block).items()}


def test_the_getting_started_example_is_accepted_and_a_mapping_on_it_too() -> None:
    example = _docs_example()
    raw = gke_raw(*example["gke"]["gpuPools"])
    raw["queues"] = example["queues"]
    accepted(raw)
    raw["queues"] = queues(team(gpus={"nvidia-h100-mega-80gb": 8, "nvidia-tesla-a100": 16}))
    assert quotas(accepted(raw)) == {"nvidia-tesla-a100": "16", "h100-flex-flex-start": "8"}
