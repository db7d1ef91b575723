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
  GKE taints the nodes cloud.google.com/gke-queued=true:NoSchedule but does not label them: the
  pool sets the label cloud.google.com/gke-queued=true itself (components/gke/provisioning.py, as
  Cluster Toolkit's gke-node-pool module does), and the pool's flavor selects that label and
  tolerates the taint. GKE labels flex-start nodes cloud.google.com/gke-flex-start=true (Cluster
  Toolkit's examples/gke-consumption-options select it); the flavor does not need it.
- reservation: the nodes consume only the named specific reservation (reservation affinity
  SPECIFIC_RESERVATION, key compute.googleapis.com/reservation-name); a shared reservation of
  another project is named projects/<project>/reservations/<name>. How many VMs it holds is not
  known offline: render warns, and the check models the pool at its autoscaling maximum.

How Kueue retries a flex-start job whose ProvisioningRequest fails (GKE answers Failed, or the
booking expires or its capacity is revoked before the pods start): queues.flexStartRetry
(FlexStartRetry), written out in the ProvisioningRequestConfig's spec.retryStrategy
(components/queues/provisioning.py). Kueue requeues the workload after about base x 2^(n-1) s
(capped at the max) and, after backoffLimitCount failures, deactivates it (spec.active false: it
never runs until someone reactivates it). Waiting for capacity is no failure: the request stays
pending. The defaults are Kueue 0.19.2's own (3, 60 s, 1800 s), written out so the choice is seen.

Refused here, naming the key: reservation without a name, a reservation name (or project) on a pool
that is not provisioning reservation, flexStart without queues.enabled, flexStart with minNodes
above 0 or with spot.
"""

from __future__ import annotations

import enum
import re

from pydantic import Field

from config.fields import Model
from config.scheduling_contract import GKE_QUEUED_TAINT

# Queued-provisioning nodes: GKE's NoSchedule taint of this key, and the label (true) the pool sets itself.
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


def flex_start_flavor_name(pool_name: str) -> str:
    return f"{pool_name}{FLEX_START_FLAVOR_SUFFIX}"


def is_queued_flavor(node_labels: dict[str, str]) -> bool:
    """A flavor of a flexStart pool (its nodes come through a ProvisioningRequest)."""
    return node_labels.get(GKE_QUEUED_LABEL) == "true"


class FlexStartRetry(Model):
    """Kueue's ProvisioningRequestConfig.spec.retryStrategy for the flex-start pools (int32 fields)."""

    backoff_limit_count: int = Field(
        default=3, ge=0, le=20,
        description="Failed ProvisioningRequests Kueue retries before it deactivates the job's workload (0: none; "
                    "the workload is deactivated at the first failure).")
    backoff_base_seconds: int = Field(
        default=60, ge=1, le=3600, description="The first retry's delay; each later one doubles it.")
    backoff_max_seconds: int = Field(
        default=1800, ge=1, le=86400,
        description="The longest delay between retries; at least backoffBaseSeconds.")

    def retry_strategy(self) -> dict[str, int]:
        return {"backoffLimitCount": self.backoff_limit_count, "backoffBaseSeconds": self.backoff_base_seconds,
                "backoffMaxSeconds": self.backoff_max_seconds}
