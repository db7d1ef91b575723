"""gke.gpuPools[]' node hardware: boot disk type per machine family (Hyperdisk only on A3 Ultra and A4),
compact placement and reservation blocks. Each refusal names its key and what is allowed, before
anything is registered (config/gke_pool_hardware.py, config/gcp/machine_storage.py)."""

from __future__ import annotations

import pytest

import config
from config.gcp.machine_storage import BUNDLED_LOCAL_SSDS, FAMILIES, GKE_BOOT_DISK_TYPES, family_of
from config.gcp.machines import GPU_MACHINES
from config.gke_pool_hardware import boot_disk_type
from config.gke_pools import reservation_value
from tests.config.test_gke_config import A100, L4, assert_problem, gke_raw, pool

A3_ULTRA = {
    "name": "h200", "machineType": "a3-ultragpu-8g", "accelerator": {"type": "nvidia-h200-141gb", "count": 8},
    "zones": ["us-central1-b"], "autoscaling": {"minNodes": 0, "maxNodes": 4},
}
A4 = pool(A3_ULTRA, name="b200", machineType="a4-highgpu-8g", accelerator={"type": "nvidia-b200", "count": 8})
A3_MEGA = pool(A3_ULTRA, name="h100-mega", machineType="a3-megagpu-8g",
               accelerator={"type": "nvidia-h100-mega-80gb", "count": 8})


def _pool(p: dict) -> object:
    return config.parse(gke_raw(p)).gke.gpu_pools[0]


def test_every_gpu_machine_has_its_boot_disks_and_every_bundled_ssd_machine_exists():
    """A machine added to the table without its family's boot disks would boot from GKE's pd-balanced."""
    assert sorted(m for m in GPU_MACHINES if family_of(m) not in FAMILIES) == []
    assert set(BUNDLED_LOCAL_SSDS) <= set(GPU_MACHINES)
    for family in FAMILIES.values():
        assert family.boot_disks and set(family.boot_disks) <= set(GKE_BOOT_DISK_TYPES)


@pytest.mark.parametrize("p, disk", [
    (A3_ULTRA, "hyperdisk-balanced"), (A4, "hyperdisk-balanced"), (A3_MEGA, "pd-balanced"),
    (L4, "pd-balanced"), (A100, "pd-balanced"),
])
def test_an_unset_disk_type_is_the_machine_familys_default(p, disk):
    assert boot_disk_type(_pool(p)) == disk


@pytest.mark.parametrize("p", [A3_ULTRA, A4])
def test_a3_ultra_and_a4_refuse_persistent_disk(p):
    assert_problem(gke_raw(pool(p, diskType="pd-balanced")), "gke.gpuPools[0].diskType",
                   "cannot boot from pd-balanced", "Hyperdisk only", "hyperdisk-balanced")


@pytest.mark.parametrize("p, disk, allowed", [
    (A3_MEGA, "pd-standard", "pd-balanced, pd-ssd, hyperdisk-balanced"),
    (A100, "hyperdisk-balanced", "pd-balanced, pd-ssd, pd-standard"),
    (L4, "pd-standard", "pd-balanced, pd-ssd"),
])
def test_a_boot_disk_the_family_does_not_take_is_refused_with_what_it_takes(p, disk, allowed):
    assert_problem(gke_raw(pool(p, diskType=disk)), "gke.gpuPools[0].diskType", f"cannot boot from {disk}", allowed)


def test_an_unknown_disk_type_lists_gkes_boot_disk_types():
    assert_problem(gke_raw(pool(L4, diskType="hyperdisk-extreme")), "gke.gpuPools[0].diskType",
                   "not a GKE node boot disk type", "pd-balanced, pd-ssd, pd-standard, hyperdisk-balanced")


def test_a_disk_type_the_family_takes_is_kept():
    assert boot_disk_type(_pool(pool(A3_MEGA, diskType="hyperdisk-balanced"))) == "hyperdisk-balanced"


def test_compact_placement_in_one_zone_is_accepted():
    assert _pool(pool(A3_ULTRA, compactPlacement=True)).compact_placement is True


@pytest.mark.parametrize("changes, words", [
    ({"zones": ["us-central1-a", "us-central1-b"]}, ("one zone", "has 2")),
    ({"upgrade": {"strategy": "blueGreen"}}, ("blue-green", "surge")),
])
def test_compact_placement_limits_are_refused_naming_the_key(changes, words):
    assert_problem(gke_raw(pool(A3_ULTRA, compactPlacement=True, **changes)), "gke.gpuPools[0].compactPlacement", *words)


