"""What a GPU machine type's node boots from and what local SSD it comes with, per machine family.

Beside the machine table (config/gcp/machines.py, which the GPUDirect work edits row by row) so the
two grow without touching each other's rows; tests/config/test_gke_pool_hardware.py holds every
row of the machine table to a row here.

Boot disks. GKE's node boot disk types are pd-balanced (its default since 1.24), pd-standard, pd-ssd
and hyperdisk-balanced (Google, "Configuring a custom boot disk",
cloud.google.com/kubernetes-engine/docs/how-to/custom-boot-disks); Hyperdisk Balanced is the only
Hyperdisk a boot disk can be (Google, "About Hyperdisk Balanced", cloud.google.com/compute/docs/
disks/hd-types/hyperdisk-balanced). Which families take which:
- Hyperdisk Balanced: Google's machine-series table in "About Google Cloud Hyperdisk"
  (cloud.google.com/compute/docs/disks/hyperdisks, "If a machine series doesn't support Hyperdisk,
  use Persistent Disk"; read from a mirror of the page, wiki.agc.wuaze.com, 2026-11-28) lists A4,
  A3 (H200) and A3 (H100) with Hyperdisk Balanced, and N1, N1+GPU and A2 with no Hyperdisk
  Balanced. Hence hyperdisk-balanced is allowed on A3 and A4 and refused on A2 and N1.
- Persistent Disk on A3 Ultra and A4: no Google page read here says in so many words that they
  refuse it (the series' "Supported disk types" in cloud.google.com/compute/docs/
  accelerator-optimized-machines could not be read). What is confirmed: Vertex AI defaults A3 Ultra's
  boot disk to hyperdisk-balanced (cloud.google.com/vertex-ai/docs/reference/rest/v1/DiskSpec), and
  Google's Cluster Toolkit (GoogleCloudPlatform/cluster-toolkit@1047080375afbb44da4b596be314634e7486af4a)
  boots its A3 Ultra and A4 nodes from hyperdisk-balanced (examples/machine-learning/a3-ultragpu-8g/
  a3ultra-slurm-blueprint.yaml, a4-highgpu-8g/a4high-slurm-blueprint.yaml: disk_type
  hyperdisk-balanced over the nodeset's pd-standard default) while its A3 High and Mega nodes boot
  from pd-ssd/pd-balanced (a3high-, a3mega-slurm-blueprint.yaml). So Hyperdisk only on A3 Ultra and
  A4 stays this program's reading: the default there works either way, and a pd-* type is refused.
- pd-standard on A3 High/Mega/Edge and G2's pd-balanced/pd-ssd: not confirmed against a Google
  table in this change (kept from the earlier reading of accelerator-optimized-machines).
Hence the default per family: GKE's own pd-balanced where the family takes it, else hyperdisk-balanced.

Local SSD. Given to GKE as ephemeral storage only where Google's Cluster Toolkit gives the count
(modules/compute/gke-node-pool/disk_definitions.tf at the commit above,
ephemeral_storage_local_ssd_config.local_ssd_count): a3-highgpu-8g and a3-megagpu-8g 16 x 375 GiB,
a3-ultragpu-8g and a4-highgpu-8g 32. Unused they are paid for and idle; as ephemeral storage they
hold the node's emptyDir, container images and logs instead of the boot disk. Not set for
a3-edgegpu-8g (the Toolkit gives no count for it and its row in Google's table could not be read
here: a wrong count makes GKE refuse the pool), the smaller a3-highgpu-1g/2g/4g, a2-ultragpu or g2
types; left out, GKE attaches the machine's local SSD as it comes and keeps ephemeral storage on
the boot disk.

Imports nothing of the project: the floor of config/.
"""

from __future__ import annotations

from dataclasses import dataclass

PD_BALANCED, PD_SSD, PD_STANDARD, HYPERDISK_BALANCED = "pd-balanced", "pd-ssd", "pd-standard", "hyperdisk-balanced"
# Every boot disk type GKE's node pools take (the custom boot disks page).
GKE_BOOT_DISK_TYPES = (PD_BALANCED, PD_SSD, PD_STANDARD, HYPERDISK_BALANCED)

SOURCE = ("Google, 'About Google Cloud Hyperdisk' (cloud.google.com/compute/docs/disks/hyperdisks, machine series "
          "support) and 'Accelerator-optimized machine family' (cloud.google.com/compute/docs/"
          "accelerator-optimized-machines, supported disk types)")


@dataclass(frozen=True)
class FamilyStorage:
    """One machine family's boot disks, as Google states them."""

    family: str  # the machine type's prefix up to the GPU count, e.g. "a3-ultragpu"
    boot_disks: tuple[str, ...]  # in order of preference: the first is the default

    @property
    def default_boot_disk(self) -> str:
        return self.boot_disks[0]


_PD = (PD_BALANCED, PD_SSD, PD_STANDARD)
_H100 = (PD_BALANCED, PD_SSD, HYPERDISK_BALANCED)
_HYPERDISK_ONLY = (HYPERDISK_BALANCED,)

FAMILIES: dict[str, FamilyStorage] = {f.family: f for f in (
    FamilyStorage("a2-highgpu", _PD),
    FamilyStorage("a2-megagpu", _PD),
    FamilyStorage("a2-ultragpu", _PD),
    FamilyStorage("a3-highgpu", _H100),
    FamilyStorage("a3-megagpu", _H100),
    FamilyStorage("a3-edgegpu", _H100),
    FamilyStorage("a3-ultragpu", _HYPERDISK_ONLY),
    FamilyStorage("a4-highgpu", _HYPERDISK_ONLY),
    FamilyStorage("g2-standard", (PD_BALANCED, PD_SSD)),
    FamilyStorage("n1-standard", _PD),
    FamilyStorage("n1-highmem", _PD),
    FamilyStorage("n1-highcpu", _PD),
)}

# Machine type -> the 375 GiB local SSDs it comes with, given to GKE as ephemeral storage (the
# Toolkit's disk_definitions.tf local_ssd_machines, see above).
BUNDLED_LOCAL_SSDS: dict[str, int] = {
    "a3-highgpu-8g": 16,
    "a3-megagpu-8g": 16,
    "a3-ultragpu-8g": 32,
    "a4-highgpu-8g": 32,
}
LOCAL_SSD_GIB = 375


def family_of(machine_type: str) -> str:
    """a3-ultragpu-8g -> a3-ultragpu; n1-standard-8 -> n1-standard; g2-standard-24 -> g2-standard."""
    return machine_type.rsplit("-", 1)[0]


def storage_of(machine_type: str) -> FamilyStorage | None:
    return FAMILIES.get(family_of(machine_type))


def boot_disk_problem(machine_type: str, disk_type: str) -> str | None:
    """Why this machine cannot boot from this disk type; None when it can (or the machine is unknown:
    the machine type's own check reports that)."""
    if disk_type not in GKE_BOOT_DISK_TYPES:
        return f"{disk_type[:40]!r} is not a GKE node boot disk type; allowed: {', '.join(GKE_BOOT_DISK_TYPES)}"
    storage = storage_of(machine_type)
    if storage is None or disk_type in storage.boot_disks:
        return None
    why = " (Hyperdisk only: the family takes no Persistent Disk)" if storage.boot_disks == _HYPERDISK_ONLY else ""
    return (f"{machine_type} cannot boot from {disk_type}{why}; {storage.family} takes "
            f"{', '.join(storage.boot_disks)} ({SOURCE})")
