"""The GPU inventory (config/inventory.py) and its one machine table (config/gcp/machines.py): every
GPU machine type the gke config accepts has a row with its size, a machine type without one is
refused naming the key, and each committed stack's inventory says what its config declares."""

from __future__ import annotations

from typing import Any

import pytest

import config
from config import ConfigError
from config.gcp import accelerators
from config.gcp.machine_shapes import machine_shape
from config.gcp.machines import GPU_MACHINES, TOPOLOGY_LABELLED
from config.inventory import TopologyLevel
from config.queues import flavors
from render import program
from tests.config.refusals import accepted, reported
from tests.config.test_gke_config import L4, gke_raw, pool
from tests.config.test_queues_config import queues, team
from tests.conftest import host, lab_raw

ULTRA = pool(L4, name="h200", machineType="a3-ultragpu-8g", accelerator={"type": "nvidia-h200-141gb", "count": 8},
             zones=["us-central1-a"], autoscaling={"minNodes": 0, "maxNodes": 2}, spot=False)


def committed(stack: str) -> config.StackConfig:
    """The committed Pulumi.<stack>.yaml, parsed as `pulumi up` parses it."""
    values, secret_keys = program.stack_config(stack)
    prefix = f"{config.NAMESPACE}:"
    raw = {k.removeprefix(prefix): config._decode(k.removeprefix(prefix), v) for k, v in values.items()
           if (k.startswith(prefix) or k in config.GCP_KEYS) and k.removeprefix(prefix) not in config.SECRET_KEYS}
    return config.parse(raw, {k.removeprefix(prefix) for k in secret_keys})


def test_every_accepted_gpu_machine_type_has_a_row_with_its_size() -> None:
    """The machine types the accelerator check accepts are the table's rows, each sized and sourced:
    before the one table, a3-ultragpu-8g and a4-highgpu-8g were accepted without a size."""
    assert set(accelerators.FIXED) == set(GPU_MACHINES)
    for name, (acc, count) in accelerators.FIXED.items():
        row = GPU_MACHINES[name]
        assert accelerators.check(name, acc, count) == []
        assert (row.accelerator, row.gpus) == (acc, count) and acc in accelerators.ACCELERATORS
        assert machine_shape(name) == (row.vcpus, row.memory_gb) and row.vcpus > 0 and row.memory_gb > 0
        assert "cloud.google.com" in row.source
    # Google's accelerator-optimized page: A3 Ultra and A4, 224 vCPUs with 2,952 GB and 3,968 GB.
    assert machine_shape("a3-ultragpu-8g") == (224, 2952.0)
    assert machine_shape("a4-highgpu-8g") == (224, 3968.0)
    assert set(TOPOLOGY_LABELLED) == {"a3-ultragpu-8g", "a4-highgpu-8g"}
    # Each GPU's memory, as its product name says where it says one (A100 40GB, H200 141GB).
    for acc in accelerators.ACCELERATORS.values():
        assert acc.memory_gb > 0
        assert not acc.product.endswith("GB") or acc.product.endswith(f" {acc.memory_gb}GB"), acc


def test_a_gpu_machine_type_without_a_row_is_refused_naming_the_key() -> None:
    """A4X (a4x-highgpu-4g, GB200 on Arm hosts) has no row: refused, naming the key and the types."""
    a4x = pool(L4, machineType="a4x-highgpu-4g", accelerator={"type": "nvidia-b200", "count": 4})
    reported(gke_raw(a4x), "gke.gpuPools[0].machineType", "a4x-highgpu-4g", "a3-ultragpu-8g", "a4-highgpu-8g",
             "config/gcp/machines.py")


def test_a_team_cpu_beyond_an_a3_ultra_pool_is_refused() -> None:
    """The issue's bug: an a3-ultragpu-8g pool had no shape, so a team's CPU and memory quota went
    unchecked. 2 nodes of 224 vCPUs, less GKE's reservation (0.06 + 0.01 + 2 x 0.005 + 220 x 0.0025 =
    0.63 cores): 446.74 cores; 2952 GiB less its reservation and eviction threshold per node."""
    accepted({**gke_raw(ULTRA), "queues": queues(team(cpu="446"))})
    reported({**gke_raw(ULTRA), "queues": queues(team(cpu="447"))}, "queues.teams[0].cpu", "447 CPUs",
             "nvidia-h200-141gb", "446.7")
    reported({**gke_raw(ULTRA), "queues": queues(team(memory="6000Gi"))}, "queues.teams[0].memory", "6000Gi")


