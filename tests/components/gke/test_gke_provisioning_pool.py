"""GpuNodePool under Pulumi mocks, per gke.gpuPools[].provisioning: what GKE's node pool API receives
(pulumi-gcp's NodePool inputs, the fields of the pinned provider) for a flex-start pool with queued
provisioning (GKE's requirements: queued provisioning and flex-start on, autoscaling from 0 with
location policy ANY, reservation affinity NONE, no auto-repair) and for a pool on a specific
reservation; an on-demand pool registers none of them, as before."""

from __future__ import annotations

import pulumi

from components.gke.gpu_node_pool import GpuNodePool
from tests.components.gke.test_gke_components import pool_inputs, register_first_pool
from tests.config.test_gke_config import A100, gke_raw, pool

FLEX = pool(A100, name="a100-flex", zones=["us-central1-a"], autoscaling={"minNodes": 0, "maxNodes": 3},
            provisioning="flexStart")


def _register(p: dict) -> GpuNodePool:
    raw = gke_raw(p)
    raw["queues"] = {"enabled": True}
    return register_first_pool(raw)


@pulumi.runtime.test
def test_a_flex_start_pool_is_queued_provisioning_from_zero(mocks):
    gpu_pool = _register(FLEX)

    def check(_):
        i = pool_inputs(mocks, "a100-flex")
        assert i["queuedProvisioning"] == {"enabled": True}
        assert i["nodeConfig"]["flexStart"] is True
        assert i["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
        assert i["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 3, "locationPolicy": "ANY"}
        assert i["initialNodeCount"] == 0
        assert i["management"] == {"autoRepair": False, "autoUpgrade": True}
        assert "spot" not in i["nodeConfig"] or i["nodeConfig"]["spot"] is False
        # GKE taints queued-provisioning nodes but does not label them: the pool carries the label its
        # Kueue flavor selects (Cluster Toolkit's gke-node-pool module does the same)
        assert i["nodeConfig"]["labels"]["cloud.google.com/gke-queued"] == "true"

    return gpu_pool.node_pool.name.apply(check)


@pulumi.runtime.test
def test_a_reservation_pool_consumes_only_its_specific_reservation(mocks):
    gpu_pool = _register(pool(A100, provisioning="reservation", reservation="a100-reserved",
                              reservationProject="capacity-host-proj"))

    def check(_):
        i = pool_inputs(mocks, "a100")
        assert i["nodeConfig"]["reservationAffinity"] == {
            "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
            "values": ["projects/capacity-host-proj/reservations/a100-reserved"]}
        assert i["autoscaling"]["locationPolicy"] == "ANY"
        assert "queuedProvisioning" not in i and "flexStart" not in i["nodeConfig"]
        assert i["management"] == {"autoRepair": True, "autoUpgrade": True}

    return gpu_pool.node_pool.name.apply(check)


@pulumi.runtime.test
def test_an_on_demand_pool_registers_no_provisioning_fields(mocks):
    gpu_pool = _register(A100)

    def check(_):
        i = pool_inputs(mocks, "a100")
        assert "queuedProvisioning" not in i and "cloud.google.com/gke-queued" not in i["nodeConfig"]["labels"]
        assert "reservationAffinity" not in i["nodeConfig"] and "flexStart" not in i["nodeConfig"]
        assert i["autoscaling"]["locationPolicy"] == "BALANCED"
        assert i["management"] == {"autoRepair": True, "autoUpgrade": True}

    return gpu_pool.node_pool.name.apply(check)


def test_gpu_node_agents_tolerate_gkes_queued_taint_on_gke_only():
    """GKE taints a queued-provisioning node cloud.google.com/gke-queued: the GPU agents (GFD and NFD's
    worker, the DCGM exporter, the operator's operands) run there too; lab and dev keep theirs as they were."""
    from components import gpu_stack
    from config.gpu import GpuConfig
    from config.scheduling_contract import gpu_tolerations

    queued = {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"}
    gfd, dcgm = gpu_stack.gfd_values(gke=True), gpu_stack.dcgm_exporter_values(gke=True)
    assert queued in gfd["tolerations"] and queued in gfd["nfd"]["worker"]["tolerations"]
    assert queued in dcgm["tolerations"]
    operator = gpu_stack.operator_values(GpuConfig(stack="operator"), driver_on_host=False, gke=True)
    assert queued in operator["daemonsets"]["tolerations"]
    # the operator's NFD worker labels the nodes its operands select: on flex-start nodes too, and still
    # where the chart's default worker tolerations (control plane, GPU) reach
    worker = operator["node-feature-discovery"]["worker"]["tolerations"]
    assert queued in worker and {t["key"] for t in worker} >= {"node-role.kubernetes.io/control-plane", "nvidia.com/gpu"}
    lab_operator = gpu_stack.operator_values(GpuConfig(stack="operator"), driver_on_host=False, gke=False)
    assert "worker" not in lab_operator["node-feature-discovery"]  # the chart's own, as before
    assert gpu_stack.dcgm_exporter_values(gke=False)["tolerations"] == gpu_tolerations()
    assert queued not in gpu_stack.gfd_values(gke=False)["nfd"]["worker"]["tolerations"]
