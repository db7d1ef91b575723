"""The one table of Compute Engine GPU machine types: one row per accelerator-optimized machine type
(its GPUs, vCPUs, memory, GPU NICs, whether GKE labels its nodes with their physical place), each row
citing where Google states it. The gke config accepts a GPU pool's machine type only from here (or
n1 with attachable GPUs, sized by formula: config/gcp/machine_shapes.py), so no accepted GPU machine
goes without a size; the Inventory (config/inventory.py), the queues' quota checks and the check's
node model (render/cluster/nodes.py) all read it.

Imports nothing of the project: the floor of config/.
"""

from __future__ import annotations

from dataclasses import dataclass

# Where the rows come from (Google's pages; the Cluster Toolkit's modules/internal/gpu-definition
# maps each machine type to its accelerator and count the same way).
ACCELERATOR_OPTIMIZED = ("Google, 'Accelerator-optimized machine family', "
                         "cloud.google.com/compute/docs/accelerator-optimized-machines")
GKE_TOPOLOGY = ("Google, 'Schedule GKE workloads with Topology Aware Scheduling', cloud.google.com/ai-hypercomputer/"
                "docs/workloads/schedule-gke-workloads-tas ('Topology of GKE nodes on A4 and A3 Ultra VMs')")


@dataclass(frozen=True)
class GpuMachine:
    """One accelerator-optimized machine type, as Google states it."""

    name: str
    accelerator: str  # the Compute Engine accelerator type (config/gcp/accelerators.py)
    gpus: int
    vcpus: int
    memory_gb: float  # Compute Engine's "GB" of instance memory, which it means as GiB
    source: str
    # NICs for GPU traffic (GPUDirect-TCPX/-TCPXO or RoCE), beside the host's own; None: not stated.
    gpu_nics: int | None = None
    # GKE writes cloud.google.com/gce-topology-block/-subblock/-host on its nodes (from a reservation).
    topology_labelled: bool = False
    # Its GPU network on GKE (config/gcp/gpudirect.py GpuDirectKind: tcpx, tcpxo, rdma); None: none.
    gpudirect: str | None = None


def _a2() -> tuple[GpuMachine, ...]:
    high = tuple(GpuMachine(f"a2-highgpu-{n}g", "nvidia-tesla-a100", n, 12 * n, 85.0 * n, ACCELERATOR_OPTIMIZED)
                 for n in (1, 2, 4, 8))
    ultra = tuple(GpuMachine(f"a2-ultragpu-{n}g", "nvidia-a100-80gb", n, 12 * n, 170.0 * n, ACCELERATOR_OPTIMIZED)
                  for n in (1, 2, 4, 8))
    return (*high, GpuMachine("a2-megagpu-16g", "nvidia-tesla-a100", 16, 96, 1360.0, ACCELERATOR_OPTIMIZED), *ultra)


def _a3_high() -> tuple[GpuMachine, ...]:
    return tuple(GpuMachine(f"a3-highgpu-{n}g", "nvidia-h100-80gb", n, 26 * n, 234.0 * n, ACCELERATOR_OPTIMIZED,
                            gpu_nics=4 if n == 8 else None, gpudirect="tcpx" if n == 8 else None)
                 for n in (1, 2, 4, 8))


def _g2() -> tuple[GpuMachine, ...]:
    gpus = {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8}
    return tuple(GpuMachine(f"g2-standard-{cpus}", "nvidia-l4", n, cpus, 4.0 * cpus, ACCELERATOR_OPTIMIZED)
                 for cpus, n in gpus.items())


GPU_MACHINES: dict[str, GpuMachine] = {m.name: m for m in (
    *_a2(),
    *_a3_high(),
    GpuMachine("a3-megagpu-8g", "nvidia-h100-mega-80gb", 8, 208, 1872.0, ACCELERATOR_OPTIMIZED, gpu_nics=8,
               gpudirect="tcpxo"),
    # A3 Edge: the a3-highgpu-8g shape (8 H100 80GB, 208 vCPUs, 1,872 GB) for serving in the regions that
    # offer it. Its GPU network is GPUDirect-TCPX (Compute Engine, "Networking and GPU machines",
    # cloud.google.com/compute/docs/gpus/gpu-network-bandwidth, read from two mirrors on 2026-11-28,
    # movatter.jp and dudasite.com), but its bandwidth differs between the two versions (600 and
    # 800 Gbps), its NIC count was not read and GKE's TCPX page was not read for it: gpu_nics and
    # gpudirect stay None (no GPUDirect planned on it), and its local SSDs are not given to GKE
    # (config/gcp/machine_storage.py).
    GpuMachine("a3-edgegpu-8g", "nvidia-h100-80gb", 8, 208, 1872.0, ACCELERATOR_OPTIMIZED),
    # A3 Ultra and A4: one machine type each, 8 GPUs with one ConnectX-7 RoCE NIC per GPU; Google labels
    # their GKE nodes with their place in a reservation. Not A4X (a4x-highgpu-4g, GB200): Arm (Grace)
    # hosts, and nothing of this program's node software (driver installer, images) is checked on arm64.
    GpuMachine("a3-ultragpu-8g", "nvidia-h200-141gb", 8, 224, 2952.0, f"{ACCELERATOR_OPTIMIZED}; {GKE_TOPOLOGY}",
               gpu_nics=8, topology_labelled=True, gpudirect="rdma"),
    GpuMachine("a4-highgpu-8g", "nvidia-b200", 8, 224, 3968.0, f"{ACCELERATOR_OPTIMIZED}; {GKE_TOPOLOGY}",
               gpu_nics=8, topology_labelled=True, gpudirect="rdma"),
    *_g2(),
)}

# The machine types whose GKE nodes carry Google's topology labels (a reservation's block, sub-block, host).
TOPOLOGY_LABELLED = tuple(m.name for m in GPU_MACHINES.values() if m.topology_labelled)

# GPU machine families refused with the reason (config/gcp/accelerators.py), not planned silently. A4X
# needs none here: without a row it is refused with the machine types this program knows (see above).
# G4: Google's Cluster Toolkit (GoogleCloudPlatform/cluster-toolkit@1047080375afbb44da4b596be314634e7486af4a,
# pkg/config/machine_mappings.json and hardware.go) gives its accelerator (nvidia-rtx-pro-6000) and GPUs
# per type (g4-standard-48/96/192/384: 1/2/4/8; -6/-12/-24 are vGPU fractions), and examples/gke-g4/
# README.md needs GKE 1.32.11-gke.1174000 or later; its memory and disks were not read from a Google
# page, and a row without memory has no size: still refused.
REFUSED_FAMILIES: dict[str, str] = {
    "g4": ("G4 (g4-standard-*, NVIDIA RTX PRO 6000) has no row in this program's machine table: its accelerator "
           "(nvidia-rtx-pro-6000) and GPUs per type are in Google's Cluster Toolkit, but its memory and boot disks "
           "were not confirmed against Google's pages, and a row without memory has no size (add its rows to "
           "config/gcp/machines.py and config/gcp/machine_storage.py citing them); use g2-standard-* (L4) or an "
           "a2/a3/a4 type"),
}
