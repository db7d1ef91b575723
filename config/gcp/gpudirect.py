"""GPUDirect per machine family, as Google documents it: which GPU network each A3/A4 machine type
takes on GKE (TCPX, TCPXO, RDMA over gIB), its NICs, VPCs, MTU, the Kubernetes network names its
pods attach to, and the documented bandwidth the NCCL acceptance threshold follows.

Sources (each fact below names one):
- Compute Engine, 'Networking and GPU machines', cloud.google.com/compute/docs/gpus/gpu-network-bandwidth
  (NICs and bandwidth: A3 High 4 GPU NICs, 1,000 Gbps in all; A3 Mega 8, 1,800 Gbps; A3 Ultra and A4
  eight CX-7 NICs, 3,200 Gbps for GPU to GPU, plus two gVNICs).
- GKE, 'Maximize GPU network bandwidth with GPUDirect-TCPX and multi-networking',
  cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx, and 'with GPUDirect RDMA',
  cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom.
- Cluster Toolkit (GoogleCloudPlatform/cluster-toolkit at 1047080375afbb44da4b596be314634e7486af4a):
  examples/gke-a3-megagpu/gke-a3-megagpu.yaml (8 GPU VPCs, MTU 8244, 192.168.0.0/16 in /20s, k8s
  networks vpc1..vpc8), examples/gke-a3-ultragpu/gke-a3-ultragpu.yaml and examples/gke-a4/gke-a4.yaml
  (one extra gVNIC VPC 192.168.64.0/18, one RoCE VPC with the zone's `<zone>-vpc-roce` network
  profile and 8 subnets in 192.168.128.0/18, MTU 8896: modules/network/gpu-rdma-vpc, modules/network/vpc
  defaults), modules/scheduler/gke-cluster (GKENetworkParamSet deviceMode NetDevice or RDMA; k8s network
  names gvnic-1, rdma-0..7), modules/compute/gke-node-pool/gpu_direct.tf (TCPX: 4 networks, TCPXO: 8),
  examples/gke-a3-highgpu/gke-a3-highgpu.yaml (TCPX: 4 GPU VPCs, MTU 8244, /20 subnets; the blueprint
  carves them from 192.169.0.0/16 because that blueprint creates its node subnet as 192.168.0.0/18;
  here the nodes stay on gke.network (the default VPC's ranges are in 10.128.0.0/9), so TCPX keeps
  the A3 Mega blueprint's 192.168.0.0/16 and its firewall source range).

Imports only the machine table.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass

from config.gcp.machines import GPU_MACHINES

BANDWIDTH_PAGE = "cloud.google.com/compute/docs/gpus/gpu-network-bandwidth"
TOOLKIT = "GoogleCloudPlatform/cluster-toolkit@1047080375afbb44da4b596be314634e7486af4a"


class GpuDirectKind(enum.StrEnum):
    TCPX = "tcpx"  # A3 High: GPUDirect-TCPX
    TCPXO = "tcpxo"  # A3 Mega: GPUDirect-TCPXO
    RDMA = "rdma"  # A3 Ultra, A4: GPUDirect RDMA over RoCE, NCCL's gIB plugin


@dataclass(frozen=True)
class GpuDirect:
    """One family's GPU network on GKE."""

    kind: GpuDirectKind
    gpu_nics: int  # NICs for GPU to GPU traffic, one k8s network and one subnet each
    nic_gbps: int  # each GPU NIC's rate (BANDWIDTH_PAGE)
    mtu: int  # of the GPU VPCs (the Toolkit's blueprints)
    gpu_range: ipaddress.IPv4Network  # the GPU subnets are carved from it (the Toolkit's blueprints)
    # Kubernetes network names (Network and GKENetworkParamSet) of the GPU NICs, in NIC order.
    k8s_networks: tuple[str, ...]
    # RDMA: the second gVNIC's network (its own VPC, not GPU traffic; the Toolkit names it gvnic-1).
    extra_gvnic_network: str | None = None
    extra_gvnic_range: ipaddress.IPv4Network | None = None
    # Why the program does not build it yet; None: it does.
    unsupported: str | None = None

    @property
    def gpu_gbps(self) -> int:
        """The GPU network of one node (what the NCCL acceptance threshold follows)."""
        return self.gpu_nics * self.nic_gbps

    @property
    def device_mode(self) -> str:
        """GKENetworkParamSet.spec.deviceMode of the GPU networks (modules/scheduler/gke-cluster)."""
        return "RDMA" if self.kind is GpuDirectKind.RDMA else "NetDevice"

    def subnet_ranges(self) -> tuple[ipaddress.IPv4Network, ...]:
        """One range per GPU NIC: TCPX/TCPXO a /20 each of 192.168.0.0/16 (multivpc's
        subnetwork_cidr_suffix 20); RDMA 192.168.128.0/18 cut into 8 (gpu-rdma-vpc's cidrsubnet)."""
        bits = (self.gpu_nics - 1).bit_length()
        prefix = 20 if self.kind is not GpuDirectKind.RDMA else self.gpu_range.prefixlen + bits
        return tuple(list(self.gpu_range.subnets(new_prefix=prefix))[:self.gpu_nics])

    def pod_interfaces(self) -> list[dict[str, str]]:
        """networking.gke.io/interfaces of a pod: eth0 on the default network, then the GPU NICs
        (TCPXO eth1..eth8 on vpc1..vpc8; RDMA eth2..eth9 on rdma-0..rdma-7, eth1 being the gVNIC's:
        Google's nccl-test manifests of container-engine-accelerators gpudirect-tcpxo/ and gpudirect-rdma/)."""
        first = 2 if self.extra_gvnic_network else 1
        return [{"interfaceName": "eth0", "network": "default"},
                *({"interfaceName": f"eth{first + i}", "network": name} for i, name in enumerate(self.k8s_networks))]


