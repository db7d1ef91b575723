"""A team's CPU and memory quota held to the GPU flavors' nodes where their size is known (gke:
each pool's machine type, config/queue_resources.py), refused naming the key; no claim where the
size is not in the config (lab hosts, dev nodes, a machine type of unknown shape)."""

from __future__ import annotations

from tests.config.refusals import accepted, reported
from tests.config.test_gke_config import A100, L4, gke_raw
from tests.config.test_queues_config import dev_raw, queues, team
from tests.conftest import lab_raw


def test_a_team_cpu_beyond_every_gpu_flavors_nodes_is_refused_on_gke() -> None:
    """The largest flavor: A100, a2-highgpu-1g (12 vCPUs, 85 GB; Compute Engine's table), 2 nodes x 2
    zones; GKE keeps 0.1 of 12 cores for itself: 4 x 11.9 = 47.6 cores to pods."""
    accepted({**gke_raw(L4, A100), "queues": queues(team(cpu="47"))})
    reported({**gke_raw(L4, A100), "queues": queues(team(cpu="48"))}, "queues.teams[0].cpu", "48 CPUs",
             "nvidia-tesla-a100", "47.6")


def test_a_team_memory_beyond_every_gpu_flavors_nodes_is_refused_on_gke() -> None:
    """85 GiB less GKE's reservation (25% of 4, 20% of 4, 10% of 8, 6% of the other 69) and 100 MiB
    eviction threshold: 78.16 GiB a node, 312.6 GiB for the four."""
    accepted({**gke_raw(L4, A100), "queues": queues(team(memory="312Gi"))})
    reported({**gke_raw(L4, A100), "queues": queues(team(memory="313Gi"))}, "queues.teams[0].memory", "313Gi",
             "312.6Gi")


def test_no_claim_where_the_nodes_size_is_unknown() -> None:
    huge = queues(team(cpu="100000", memory="1000Ti"))
    accepted(lab_raw(queues=huge))
    accepted(dev_raw(queues=huge))
