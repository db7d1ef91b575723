"""gke config: the accelerator table, pool checks and gcp:project / gcp:region, each rejection
naming its key before anything is registered."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pulumi.runtime.config import set_all_config

import config
from config import ConfigError, GkeStack, Platform
from config.gcp import accelerators
from config.gke import GkeDriver

GCP = {"gcp:project": "my-gpu-project", "gcp:region": "us-central1"}

L4 = {
    "name": "l4", "machineType": "g2-standard-8", "accelerator": {"type": "nvidia-l4", "count": 1},
    "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 4}, "spot": True,
}
A100 = {
    "name": "a100", "machineType": "a2-highgpu-1g", "accelerator": {"type": "nvidia-tesla-a100", "count": 1},
    "zones": ["us-central1-a", "us-central1-b"], "autoscaling": {"minNodes": 1, "maxNodes": 2},
}


def gke_raw(*pools: dict[str, Any], gpu: dict[str, Any] | None = None, **gke: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "platform": "gke",
        "gke": {"zone": "us-central1-a", "gpuPools": [copy.deepcopy(p) for p in (pools or (L4, A100))], **gke},
        **GCP,
    }
    if gpu is not None:
        raw["gpu"] = gpu
    return raw


def pool(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(base), **changes}


def problems(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        config.parse(raw)
    assert "gpu-cluster:" in str(err.value)
    return dict(err.value.problems)


def assert_problem(raw: dict[str, Any], key: str, *words: str) -> None:
    found = problems(raw)
    assert key in found, found
    for word in words:
        assert word in found[key], (word, found[key])


# ---------------------------------------------------------------------------------------------
# valid configs


def test_valid_gke_config():
    cfg = config.parse(gke_raw())
    assert cfg.platform is Platform.GKE
    assert [p.name for p in cfg.gke.gpu_pools] == ["l4", "a100"]
    assert cfg.gke.gpu_pools[0].driver is GkeDriver.GKE_DEFAULT
    # The gate counts the nodes that exist after `up`: min per zone x zones.
    assert cfg.gpu_node_count == 2


def test_gke_defaults_are_secure():
    cfg = config.parse(gke_raw())
    assert cfg.gke.deletion_protection is True
    assert cfg.gke.release_channel.value == "REGULAR"
    assert cfg.gke.filestore_location == "us-central1-a"


@pytest.mark.parametrize("machine, acc, count", [
    *[(m, a, n) for m, (a, n) in accelerators.FIXED.items()],
    ("n1-standard-8", "nvidia-tesla-t4", 4),
    ("n1-highmem-16", "nvidia-tesla-v100", 8),
    ("n1-standard-4", "nvidia-tesla-p4", 2),
    ("n1-standard-4", "nvidia-tesla-p100", 1),
])
def test_accelerator_table_accepts(machine, acc, count):
    assert accelerators.check(machine, acc, count) == []


def test_a2_a3_g2_counts():
    assert accelerators.FIXED["a2-highgpu-2g"] == ("nvidia-tesla-a100", 2)
    assert accelerators.FIXED["a2-ultragpu-8g"] == ("nvidia-a100-80gb", 8)
    assert accelerators.FIXED["a3-highgpu-8g"] == ("nvidia-h100-80gb", 8)
    assert accelerators.FIXED["g2-standard-48"] == ("nvidia-l4", 4)


@pytest.mark.parametrize("machine, acc, count", [
    ("a3-highgpu-1g", "nvidia-h100-80gb", 1),
    ("a3-highgpu-2g", "nvidia-h100-80gb", 2),
    ("a3-highgpu-4g", "nvidia-h100-80gb", 4),
    ("a3-megagpu-8g", "nvidia-h100-mega-80gb", 8),
])
def test_a3_machine_types(machine, acc, count):
    assert accelerators.FIXED[machine] == (acc, count)
    assert accelerators.check(machine, acc, count) == []
    assert config.parse(gke_raw(pool(L4, machineType=machine, accelerator={"type": acc, "count": count})))


def test_h100_mega_is_not_an_h100():
    assert accelerators.ACCELERATORS["nvidia-h100-mega-80gb"].product == "H100 Mega 80GB"
    assert_problem(gke_raw(pool(L4, machineType="a3-megagpu-8g", accelerator={"type": "nvidia-h100-80gb", "count": 8})),
                   "gke.gpuPools[0].accelerator.type", "a3-megagpu-8g", "nvidia-h100-mega-80gb")
    assert_problem(gke_raw(pool(L4, machineType="a3-highgpu-4g", accelerator={"type": "nvidia-h100-80gb", "count": 8})),
                   "gke.gpuPools[0].accelerator.count", "exactly 4")


@pytest.mark.parametrize("machine, acc, size", [
    ("a2-highgpu-1g", "nvidia-tesla-a100", "4g.20gb"),
    ("a3-highgpu-1g", "nvidia-h100-80gb", "4g.40gb"),
])
def test_four_slice_mig_partitions(machine, acc, size):
    assert size in accelerators.ACCELERATORS[acc].mig_partitions
    raw = gke_raw(pool(L4, machineType=machine, accelerator={"type": acc, "count": 1}, migPartitionSize=size))
    assert config.parse(raw).gke.gpu_pools[0].mig_partition_size == size


# ---------------------------------------------------------------------------------------------
# rejections


def test_a2_highgpu_2g_with_one_gpu():
    raw = gke_raw(pool(A100, machineType="a2-highgpu-2g"))
    assert_problem(raw, "gke.gpuPools[0].accelerator.count", "a2-highgpu-2g", "exactly 2", "got 1")


def test_t4_on_g2():
    raw = gke_raw(pool(L4, accelerator={"type": "nvidia-tesla-t4", "count": 1}))
    assert_problem(raw, "gke.gpuPools[0].accelerator.type", "g2-standard-8", "nvidia-l4", "nvidia-tesla-t4")


def test_mig_on_t4():
    raw = gke_raw(pool(L4, machineType="n1-standard-8", accelerator={"type": "nvidia-tesla-t4", "count": 1},
                       migPartitionSize="1g.5gb"))
    assert_problem(raw, "gke.gpuPools[0].migPartitionSize", "nvidia-h100-80gb", "nvidia-h200-141gb", "nvidia-b200",
                   "nvidia-tesla-t4 has no MIG")


def test_mig_partition_must_fit_the_accelerator():
    raw = gke_raw(pool(A100, migPartitionSize="1g.10gb"))  # an 80GB size on a 40GB A100
    assert_problem(raw, "gke.gpuPools[0].migPartitionSize", "1g.5gb", "7g.40gb")
    assert config.parse(gke_raw(pool(A100, migPartitionSize="1g.5gb"))).gke.gpu_pools[0].mig_partition_size == "1g.5gb"


def test_min_above_max():
    raw = gke_raw(pool(L4, autoscaling={"minNodes": 5, "maxNodes": 2}))
    assert_problem(raw, "gke.gpuPools[0].autoscaling.minNodes", "5", "maxNodes 2")


def test_empty_zones():
    raw = gke_raw(pool(L4, zones=[]))
    assert_problem(raw, "gke.gpuPools[0].zones", "at least one zone", "nvidia-l4")


def test_bad_zone_name():
    assert_problem(gke_raw(pool(L4, zones=["us-central1"])), "gke.gpuPools[0].zones", "not a Compute Engine zone")


def test_operator_with_gke_managed_driver():
    raw = gke_raw(pool(L4, driver="gke-default"), gpu={"stack": "operator"})
    assert_problem(raw, "gke.gpuPools[0].driver", "operator", "installer-cos", "none", "gke-default")


def test_operator_pools_agree_on_the_driver_source():
    raw = gke_raw(pool(L4, driver="installer-cos"), pool(A100, driver="none"), gpu={"stack": "operator"})
    assert_problem(raw, "gke.gpuPools", "every pool")
    ok = config.parse(gke_raw(pool(L4, driver="none"), pool(A100, driver="none"), gpu={"stack": "operator"}))
    assert ok.gpu.stack.value == "operator"


def test_operator_rejects_gke_sharing():
    raw = gke_raw(pool(L4, driver="none", sharing={"strategy": "time-sharing", "maxClients": 4}),
                  gpu={"stack": "operator"})
    assert_problem(raw, "gke.gpuPools[0].sharing", "gpu.sharing")


def test_driver_none_needs_the_operator():
    assert_problem(gke_raw(pool(L4, driver="none")), "gke.gpuPools[0].driver", "gpu.stack operator")


def test_n1_counts_and_accelerators():
    raw = gke_raw(pool(L4, machineType="n1-standard-8", accelerator={"type": "nvidia-tesla-v100", "count": 3}))
    assert_problem(raw, "gke.gpuPools[0].accelerator.count", "1, 2, 4, 8", "got 3")
    raw = gke_raw(pool(L4, machineType="n1-standard-8"))
    assert_problem(raw, "gke.gpuPools[0].accelerator.type", "n1 machines take", "g2-standard")


def test_unknown_machine_and_accelerator():
    assert_problem(gke_raw(pool(L4, machineType="e2-standard-8")), "gke.gpuPools[0].machineType", "not a GPU machine type")
    assert_problem(gke_raw(pool(L4, machineType="a2-highgpu-3g")), "gke.gpuPools[0].machineType", "a2-highgpu-1g")
    raw = gke_raw(pool(L4, accelerator={"type": "nvidia-k80", "count": 1}))
    assert_problem(raw, "gke.gpuPools[0].accelerator.type", "unknown accelerator")


def test_sharing_needs_clients():
    raw = gke_raw(pool(L4, sharing={"strategy": "mps", "maxClients": 1}))
    assert_problem(raw, "gke.gpuPools[0].sharing.maxClients", "mps", "2 to 48")
    raw = gke_raw(pool(L4, sharing={"strategy": "none", "maxClients": 4}))
    assert_problem(raw, "gke.gpuPools[0].sharing.maxClients", "leave it at 1")


def test_duplicate_pool_names_and_no_pools():
    assert_problem(gke_raw(L4, L4), "gke.gpuPools[1].name", "duplicates gke.gpuPools[0].name")
    raw = gke_raw()
    raw["gke"]["gpuPools"] = []
    assert_problem(raw, "gke.gpuPools", "at least one GPU node pool")


def test_zonal_cluster_needs_a_zone_and_regional_none():
    raw = gke_raw()
    del raw["gke"]["zone"]
    assert_problem(raw, "gke.zone", "zonal")
    assert_problem(gke_raw(location="regional"), "gke.zone", "regional")
    assert config.parse(gke_raw(location="regional", zone="")).gke.zone is None


def test_filestore_capacity_per_tier():
    assert_problem(gke_raw(filestore={"tier": "BASIC_SSD", "capacityGb": 1024}), "gke.filestore.capacityGb", "2560")
    assert_problem(gke_raw(filestore={"tier": "REGIONAL", "zone": "us-central1-a"}), "gke.filestore.zone", "regional")


def test_time_slicing_on_gke_device_plugin_points_to_pool_sharing():
    raw = gke_raw(gpu={"stack": "device-plugin", "sharing": {"mode": "time-slicing", "replicas": 4}})
    assert_problem(raw, "gpu.sharing.mode", "gke.gpuPools[].sharing")


def test_lab_and_dev_keys_are_rejected_on_gke():
    raw = gke_raw()
    raw["gpuNodes"] = ["node-1"]
    assert_problem(raw, "gpuNodes", "is a dev key", "this stack's platform is gke", "gke.gpuPools")
    raw = {**gke_raw(), "podCidr": "10.32.0.0/16", "storage": {"size": "200Gi"}}
    found = problems(raw)
    assert "is a lab key" in found["podCidr"]
    assert "gke.filestore" in found["storage"]


def test_lab_and_dev_keys_at_their_project_defaults_are_ignored_on_gke():
    """What Pulumi hands a gke stack for the keys it does not set (Pulumi.yaml's defaults)."""
    raw = {**gke_raw(), "hosts": [], "podCidr": "10.244.0.0/16", "gpuTaint": "true", "bastion": {},
           "nvidiaDriver": {"branch": "570", "preinstalled": False}, "kubeContext": "", "gpuNodes": [],
           "storage": {"size": "100Gi"}}
    cfg = config.parse(raw)
    assert isinstance(cfg, GkeStack) and not hasattr(cfg, "storage") and not hasattr(cfg, "hosts")


def test_unknown_pool_key():
    assert_problem(gke_raw(pool(L4, gpus=1)), "gke.gpuPools[0].gpus", "not a known key")


# ---------------------------------------------------------------------------------------------
# gcp:project and gcp:region


def test_gcp_project_and_region():
    cfg = config.parse(gke_raw())
    assert isinstance(cfg, GkeStack)
    assert (cfg.project, cfg.region) == ("my-gpu-project", "us-central1")


def test_missing_project_and_region_name_the_gcp_keys():
    raw = {k: v for k, v in gke_raw().items() if not k.startswith("gcp:")}
    with pytest.raises(ConfigError) as err:
        config.parse(raw)
    text = str(err.value)
    assert "gcp:project: is required" in text and "gcp:region: is required" in text
    assert "gpu-cluster:gcp" not in text
    assert dict(err.value.problems).keys() == {"gcp:project", "gcp:region"}


def test_config_error_shows_gcp_keys_as_they_are():
    """One formatting path: gcp: keys as they are, every other key under gpu-cluster:."""
    err = ConfigError([("gcp:project", "is required"), ("gke.zone", "is wrong")])
    assert str(err) == ("invalid stack configuration:\n  gcp:project: is required (docs/getting-started/gke.md)\n"
                        "  gpu-cluster:gke.zone: is wrong (docs/getting-started/gke.md)")
    assert err.args == (str(err),)


def test_gcp_keys_are_left_alone_on_lab_and_dev():
    """Not this program's namespace: a lab or dev stack may carry them for something else."""
    cfg = config.parse({"platform": "dev", "kubeContext": "minikube", **GCP, "gcp:region": "nowhere"})
    assert cfg.platform is Platform.DEV


def test_device_plugin_mig_on_gke_points_to_gke_partitions():
    raw = gke_raw(gpu={"sharing": {"mode": "mig"}})
    assert_problem(raw, "gpu.sharing.mode", "gke.gpuPools[].migPartitionSize")


def test_zones_outside_the_region():
    assert_problem(gke_raw(pool(L4, zones=["europe-west4-a"])), "gke.gpuPools[0].zones",
                   "europe-west4-a is not in gcp:region us-central1")
    assert_problem(gke_raw(zone="europe-west4-a"), "gke.zone", "not in gcp:region us-central1")


def test_missing_region_stops_before_any_resource(mocks):
    values = {f"gpu-cluster:{k}": v if isinstance(v, str) else json.dumps(v)
              for k, v in gke_raw().items() if not k.startswith("gcp:")}
    set_all_config({**values, "gcp:project": "my-gpu-project"}, [])
    try:
        with pytest.raises(ConfigError, match="gcp:region: is required"):
            config.load()
    finally:
        set_all_config({}, [])
    assert mocks.plan.resources == []


def test_a_gke_mig_partition_offers_nvidias_instances_per_gpu():
    """training.gpusPerNode is held to the instances NVIDIA's table gives a partition size: 1g.20gb
    is 4 per H100 80GB (its memory slices run out first), not one per compute slice (7)."""
    h100 = pool(L4, name="h100", machineType="a3-highgpu-1g", spot=False, migPartitionSize="1g.20gb",
                accelerator={"type": "nvidia-h100-80gb", "count": 1})
    assert config.parse({**gke_raw(h100), "training": {"enabled": True, "image": "registry.example.com/trainer:1.0.0", "gpusPerNode": 4}}).training.gpus_per_node == 4
    assert_problem({**gke_raw(h100), "training": {"enabled": True, "image": "registry.example.com/trainer:1.0.0", "gpusPerNode": 5}}, "training.gpusPerNode", "more than 4")