def test_compact_placement_is_not_for_flex_start():
    raw = gke_raw(pool(A3_ULTRA, compactPlacement=True, provisioning="flexStart"))
    raw["queues"] = {"enabled": True}
    assert_problem(raw, "gke.gpuPools[0].compactPlacement", "flexStart", "COMPACT")


def test_a_reservation_block_is_named_after_its_reservation():
    p = pool(A3_ULTRA, provisioning="reservation", reservation="h200-res", reservationBlock="h200-res-block-0001")
    assert reservation_value(_pool(p)) == "h200-res/reservationBlocks/h200-res-block-0001"
    shared = _pool(pool(p, reservationProject="capacity-host-proj"))
    assert reservation_value(shared) == ("projects/capacity-host-proj/reservations/h200-res/reservationBlocks/"
                                         "h200-res-block-0001")


def test_a_reservation_block_needs_provisioning_reservation_and_a_name():
    assert_problem(gke_raw(pool(A3_ULTRA, reservationBlock="b1")), "gke.gpuPools[0].reservationBlock",
                   "provisioning reservation only", "onDemand")
    assert_problem(gke_raw(pool(A3_ULTRA, provisioning="reservation", reservation="r", reservationBlock="B_1")),
                   "gke.gpuPools[0].reservationBlock", "not a reservation block name")


def test_a3_edge_is_an_h100_machine_whose_local_ssds_are_left_as_they_come():
    """Its local SSD count is in neither the Cluster Toolkit's table nor a Google page read here; a wrong
    count makes GKE refuse the pool, none leaves ephemeral storage on the boot disk."""
    p = _pool(pool(A3_MEGA, name="edge", machineType="a3-edgegpu-8g",
                   accelerator={"type": "nvidia-h100-80gb", "count": 8}))
    assert (p.machine_type, boot_disk_type(p)) == ("a3-edgegpu-8g", "pd-balanced")
    assert p.machine_type not in BUNDLED_LOCAL_SSDS
    assert GPU_MACHINES["a3-edgegpu-8g"].gpudirect is None


def test_bundled_local_ssds_are_the_cluster_toolkits_counts():
    """Google's Cluster Toolkit, modules/compute/gke-node-pool/disk_definitions.tf at 1047080: the
    machines GKE is given a local SSD count for, and the counts (config/gcp/machine_storage.py)."""
    assert BUNDLED_LOCAL_SSDS == {"a3-highgpu-8g": 16, "a3-megagpu-8g": 16, "a3-ultragpu-8g": 32,
                                  "a4-highgpu-8g": 32}


A3_HIGH_4G = pool(A3_MEGA, name="h100", machineType="a3-highgpu-4g", accelerator={"type": "nvidia-h100-80gb", "count": 4})


@pytest.mark.parametrize("p", [A3_ULTRA, A4, A3_MEGA, A3_HIGH_4G])
def test_every_a3_and_a4_machine_boots_from_hyperdisk_balanced(p):
    """Google's Hyperdisk table (cloud.google.com/compute/docs/disks/hyperdisks): A4, A3 (H200) and
    A3 (H100) take Hyperdisk Balanced."""
    assert boot_disk_type(_pool(pool(p, diskType="hyperdisk-balanced"))) == "hyperdisk-balanced"


@pytest.mark.parametrize("machine, accelerator", [
    ("a2-highgpu-1g", "nvidia-tesla-a100"), ("a2-ultragpu-1g", "nvidia-a100-80gb"),
    ("n1-standard-8", "nvidia-tesla-t4"),
])
def test_a2_and_n1_refuse_hyperdisk_balanced(machine, accelerator):
    """The same table: A2, N1 and N1+GPU take no Hyperdisk Balanced."""
    assert_problem(gke_raw(pool(A100, machineType=machine, accelerator={"type": accelerator, "count": 1},
                                diskType="hyperdisk-balanced")),
                   "gke.gpuPools[0].diskType", "cannot boot from hyperdisk-balanced", "pd-balanced")


def test_g4_is_refused_on_the_machine_type_saying_why():
    """Before its accelerator is looked at: the accelerator type is one of the facts not confirmed."""
    assert_problem(gke_raw(pool(L4, machineType="g4-standard-48",
                                accelerator={"type": "nvidia-rtx-pro-6000", "count": 1})),
                   "gke.gpuPools[0].machineType", "g4-standard-48", "G4", "RTX PRO 6000", "not confirmed")
