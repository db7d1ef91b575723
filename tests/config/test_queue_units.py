"""Kueue's quotas in the units of the GPU resource the ClusterQueues cover (config/queue_units.py):
MIG slices (single strategy: nvidia.com/gpu counts each slice; mixed: nvidia.com/mig-<profile>),
time-sliced replicas, gke's own sharing per pool; and a combination whose units are not known is
refused naming the key, never sized in whole GPUs.

The slice counts are NVIDIA's ("Supported MIG Profiles", the "Number of Instances" of each GPU's
table): 1g.10gb is 7 per H100 80GB but 4 per A100 40GB, 1g.20gb 4 per H100 80GB."""

from __future__ import annotations

from typing import Any

import pytest

from config.mig_profiles import PROFILES_BY_GPU, SLICES_PER_GPU
from config.queues import flavors
from tests.config.refusals import accepted, reported
from tests.config.test_gke_config import A100, L4, gke_raw
from tests.config.test_queues_config import dev_raw, queues, team
from tests.conftest import host, lab_raw


def mig(profile: str = "all-1g.10gb", strategy: str = "single") -> dict[str, Any]:
    return {"stack": "operator", "sharing": {"mode": "mig", "migStrategy": strategy, "migProfile": profile}}


def two_gpus(model: str | None) -> list[dict[str, Any]]:
    """The lab of the reviewer's case: one host with 2 GPUs."""
    extra = {"gpuModel": model} if model else {}
    return [host("cp-1", "192.0.2.10", "control-plane"), host("gpu-1", "192.0.2.11", gpus=2, **extra)]


def operator_gke(gpu: dict[str, Any], *pools: dict[str, Any]) -> dict[str, Any]:
    """gke with gpu.stack operator: the pools' drivers are the operator's (GKE's own are off)."""
    return gke_raw(*({**p, "driver": "none"} for p in pools or (L4, A100)), gpu=gpu)


def sizes(cfg: Any) -> dict[str, int | None]:
    return {f.name: f.gpus for f in flavors(cfg)}


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_lab_mig_counts_a_flavor_and_a_quota_in_slices(strategy: str) -> None:
    """2 H100 80GB cut all-1g.10gb are 14 slices: a team of 4 fits, 15 does not (main: "has 2")."""
    raw = lab_raw(gpu=mig(strategy=strategy), hosts=two_gpus("NVIDIA-H100-80GB-HBM3"))
    assert sizes(accepted({**raw, "queues": queues(team(gpus=14))})) == {"nvidia-h100-80gb-hbm3": 14}
    reported({**raw, "queues": queues(team(gpus=15))}, "queues.teams[0].gpus", "15 MIG 1g.10gb slices",
             "has 14")


def test_the_gpu_model_decides_how_many_slices_a_profile_gives() -> None:
    # 1g.10gb on an A100 40GB takes two of its eight memory slices: 4 per GPU, not 7.
    raw = lab_raw(gpu=mig(), hosts=two_gpus("NVIDIA-A100-SXM4-40GB"), queues=queues(team(gpus=8)))
    assert sizes(accepted(raw)) == {"nvidia-a100-sxm4-40gb": 8}
    # 3g.40gb: 2 per GPU on every GPU that has it, so no model is needed.
    assert sizes(accepted(lab_raw(gpu=mig("all-3g.40gb"), hosts=two_gpus(None), queues=queues(team(gpus=4))))) \
        == {"gpu": 4}


def test_a_profile_whose_count_the_config_cannot_tell_is_refused() -> None:
    reported(lab_raw(gpu=mig(), hosts=two_gpus(None), queues=queues(team(gpus=1))), "gpu.sharing.migProfile",
             "4 per A100 40GB", "7 per H100 80GB", "hosts[].gpuModel")


def test_mig_the_config_cannot_size_is_refused_not_counted_in_whole_gpus() -> None:
    by_hand = {"stack": "device-plugin", "sharing": {"mode": "mig"}}
    reported(lab_raw(gpu=by_hand, hosts=two_gpus(None), queues=queues(team(gpus=1))), "gpu.sharing.mode",
             "partitioned by hand")
    reported(lab_raw(gpu=mig("all-balanced"), hosts=two_gpus("NVIDIA-H100-80GB-HBM3"), queues=queues(team())),
             "gpu.sharing.migProfile", "all-balanced")
    # without queues nothing is sized: the same GPUs are accepted
    accepted(lab_raw(gpu=by_hand, hosts=two_gpus(None)))


def test_dev_mig_is_sized_only_where_the_gpus_are_counted() -> None:
    counted = {"gpuNodeGpus": {"gpu-a": 1, "gpu-b": 1}}
    assert sizes(accepted(dev_raw(gpu=mig("all-1g.5gb"), queues=queues(team(gpus=14)), **counted))) == {"gpu": 14}
    reported(dev_raw(gpu=mig(), queues=queues(team(gpus=1)), **counted), "gpu.sharing.migProfile", "7 per H100 80GB")
    assert sizes(accepted(dev_raw(gpu=mig(), queues=queues(team(gpus=1))))) == {"gpu": None}


def test_gke_time_slicing_counts_each_gpu_as_its_replicas() -> None:
    """gke with the operator's time-slicing: L4 4 nodes x 1 GPU, A100 2 nodes x 2 zones x 1 GPU, x4."""
    gpu = {"stack": "operator", "sharing": {"mode": "time-slicing", "replicas": 4}}
    assert sizes(accepted({**operator_gke(gpu), "queues": queues(team(gpus=16))})) == {
        "nvidia-l4": 16, "nvidia-tesla-a100": 16}
    reported({**operator_gke(gpu), "queues": queues(team(gpus=17))}, "queues.teams[0].gpus", "has 16")


@pytest.mark.parametrize("strategy,l4", [("single", 4), ("mixed", 0)])
def test_gke_operator_mig_cuts_the_mig_pools_only(strategy: str, l4: int) -> None:
    """A100 40GB all-1g.5gb: 7 per GPU; the L4 has no MIG: whole GPUs under single, and none of the
    slice type nvidia.com/mig-1g.5gb under mixed."""
    raw = {**operator_gke(mig("all-1g.5gb", strategy)), "queues": queues(team(gpus={"nvidia-tesla-a100": 28}))}
    assert sizes(accepted(raw)) == {"nvidia-l4": l4, "nvidia-tesla-a100": 28}


def test_gke_partition_size_counts_the_instances_of_that_size() -> None:
    """GKE's own MIG: 1g.20gb is 4 per H100 80GB (main counted 7 // 1 = 7)."""
    h100 = {"name": "h100", "machineType": "a3-highgpu-1g", "accelerator": {"type": "nvidia-h100-80gb", "count": 1},
            "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 2}, "migPartitionSize": "1g.20gb"}
    assert sizes(accepted({**gke_raw(h100), "queues": queues(team(gpus=8))})) == {"nvidia-h100-80gb": 8}
    reported({**gke_raw(h100), "queues": queues(team(gpus=9))}, "queues.teams[0].gpus", "has 8")


def test_the_slice_table_covers_every_profile_of_every_gpu() -> None:
    assert {m: set(s) for m, s in SLICES_PER_GPU.items()} == {m: set(p) for m, p in PROFILES_BY_GPU.items()}
    # one instance of the whole-GPU profile, and never more 1g instances than compute slices
    for model, slices in SLICES_PER_GPU.items():
        whole = max(slices, key=lambda p: int(p.split("g")[0]))
        assert slices[whole] == 1, model
        assert all(n * int(p.split("g")[0]) <= int(whole.split("g")[0]) for p, n in slices.items()), model
