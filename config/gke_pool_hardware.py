"""A GPU pool's node hardware that GKE refuses only when it creates the pool: the boot disk, compact
placement and a reservation block (gke.gpuPools[].diskType, .compactPlacement, .reservationBlock).
Checked here, naming the key, before any resource is registered; components/gke/pool_hardware.py
sets them on the node pool.

- diskType: unset means the machine family's default (pd-balanced where the family takes Persistent
  Disk, hyperdisk-balanced on A3 Ultra and A4, which take Hyperdisk only); a type the family cannot
  boot from is refused (config/gcp/machine_storage.py says where each family's list comes from).
- compactPlacement: nodes close together in one zone (NodePool.placement_policy type COMPACT; Google,
  "Define compact placement for GKE nodes", cloud.google.com/kubernetes-engine/docs/how-to/
  compact-placement). Refused as Google's Cluster Toolkit gke-node-pool module refuses it
  (modules/compute/gke-node-pool/main.tf preconditions): on a pool of more than one zone ("only
  available for node pools operating in a single zone"), with blue-green upgrades ("not supported
  with blue-green upgrades") and with flexStart ("placement_policy cannot be COMPACT when
  enable_queued_provisioning is true"). Not checked: the most VMs one compact policy holds, which
  Compute Engine states per machine series; GKE reports a pool that outgrows it when it scales.
- reservationBlock: one block of a specific reservation (A3 Ultra and A4 reservations come in
  blocks of hosts close together). GKE's reservation affinity names it as
  <reservation>/reservationBlocks/<block>, or projects/<project>/reservations/<reservation>/
  reservationBlocks/<block> for a shared one (Cluster Toolkit reservation_definitions.tf and the
  blueprints' "<reservation-name>/reservationBlocks/<reservation-block-name>"): provisioning
  reservation only.
"""

from __future__ import annotations

import re

from config.errors import Problems
from config.gcp.machine_storage import boot_disk_problem, storage_of
from config.gke_pools import GpuPool
from config.gke_provisioning import GkeProvisioning
from config.gke_upgrades import UpgradeStrategy, pool_upgrade_problems

_BLOCK_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def boot_disk_type(pool: GpuPool) -> str:
    """The pool's boot disk type: its own, else its machine family's default (GKE's pd-balanced)."""
    if pool.disk_type is not None:
        return pool.disk_type
    storage = storage_of(pool.machine_type)
    return storage.default_boot_disk if storage else "pd-balanced"


def hardware_problems(key: str, pool: GpuPool) -> Problems:
    """One pool's boot disk, placement, reservation block and upgrade settings; `key` is gke.gpuPools[i]."""
    problems: Problems = []
    if pool.disk_type is not None and (problem := boot_disk_problem(pool.machine_type, pool.disk_type)):
        problems.append((f"{key}.diskType", problem))
    if pool.compact_placement:
        if len(pool.zones) > 1:
            problems.append((f"{key}.compactPlacement", f"compact placement is for a pool in one zone; this pool "
                                                        f"has {len(pool.zones)} ({', '.join(pool.zones)})"))
        if pool.upgrade.strategy is UpgradeStrategy.BLUE_GREEN:
            problems.append((f"{key}.compactPlacement", "compact placement does not take blue-green upgrades; use "
                                                        "upgrade.strategy surge"))
        if pool.provisioning is GkeProvisioning.FLEX_START:
            problems.append((f"{key}.compactPlacement", "a flexStart (queued provisioning) pool cannot be COMPACT: "
                                                        "leave compactPlacement false"))
    if pool.reservation_block is not None:
        if pool.provisioning is not GkeProvisioning.RESERVATION:
            problems.append((f"{key}.reservationBlock", "applies to provisioning reservation only: a block of the "
                                                        f"reservation named in reservation, not {pool.provisioning.value}"))
        if not _BLOCK_NAME.fullmatch(pool.reservation_block):
            problems.append((f"{key}.reservationBlock", f"{pool.reservation_block[:70]!r} is not a reservation block "
                                                        "name (a-z, 0-9, '-'; `gcloud compute reservations blocks list "
                                                        "<reservation> --zone <zone>`)"))
    problems += pool_upgrade_problems(key, pool.upgrade)
    return problems