_TCPX_RANGE = ipaddress.IPv4Network("192.168.0.0/16")

GPUDIRECT: dict[GpuDirectKind, GpuDirect] = {
    GpuDirectKind.TCPX: GpuDirect(
        GpuDirectKind.TCPX, gpu_nics=4, nic_gbps=200, mtu=8244, gpu_range=_TCPX_RANGE,
        # 4 GPU VPCs of MTU 8244, k8s networks vpc1..vpc4 (Cluster Toolkit examples/gke-a3-highgpu/
        # gke-a3-highgpu.yaml: multivpc network_count 4, mtu 8244, subnetwork_cidr_suffix 20;
        # gpu_direct.tf min_additional_networks 4); its pods' side: components/training/gpudirect_pod.py.
        k8s_networks=tuple(f"vpc{i}" for i in range(1, 5))),
    GpuDirectKind.TCPXO: GpuDirect(
        GpuDirectKind.TCPXO, gpu_nics=8, nic_gbps=200, mtu=8244, gpu_range=_TCPX_RANGE,
        k8s_networks=tuple(f"vpc{i}" for i in range(1, 9))),
    GpuDirectKind.RDMA: GpuDirect(
        GpuDirectKind.RDMA, gpu_nics=8, nic_gbps=400, mtu=8896,
        gpu_range=ipaddress.IPv4Network("192.168.128.0/18"),
        k8s_networks=tuple(f"rdma-{i}" for i in range(8)),
        extra_gvnic_network="gvnic-1", extra_gvnic_range=ipaddress.IPv4Network("192.168.64.0/18")),
}

# Machine type -> its GPU network, from the machine table (BANDWIDTH_PAGE's table: TCPX, TCPXO,
# GPUDirect RDMA).
MACHINE_GPUDIRECT: dict[str, GpuDirectKind] = {
    m.name: GpuDirectKind(m.gpudirect) for m in GPU_MACHINES.values() if m.gpudirect is not None}


def roce_network_profile(project: str, zone: str) -> str:
    """The RoCE VPC's network profile (one per zone; gke-a3-ultragpu.yaml: <zone>-vpc-roce)."""
    return f"projects/{project}/global/networkProfiles/{zone}-vpc-roce"
