"""What a GPU pool's node hardware sets on GKE's node pool (config/gke_pool_hardware.py says why):
the boot disk type (the machine family's default unless the pool names one), the local SSDs the
machine comes with as the node's ephemeral storage, and compact placement.

Local SSD: ephemeral_storage_local_ssd_config.local_ssd_count is the count the machine type comes
with (config/gcp/machine_storage.py), as Google's Cluster Toolkit gke-node-pool module sets it; GKE
then puts emptyDir, container images and logs on them (Google, "About local SSDs for GKE",
cloud.google.com/kubernetes-engine/docs/concepts/local-ssd) instead of the boot disk.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi_gcp as gcp

from config.gcp.machine_storage import BUNDLED_LOCAL_SSDS
from config.gke_pool_hardware import boot_disk_type
from config.gke_pools import GpuPool


@dataclass(frozen=True)
class PoolHardware:
    disk_type: str
    ephemeral_storage: gcp.container.NodePoolNodeConfigEphemeralStorageLocalSsdConfigArgs | None
    placement_policy: gcp.container.NodePoolPlacementPolicyArgs | None


def pool_hardware(pool: GpuPool) -> PoolHardware:
    local_ssds = BUNDLED_LOCAL_SSDS.get(pool.machine_type)
    return PoolHardware(
        disk_type=boot_disk_type(pool),
        ephemeral_storage=None if local_ssds is None else
        gcp.container.NodePoolNodeConfigEphemeralStorageLocalSsdConfigArgs(local_ssd_count=local_ssds),
        placement_policy=gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT") if pool.compact_placement else None,
    )
