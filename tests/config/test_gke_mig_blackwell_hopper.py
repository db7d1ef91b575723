"""GKE's own MIG (gke.gpuPools[].migPartitionSize) on A3 Ultra (H200) and A4 (B200): GKE's
"Running multi-instance GPUs" page lists both beside A100 and H100. Each partition size is held to
NVIDIA's profile table of the GPU (config/mig_profiles.py), and a node's nvidia.com/gpu count is
NVIDIA's instances per GPU times its eight GPUs."""

from __future__ import annotations

import pytest

import config
from config.gke import GkeStack, gke_gpus_per_node
from config.mig_profiles import PROFILES_BY_GPU
from tests.config.test_gke_config import assert_problem, gke_raw

H200 = {"name": "h200", "machineType": "a3-ultragpu-8g", "accelerator": {"type": "nvidia-h200-141gb", "count": 8},
        "zones": ["us-central1-b"], "autoscaling": {"minNodes": 0, "maxNodes": 1}}
B200 = {"name": "b200", "machineType": "a4-highgpu-8g", "accelerator": {"type": "nvidia-b200", "count": 8},
        "zones": ["us-central1-b"], "autoscaling": {"minNodes": 0, "maxNodes": 1}}


@pytest.mark.parametrize("base, model, size, per_node", [
    (H200, "H200 141GB", "1g.18gb", 56), (H200, "H200 141GB", "1g.35gb", 32), (H200, "H200 141GB", "3g.71gb", 16),
    (B200, "B200 180GB", "1g.23gb", 56), (B200, "B200 180GB", "2g.45gb", 24), (B200, "B200 180GB", "7g.180gb", 8),
])
def test_h200_and_b200_pools_take_their_gpus_partition_sizes(base, model, size, per_node):
    assert size in PROFILES_BY_GPU[model]
    cfg = config.parse(gke_raw({**base, "migPartitionSize": size}))
    assert isinstance(cfg, GkeStack)
    (pool,) = cfg.gke.gpu_pools
    assert pool.mig_partition_size == size
    # NVIDIA's instances per GPU (1g with two memory slices: 4, 2g: 3, 3g: 2, 7g: 1) x 8 GPUs
    assert gke_gpus_per_node(pool) == per_node


@pytest.mark.parametrize("base, wrong, allowed", [
    (H200, "1g.10gb", ("1g.18gb", "7g.141gb")),  # an H100 size on an H200
    (B200, "3g.71gb", ("1g.23gb", "7g.180gb")),  # an H200 size on a B200
])
def test_a_size_of_another_gpu_is_refused_naming_the_right_ones(base, wrong, allowed):
    assert_problem(gke_raw({**base, "migPartitionSize": wrong}), "gke.gpuPools[0].migPartitionSize", *allowed)


def test_a_gpu_without_mig_is_refused_naming_every_gpu_gke_partitions():
    l4 = {"name": "l4", "machineType": "g2-standard-8", "accelerator": {"type": "nvidia-l4", "count": 1},
          "zones": ["us-central1-a"], "migPartitionSize": "1g.10gb"}
    assert_problem(gke_raw(l4), "gke.gpuPools[0].migPartitionSize", "nvidia-tesla-a100", "nvidia-h100-80gb",
                   "nvidia-h200-141gb", "nvidia-b200", "nvidia-l4 has no MIG")