def test_the_gke_inventory_sizes_each_pool_from_the_table() -> None:
    cfg = accepted(gke_raw(ULTRA, pool(ULTRA, name="h200-reserved", provisioning="reservation", reservation="r1")))
    inv = cfg.inventory
    assert [(g.name, g.flavor, g.gpu_model, g.node_count, g.gpus, g.units, g.vcpus, g.gpu_nics) for g in inv.groups] \
        == [(name, "nvidia-h200-141gb", "nvidia-h200-141gb", 2, 16, 16, 224, 8) for name in ("h200", "h200-reserved")]
    # Google labels only the reservation's nodes, with values no offline check knows.
    # H200: MIG on GKE (GKE's multi-instance GPU page), NVIDIA's instances per profile
    assert all(g.gpu_memory_gb == 141 and g.mig_slices["1g.18gb"] == 7 and g.mig_slices["7g.141gb"] == 1
               and (g.gpus_per_node, g.units_per_gpu) == (8, 1) for g in inv.groups)
    assert [g.topology_labelled for g in inv.groups] == [False, True] and not inv.values_known
    assert inv.levels_present == frozenset(TopologyLevel)
    assert cfg.inventory is inv  # built once


def _lab(sharing: dict[str, Any], model: str = "NVIDIA-H100-80GB-HBM3", **queue: Any) -> config.StackConfig:
    hosts = [host("cp-1", "192.0.2.10", "control-plane"),
             host("gpu-1", "192.0.2.11", gpus=8, gpuModel=model, rack="r1"),
             host("gpu-2", "192.0.2.12", gpus=4, gpuModel=model, rack="r2")]
    return accepted(lab_raw(hosts=hosts, gpu={"stack": "operator", "sharing": sharing}, **queue))


def test_the_lab_inventory_counts_its_hosts_in_the_quota_unit() -> None:
    """12 H100 80GB: 12 GPUs; 4 replicas each under time-slicing; 7 1g.10gb slices each under MIG
    (NVIDIA's MIG user guide: seven 1g.10gb instances on an H100 80GB)."""
    whole = _lab({"mode": "none"}).inventory
    (g,) = whole.groups
    assert (g.nodes, g.gpus, g.units, g.flavor) == (("gpu-1", "gpu-2"), 12, 12, "nvidia-h100-80gb-hbm3")
    assert whole.default_level is TopologyLevel.RACK and whole.values_known
    # MIG slices per profile, from the MIG table for the GPU GFD names (an A100 40GB holds 4 1g.10gb)
    assert (g.mig_slices["1g.10gb"], g.mig_slices["7g.80gb"]) == (7, 1) and "1g.5gb" not in g.mig_slices
    assert _lab({"mode": "none"}, model="NVIDIA-A100-SXM4-40GB").inventory.groups[0].mig_slices["1g.10gb"] == 4
    assert whole.labels_written["gpu-2"] == {"gpu-cluster.io/rack": "r2",
                                             "gpu-cluster.io/gpu-model": "NVIDIA-H100-80GB-HBM3"}
    assert (g.node_gpus, g.gpus_per_node, g.units_per_gpu) == ({"gpu-1": 8, "gpu-2": 4}, None, 1)
    assert _lab({"mode": "time-slicing", "replicas": 4}).inventory.groups[0].units == 48
    mig = _lab({"mode": "mig", "migProfile": "all-1g.10gb"})
    assert (mig.inventory.groups[0].units, mig.inventory.groups[0].units_per_gpu) == (84, 7)
    assert [f.gpus for f in flavors(mig)] == [84]


def test_each_committed_stack_has_its_inventory() -> None:
    lab = committed("lab")
    assert isinstance(lab, config.LabStack)
    gpu_hosts = tuple(h.name for h in lab.hosts if h.is_gpu)
    assert sum((g.nodes for g in lab.inventory.groups), ()) == gpu_hosts and gpu_hosts
    assert sum(g.gpus or 0 for g in lab.inventory.groups) == sum(h.gpus for h in lab.hosts)
    gke = committed("gke")
    assert isinstance(gke, config.GkeStack)
    assert {g.name for g in gke.inventory.groups} == {p.name for p in gke.gke.gpu_pools}
    assert all(g.allocatable is not None for g in gke.inventory.groups)
    dev = committed("dev")
    assert isinstance(dev, config.DevStack)
    assert dev.inventory.groups[0].nodes == dev.gpu_nodes and dev.inventory.topology_labels is None


def test_no_level_on_dev_and_none_without_labelled_pools_on_gke() -> None:
    with pytest.raises(ConfigError, match="no GPU pool carries Google's topology labels"):
        config.parse({**gke_raw(ULTRA), "queues": {**queues(team()), "rdmaTopologyLevel": "block"}})
