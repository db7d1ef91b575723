"""CloudNat: the Cloud Router and Cloud NAT gateway that give a private gke cluster's nodes a route to
the internet (gke.privateNodes.egress cloudNat; config/gke_egress.py says why and when).

One Router on gke.network in gcp:region and one NAT on it, as Google's Cloud NAT GKE example
(cloud.google.com/nat/docs/gke-example: `gcloud compute routers create` then `gcloud compute routers
nats create --auto-allocate-nat-external-ips --nat-all-subnet-ip-ranges`) and Cluster Toolkit's
modules/network/vpc (a router per region, a NAT on it) create them:
- NAT IP addresses allocated by Google (AUTO_ONLY): no static address to reserve or pay for idle;
- with gke.subnetwork: that subnetwork only, all its ranges (the nodes' primary range and the pods'
  and services' secondary ranges: ALL_IP_RANGES), so the rest of the network keeps its own egress;
  without: every subnetwork of the network in the region (ALL_SUBNETWORKS_ALL_IP_RANGES), since the
  cluster's is then the network's own in the region, whose name the config does not hold;
- NAT errors logged (ERRORS_ONLY): port exhaustion while a pool pulls its images shows in Cloud Logging.

Every in-cluster layer waits for the NAT (stacks/gke.py puts it in the cluster contract's `ready`):
their images come through it.

Does not manage: the network, its subnetworks, firewall rules, or a NAT in a Shared VPC host project.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from config.gke import GkeConfig
from config.gke_egress import nat_names


@dataclass(frozen=True)
class CloudNatArgs:
    gke: GkeConfig
    project: str  # gcp:project
    region: str  # gcp:region


def subnetworks(gke: GkeConfig) -> tuple[str, list[gcp.compute.RouterNatSubnetworkArgs] | None]:
    """source_subnetwork_ip_ranges_to_nat and its subnetworks: the cluster's subnetwork, or all."""
    if gke.subnetwork is None:
        return "ALL_SUBNETWORKS_ALL_IP_RANGES", None
    return "LIST_OF_SUBNETWORKS", [gcp.compute.RouterNatSubnetworkArgs(
        name=gke.subnetwork, source_ip_ranges_to_nats=["ALL_IP_RANGES"])]


class CloudNat(pulumi.ComponentResource):
    router: gcp.compute.Router
    nat: gcp.compute.RouterNat

    def __init__(self, name: str, args: CloudNatArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:gke:CloudNat", name, None, opts)
        router_name, nat_name = nat_names(args.gke.cluster_name)
        self.router = gcp.compute.Router(
            f"{name}-router", name=router_name, project=args.project, region=args.region, network=args.gke.network,
            opts=pulumi.ResourceOptions(parent=self),
        )
        ranges, listed = subnetworks(args.gke)
        self.nat = gcp.compute.RouterNat(
            name,
            name=nat_name,
            project=args.project,
            region=args.region,
            router=self.router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat=ranges,
            subnetworks=listed,
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"router": self.router.name, "nat": self.nat.name})
