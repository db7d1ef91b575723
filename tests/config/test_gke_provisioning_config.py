"""gke.gpuPools[].provisioning: onDemand (the default), flexStart (GKE queued provisioning through
Kueue) or a named reservation. Each refusal names its key and says what is allowed, exit 2 before
anything is registered (config/gke_provisioning.py has the rules and where they come from)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import config
from config.gke_pools import reservation_value
from config.gke_provisioning import GkeProvisioning
from config.queues import flavors
from tests.config.test_gke_config import A100, L4, assert_problem, gke_raw, pool
from tests.render_cli import render_cli

FLEX = pool(A100, name="a100-flex", zones=["us-central1-a"], autoscaling={"minNodes": 0, "maxNodes": 3},
            provisioning="flexStart")
RESERVED = pool(A100, name="a100-res", provisioning="reservation", reservation="a100-reserved")
QUEUES = {"enabled": True}


def raw(*pools: dict[str, Any], queues: dict[str, Any] | None = None) -> dict[str, Any]:
    out = gke_raw(*pools)
    if queues is not None:
        out["queues"] = queues
    return out


def test_every_pool_is_on_demand_unless_it_says_otherwise():
    cfg = config.parse(raw(L4, A100))
    assert {p.provisioning for p in cfg.gke.gpu_pools} == {GkeProvisioning.ON_DEMAND}
    assert cfg.reservation_warnings() == []


def test_a_flex_start_pool_with_queues_and_a_reservation_pool_are_accepted():
    cfg = config.parse(raw(L4, FLEX, RESERVED, queues=QUEUES))
    assert [p.provisioning.value for p in cfg.gke.gpu_pools] == ["onDemand", "flexStart", "reservation"]
    assert reservation_value(cfg.gke.gpu_pools[2]) == "a100-reserved"


def test_a_shared_reservation_is_named_by_its_path_in_its_project():
    cfg = config.parse(raw(pool(RESERVED, reservationProject="capacity-host-proj")))
    assert reservation_value(cfg.gke.gpu_pools[0]) == "projects/capacity-host-proj/reservations/a100-reserved"


@pytest.mark.parametrize("bad, key, words", [
    (pool(RESERVED, reservation=None), "gke.gpuPools[0].reservation", ("required", "provisioning reservation")),
    (pool(A100, reservation="a100-reserved"), "gke.gpuPools[0].reservation", ("reservation only", "onDemand")),
    (pool(A100, reservationProject="capacity-host-proj"), "gke.gpuPools[0].reservationProject", ("reservation only",)),
    (pool(RESERVED, reservation="A100_Reserved"), "gke.gpuPools[0].reservation", ("not a reservation name",)),
    (pool(RESERVED, reservationProject="x"), "gke.gpuPools[0].reservationProject", ("not a project id",)),
    (pool(A100, provisioning="queued"), "gke.gpuPools[0].provisioning", ("onDemand", "flexStart", "reservation")),
])
def test_reservation_keys_are_refused_naming_the_key(bad, key, words):
    assert_problem(raw(bad, queues=QUEUES), key, *words)


def test_flex_start_consumes_no_reservation():
    assert_problem(raw(pool(FLEX, reservation="a100-reserved"), queues=QUEUES), "gke.gpuPools[0].reservation",
                   "reservation only", "flexStart", "reservation affinity NONE")


def test_flex_start_needs_kueue():
    assert_problem(raw(FLEX), "gke.gpuPools[0].provisioning", "queues.enabled", "ProvisioningRequest", "Kueue")


def test_flex_start_scales_from_zero():
    assert_problem(raw(pool(FLEX, autoscaling={"minNodes": 1, "maxNodes": 3}), queues=QUEUES),
                   "gke.gpuPools[0].autoscaling.minNodes", "must be 0", "flexStart")


def test_flex_start_is_not_spot():
    assert_problem(raw(pool(FLEX, spot=True), queues=QUEUES), "gke.gpuPools[0].spot", "flexStart", "spot")


def test_a_flex_start_pool_is_its_own_flavor_and_leaves_the_accelerators_flavor():
    """An on-demand A100 pool and a flex-start A100 pool: two flavors, each with its own pool's GPUs."""
    cfg = config.parse(raw(A100, pool(FLEX, autoscaling={"minNodes": 0, "maxNodes": 3}), queues=QUEUES))
    by_name = {f.name: f for f in flavors(cfg)}
    assert set(by_name) == {"nvidia-tesla-a100", "a100-flex-flex-start"}
    assert by_name["nvidia-tesla-a100"].gpus == 4  # 2 zones x 2 nodes x 1 GPU: the on-demand pool only
    flex = by_name["a100-flex-flex-start"]
    assert flex.gpus == 3 and flex.node_labels == {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                                                   "gpu-cluster/pool": "a100-flex", "cloud.google.com/gke-queued": "true"}


def test_a_team_quota_beyond_the_flex_start_pool_is_refused():
    teams = [{"name": "vision", "namespace": "team-vision", "group": "vision", "gpus": 4, "cpu": "8", "memory": "32Gi"}]
    assert_problem(raw(pool(FLEX, name="a100-flex"), queues={"enabled": True, "teams": teams}),
                   "queues.teams[0].gpus", "a100-flex-flex-start", "3")


def test_a_refused_pool_exits_2_before_anything_is_registered(tmp_path: Path):
    gke = gke_raw(L4, FLEX)["gke"]
    result = render_cli(tmp_path, "gke", {"gke": gke})
    assert result.returncode == 2, result.stderr
    assert "gpu-cluster:gke.gpuPools[1].provisioning" in result.stderr and "queues.enabled" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

