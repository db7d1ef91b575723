"""What gke.gpuPools[].provisioning sets on a GPU node pool (config/gke_provisioning.py says why):

- onDemand: nothing beyond the pool as it was (GKE's default reservation affinity, BALANCED
  location policy unless spot, auto-repair).
- flexStart: queued_provisioning.enabled and node_config.flex_start (GKE creates nodes only for a
  ProvisioningRequest, flex-start VMs), reservation affinity NO_RESERVATION, location policy ANY
  (the capacity is wherever Dynamic Workload Scheduler finds it), auto-repair off (a repair would
  recreate a node outside its request). Auto-upgrade stays on: a pool of a release-channel cluster
  must keep it. The node label cloud.google.com/gke-queued=true, which the pool's Kueue flavor
  selects: GKE applies only the taint of that key to queued-provisioning nodes, not the label
  (Cluster Toolkit, modules/compute/gke-node-pool/main.tf: "cloud.google.com/gke-queued is added
  manually because while GKE automatically applies the taint, the label is required for workloads
  using nodeSelectors"), so the pool sets it, as the toolkit's module does.
- reservation: reservation affinity SPECIFIC_RESERVATION on the reservation's name (or its path in
  another project), location policy ANY (the autoscaler's policy that prefers unused reservations).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi_gcp as gcp

from config.gke_pools import GpuPool, reservation_value
from config.gke_provisioning import GKE_QUEUED_LABEL, RESERVATION_KEY, GkeProvisioning


@dataclass(frozen=True)
class PoolProvisioning:
    location_policy: str
    auto_repair: bool
    flex_start: bool | None
    queued_provisioning: gcp.container.NodePoolQueuedProvisioningArgs | None
    reservation_affinity: gcp.container.NodePoolNodeConfigReservationAffinityArgs | None
    labels: dict[str, str] = field(default_factory=dict)  # node labels the mode needs on top of the pool's


def pool_provisioning(pool: GpuPool) -> PoolProvisioning:
    if pool.provisioning is GkeProvisioning.FLEX_START:
        return PoolProvisioning(
            location_policy="ANY", auto_repair=False, flex_start=True,
            queued_provisioning=gcp.container.NodePoolQueuedProvisioningArgs(enabled=True),
            reservation_affinity=gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="NO_RESERVATION"),
            labels={GKE_QUEUED_LABEL: "true"},
        )
    if pool.provisioning is GkeProvisioning.RESERVATION:
        return PoolProvisioning(
            location_policy="ANY", auto_repair=True, flex_start=None, queued_provisioning=None,
            reservation_affinity=gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY,
                values=[reservation_value(pool)]),
        )
    # Spot capacity comes and goes per zone: take it wherever it is.
    return PoolProvisioning(location_policy="ANY" if pool.spot else "BALANCED", auto_repair=True,
                            flex_start=None, queued_provisioning=None, reservation_affinity=None)
