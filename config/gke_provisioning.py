"""How a GKE GPU pool gets its GPUs (gke.gpuPools[].provisioning), and what that means for Kueue.

- onDemand (the default, what every pool did before): the cluster autoscaler creates VMs when pods
  wait, if the zone has capacity and the project quota; matching open reservations are used first
  (GKE's default reservation affinity).
- flexStart: queued provisioning with flex-start VMs (Dynamic Workload Scheduler). GKE creates the
  nodes of a job only for a ProvisioningRequest, all at once or not at all, when capacity frees up;
  Kueue creates that request for each workload it admits to the pool's flavor (its
  ProvisioningRequest admission check, components/queues/provisioning.py). Hence queues.enabled.
  GKE's requirements for such a pool (GKE docs "Run a large-scale workload with flex-start with
  queued provisioning"; Google's Cluster Toolkit gke-node-pool module refuses the same): autoscaling
  from 0 (minNodes 0), location policy ANY, reservation affinity NONE, no auto-repair, no spot.
  GKE labels the nodes cloud.google.com/gke-queued=true and taints them with the same key
  (NoSchedule): the pool's flavor selects that label and tolerates the taint.
- reservation: the nodes consume only the named specific reservation (reservation affinity
  SPECIFIC_RESERVATION, key compute.googleapis.com/reservation-name); a shared reservation of
  another project is named projects/<project>/reservations/<name>. How many VMs it holds is not
  known offline: render warns, and the check models the pool at its autoscaling maximum.

Refused here, naming the key: reservation without a name, a reservation name (or project) on a pool
that is not provisioning reservation, flexStart without queues.enabled, flexStart with minNodes
above 0 or with spot.
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Any

from components.scheduling_contract import GKE_ACCELERATOR_LABEL, GKE_POOL_LABEL, GKE_QUEUED_TAINT
from config.errors import Problems

if TYPE_CHECKING:
    from config.gke_pools import GpuPool
    from config.gpu import GpuConfig
    from config.queues import Flavor

# What GKE sets on queued-provisioning nodes: this label (true), and a NoSchedule taint of the same key.
GKE_QUEUED_LABEL = GKE_QUEUED_TAINT.key
# The reservation label GKE's API takes for a specific reservation.
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# A flex-start pool's ResourceFlavor: the pool's name and this suffix (accelerator flavors are
# named after accelerator types, nvidia-*, so the two never collide).
FLEX_START_FLAVOR_SUFFIX = "-flex-start"

# Compute Engine resource names (a reservation): at most 63 characters.
_RESOURCE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_PROJECT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")


class GkeProvisioning(enum.StrEnum):
    ON_DEMAND = "onDemand"
    FLEX_START = "flexStart"
    RESERVATION = "reservation"


def check_reservation_name(v: str) -> str:
    if not _RESOURCE_NAME.fullmatch(v):
        raise ValueError(f"{v[:70]!r} is not a reservation name (a letter, then a-z, 0-9 and '-', ending "
                         "alphanumeric, at most 63 characters); a shared one's project goes in reservationProject")
    return v


def check_project(v: str) -> str:
    if not _PROJECT_ID.fullmatch(v):
        raise ValueError(f"{v[:40]!r} is not a project id (6-30 characters, a-z, 0-9, '-')")
    return v


def reservation_value(pool: GpuPool) -> str:
    """The reservation as GKE's reservation affinity names it: its name, or its path in its project."""
    assert pool.reservation is not None
    if pool.reservation_project:
        return f"projects/{pool.reservation_project}/reservations/{pool.reservation}"
    return pool.reservation


def provisioning_problems(key: str, pool: GpuPool, queues_enabled: bool) -> Problems:
    """One pool's provisioning against its own keys and queues.enabled; `key` is gke.gpuPools[i]."""
    problems: Problems = []
    mode = pool.provisioning
    if mode is GkeProvisioning.RESERVATION and pool.reservation is None:
        problems.append((f"{key}.reservation", "is required with provisioning reservation: the name of a "
                                               "specific reservation (`gcloud compute reservations list`)"))
    if mode is not GkeProvisioning.RESERVATION:
        why = (" (queued provisioning consumes no reservation: GKE requires reservation affinity NONE)"
               if mode is GkeProvisioning.FLEX_START else "")
        if pool.reservation is not None:
            problems.append((f"{key}.reservation", f"applies to provisioning reservation only, not {mode.value}{why}"))
        if pool.reservation_project is not None:
            problems.append((f"{key}.reservationProject", f"applies to provisioning reservation only, not {mode.value}"))
    if mode is GkeProvisioning.FLEX_START:
        if not queues_enabled:
            problems.append((f"{key}.provisioning", "flexStart needs queues.enabled: true: queued provisioning creates "
                                                    "nodes only for a ProvisioningRequest, which Kueue makes for each "
                                                    "job it admits to this pool (without Kueue no pod ever gets a node)"))
        if pool.autoscaling.min_nodes != 0:
            problems.append((f"{key}.autoscaling.minNodes", f"must be 0 with provisioning flexStart (got "
                                                            f"{pool.autoscaling.min_nodes}): queued provisioning scales "
                                                            "from zero, GKE creates nodes only for a ProvisioningRequest"))
        if pool.spot:
            problems.append((f"{key}.spot", "flexStart and spot are two provisioning models; a pool uses one "
                                            "(set spot false, or provisioning onDemand)"))
    return problems


def flex_start_flavor_name(pool: GpuPool) -> str:
    return f"{pool.name}{FLEX_START_FLAVOR_SUFFIX}"


def flex_start_flavors(pools: tuple[GpuPool, ...], gpu: GpuConfig) -> tuple[Flavor, ...]:
    """One ResourceFlavor per flexStart pool (its own admission check covers it, and no other pool's
    nodes count in it): its accelerator, the pool's own label and GKE's queued label; its size is
    what the pool scales to, in the covered GPU resource's units (config/queue_units.py); its model
    the accelerator type, so a team's quota mapping names it as it names an on-demand pool's flavor."""
    from config.queue_units import describe, gke_units_per_node
    from config.queues import Flavor

    def size(p: GpuPool) -> int | None:
        per_node = gke_units_per_node(p, gpu)
        return None if isinstance(per_node, str) else p.autoscaling.max_nodes * len(p.zones) * per_node

    return tuple(
        Flavor(flex_start_flavor_name(p),
               {GKE_ACCELERATOR_LABEL: p.accelerator.type, GKE_POOL_LABEL: p.name, GKE_QUEUED_LABEL: "true"},
               size(p), "gke.gpuPools", model=p.accelerator.type, unit=describe(gpu))
        for p in pools if p.provisioning is GkeProvisioning.FLEX_START
    )


def is_queued_flavor(node_labels: dict[str, str]) -> bool:
    """A flavor of a flexStart pool (its nodes come through a ProvisioningRequest)."""
    return node_labels.get(GKE_QUEUED_LABEL) == "true"


def reservation_warnings(cfg: Any) -> list[str]:
    """render's warnings: a reservation's size is not in the config, so no check can know it."""
    if str(cfg.platform) != "gke":
        return []
    return [f"gpu-cluster:gke.gpuPools[{i}] ({p.name}) consumes reservation {reservation_value(p)}: how many VMs it "
            f"holds is not known offline; the check counts the pool at autoscaling.maxNodes "
            f"({p.autoscaling.max_nodes * len(p.zones)} nodes), GKE creates no more than the reservation has free "
            "(`gcloud compute reservations describe`)"
            for i, p in enumerate(cfg.gke.gpu_pools) if p.provisioning is GkeProvisioning.RESERVATION]
