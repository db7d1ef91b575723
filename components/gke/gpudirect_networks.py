"""GpuDirectNetworks: the VPCs and subnets of the GPU NICs of the gke stack's GPUDirect pools, as
Google's Cluster Toolkit blueprints create them (config/gcp/gpudirect.py has the facts and sources).

TCPXO (a3-megagpu-8g): 8 VPCs `<cluster>-gpunet-<i>`, MTU 8244, one subnet each (a /20 of
  192.168.0.0/16) and a firewall rule letting the GPU range in (tcp, udp, icmp: the GKE TCPX page's
  `gcloud compute firewall-rules create ... --source-ranges=192.168.0.0/16`; modules/network/multivpc).
TCPX (a3-highgpu-8g): the same with 4 VPCs (examples/gke-a3-highgpu: multivpc network_count 4, MTU
  8244). With TCPXO pools in the same stack, TCPX pools attach to TCPXO's first four VPCs: the same
  names, k8s networks vpc1..vpc4 and ranges, so one set serves both.
RDMA (a3-ultragpu-8g, a4-highgpu-8g): the second gVNIC's VPC `<cluster>-net-1` (192.168.64.0/18, its
  firewall rule) and one RoCE VPC `<cluster>-rdma-net` with the zone's `<zone>-vpc-roce` network
  profile, MTU 8896, regional routing, 8 subnets cut from 192.168.128.0/18 (examples/gke-a3-ultragpu,
  modules/network/gpu-rdma-vpc: no firewall rule there).

`node_network_configs(kind)` is what a pool of that family lists in
network_config.additional_node_network_configs (gVNIC first, then the GPU subnets, in the order
the blueprints concatenate them); `subnets(kind)` the (network, subnet, k8s network name) triples the
Kubernetes Network objects point at.

Does not manage: the cluster's own VPC (gke.network), Cloud NAT.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from config.gcp.gpudirect import GPUDIRECT, GpuDirect, GpuDirectKind, roce_network_profile

# The blueprints allow the whole 192.168.0.0/16 into each GPU VPC (TCPX page, multivpc firewall_rules).
GPU_SOURCE_RANGE = "192.168.0.0/16"


@dataclass(frozen=True)
class GpuDirectNetworksArgs:
    project: str
    region: str
    cluster_name: str
    kinds: tuple[GpuDirectKind, ...]  # the families the stack's pools use (each supported)
    rdma_zone: str | None = None  # RDMA: the one zone of its pools (config/gke_gpudirect.py)


@dataclass(frozen=True)
class Attached:
    """One additional node network: its VPC, subnet and the Kubernetes network name pods use."""

    network: str
    subnet: str
    k8s_name: str
    device_mode: str  # GKENetworkParamSet.spec.deviceMode


def planned(cluster_name: str, g: GpuDirect) -> list[Attached]:
    """The networks of one family, in node-pool order (names as the blueprints make them)."""
    if g.kind is GpuDirectKind.RDMA:
        assert g.extra_gvnic_network is not None
        gvnic = Attached(f"{cluster_name}-net-1", f"{cluster_name}-sub-1", g.extra_gvnic_network, "NetDevice")
        return [gvnic, *(Attached(f"{cluster_name}-rdma-net", f"{cluster_name}-rdma-sub-{i}", name, g.device_mode)
                         for i, name in enumerate(g.k8s_networks))]
    return [Attached(f"{cluster_name}-gpunet-{i}", f"{cluster_name}-gpunet-{i}-subnet", name, g.device_mode)
            for i, name in enumerate(g.k8s_networks)]


class GpuDirectNetworks(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuDirectNetworksArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gke:GpuDirectNetworks", name, None, opts)
        self._args = args
        # Per family, in node-pool order: each additional network's VPC and subnet.
        self.subnetworks: dict[GpuDirectKind, list[tuple[gcp.compute.Network, gcp.compute.Subnetwork]]] = {}
        self.resources: list[pulumi.Resource] = []
        # VPC name -> its network and subnet, so a VPC two families name alike is made once.
        self._made: dict[str, tuple[gcp.compute.Network, gcp.compute.Subnetwork]] = {}
        for kind in sorted(args.kinds, key=lambda k: -GPUDIRECT[k].gpu_nics):  # TCPXO's 8 before TCPX's 4
            self.subnetworks[kind] = self._family(GPUDIRECT[kind])
        self.register_outputs({"kinds": [k.value for k in args.kinds],
                               "subnets": {k.value: [a.subnet for a in self.attached(k)] for k in args.kinds}})

    def attached(self, kind: GpuDirectKind) -> list[Attached]:
        return planned(self._args.cluster_name, GPUDIRECT[kind])

    def node_network_configs(self, kind: GpuDirectKind) -> list[gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs]:
        """network_config.additional_node_network_configs of a pool of this family."""
        # By name, as the Toolkit's multivpc and gpu-rdma-vpc modules hand them to gke-node-pool.
        return [gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(network=n.name, subnetwork=s.name)
                for n, s in self.subnetworks[kind]]

    def _vpc(self, name: str, mtu: int, profile: str | None = None) -> gcp.compute.Network:
        network = gcp.compute.Network(
            name, name=name, project=self._args.project, auto_create_subnetworks=False, mtu=mtu,
            routing_mode="REGIONAL" if profile else None, network_profile=profile,
            opts=pulumi.ResourceOptions(parent=self))
        self.resources.append(network)
        return network

    def _subnet(self, name: str, network: gcp.compute.Network, cidr: str) -> gcp.compute.Subnetwork:
        subnet = gcp.compute.Subnetwork(
            name, name=name, project=self._args.project, region=self._args.region, network=network.id,
            ip_cidr_range=cidr, opts=pulumi.ResourceOptions(parent=self))
        self.resources.append(subnet)
        return subnet

    def _firewall(self, network_name: str, network: gcp.compute.Network) -> None:
        self.resources.append(gcp.compute.Firewall(
            f"{network_name}-internal", name=f"{network_name}-internal", project=self._args.project,
            network=network.id, source_ranges=[GPU_SOURCE_RANGE],
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["0-65535"]),
                    gcp.compute.FirewallAllowArgs(protocol="udp", ports=["0-65535"]),
                    gcp.compute.FirewallAllowArgs(protocol="icmp")],
            opts=pulumi.ResourceOptions(parent=self)))

    def _family(self, g: GpuDirect) -> list[tuple[gcp.compute.Network, gcp.compute.Subnetwork]]:
        wanted, ranges = self.attached(g.kind), g.subnet_ranges()
        subnets: list[tuple[gcp.compute.Network, gcp.compute.Subnetwork]] = []
        if g.kind is GpuDirectKind.RDMA:
            assert g.extra_gvnic_range is not None and self._args.rdma_zone is not None
            gvnic = wanted[0]
            net = self._vpc(gvnic.network, g.mtu)
            self._firewall(gvnic.network, net)
            subnets.append((net, self._subnet(gvnic.subnet, net, str(g.extra_gvnic_range))))
            roce = self._vpc(wanted[1].network, g.mtu, roce_network_profile(self._args.project, self._args.rdma_zone))
            subnets += [(roce, self._subnet(a.subnet, roce, str(cidr))) for a, cidr in zip(wanted[1:], ranges, strict=True)]
            return subnets
        for a, cidr in zip(wanted, ranges, strict=True):
            if a.network not in self._made:
                net = self._vpc(a.network, g.mtu)
                self._firewall(a.network, net)
                self._made[a.network] = (net, self._subnet(a.subnet, net, str(cidr)))
            subnets.append(self._made[a.network])
        return subnets
