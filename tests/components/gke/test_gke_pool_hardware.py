"""Pools that can be created and upgrades that do not kill training, under Pulumi mocks: what GKE's
cluster and node pool APIs receive (pulumi-gcp's Cluster and NodePool inputs of the pinned provider)
for the boot disk, the bundled local SSDs, compact placement, a reservation block, the upgrade
strategy, the maintenance policy and the control plane's minor."""

from __future__ import annotations

import pulumi

import config
from components.gke.gpu_node_pool import GpuNodePool
from tests.components.gke import test_gke_components
from tests.components.gke.test_gke_components import of_type, pool_inputs, register_first_pool
from tests.config.test_gke_config import L4, gke_raw, pool
from tests.config.test_gke_pool_hardware import A3_ULTRA

# name -> ignoreChanges of every registration (the fixture of the GKE component tests)
ignore_changes = test_gke_components.ignore_changes


def _register(p: dict, **gke) -> GpuNodePool:
    return register_first_pool(gke_raw(p, **gke))


@pulumi.runtime.test
def test_an_a3_ultra_pool_boots_from_hyperdisk_on_its_local_ssds_in_one_reservation_block(mocks, ignore_changes):
    gpu_pool = _register(pool(A3_ULTRA, compactPlacement=True, provisioning="reservation", reservation="h200-res",
                              reservationBlock="h200-res-block-0001"))

    def check(_):
        i = pool_inputs(mocks, "h200")
        node = i["nodeConfig"]
        assert node["diskType"] == "hyperdisk-balanced"
        assert node["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": 32}
        assert node["reservationAffinity"] == {
            "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
            "values": ["h200-res/reservationBlocks/h200-res-block-0001"]}
        assert i["placementPolicy"] == {"type": "COMPACT"}
        assert i["upgradeSettings"] == {"strategy": "SURGE", "maxSurge": 0, "maxUnavailable": 1}
        # set at creation only: a pool created without it is not replaced for it
        assert "nodeConfig.ephemeralStorageLocalSsdConfig" in ignore_changes["gpu-h200"]

    return gpu_pool.node_pool.name.apply(check)


@pulumi.runtime.test
def test_an_l4_pool_keeps_pd_balanced_without_local_ssd_or_placement_and_may_upgrade_blue_green(mocks):
    gpu_pool = _register(pool(L4, upgrade={"strategy": "blueGreen", "soak": "600s"}))

    def check(_):
        i = pool_inputs(mocks, "l4")
        assert i["nodeConfig"]["diskType"] == "pd-balanced"
        assert "ephemeralStorageLocalSsdConfig" not in i["nodeConfig"] and "placementPolicy" not in i
        assert i["upgradeSettings"] == {"strategy": "BLUE_GREEN", "blueGreenSettings": {
            "nodePoolSoakDuration": "600s", "standardRolloutPolicy": {"batchNodeCount": 1}}}

    return gpu_pool.node_pool.name.apply(check)


@pulumi.runtime.test
def test_the_cluster_gets_its_window_exclusions_and_kubernetes_minor(mocks):
    run = {"name": "llm-run-7", "start": "2026-03-01T00:00:00Z", "end": "2026-03-25T00:00:00Z", "scope": "NO_UPGRADES"}
    gpu_pool = _register(L4, maintenance={"exclusions": [run]})

    def check(_):
        (c,) = of_type(mocks, "gcp:container/cluster:Cluster")
        minor = ".".join(config.parse(gke_raw(L4)).kubernetes_version.split(".")[:2])
        assert c.inputs["minMasterVersion"] == minor
        assert c.inputs["maintenancePolicy"] == {
            "recurringWindow": {"startTime": "2026-01-03T00:00:00Z", "endTime": "2026-01-03T08:00:00Z",
                                "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU"},
            "maintenanceExclusions": [{"exclusionName": "llm-run-7", "startTime": "2026-03-01T00:00:00Z",
                                       "endTime": "2026-03-25T00:00:00Z",
                                       "exclusionOptions": {"scope": "NO_UPGRADES"}}]}

    return gpu_pool.node_pool.name.apply(check)


@pulumi.runtime.test
def test_the_default_exclusion_holds_minor_and_node_upgrades_until_end_of_support(mocks):
    gpu_pool = _register(L4)

    def check(_):
        (c,) = of_type(mocks, "gcp:container/cluster:Cluster")
        assert c.inputs["maintenancePolicy"]["maintenanceExclusions"] == [{
            "exclusionName": "no-minor-or-node-upgrades-indefinite", "startTime": "2025-12-01T00:00:00Z",
            "exclusionOptions": {"scope": "NO_MINOR_OR_NODE_UPGRADES", "endTimeBehavior": "UNTIL_END_OF_SUPPORT"}}]

    return gpu_pool.node_pool.name.apply(check)
