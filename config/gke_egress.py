"""How a private gke cluster's nodes reach the internet (gke.privateNodes.egress).

Private nodes have internal IP addresses only (GKE, "About network isolation":
cloud.google.com/kubernetes-engine/docs/concepts/network-isolation): without a NAT they reach
Google's APIs and Artifact Registry through Private Google Access, which GKE turns on for the
cluster's subnet, but nothing on the internet. Every chart this program installs pulls from public
registries (nvcr.io, registry.k8s.io, quay.io, docker.io: components/versions.py), so a private
cluster without egress plans its add-ons but never runs them. Two ways, one of which a private
cluster must take:

- cloudNat (the default): the program creates a Cloud Router and a Cloud NAT gateway on gke.network in
  gcp:region (components/gke/cloud_nat.py), as Google's Cloud NAT GKE example does ("gcloud compute
  routers nats create ... --auto-allocate-nat-external-ips --nat-all-subnet-ip-ranges",
  cloud.google.com/nat/docs/gke-example) and Cluster Toolkit's network/vpc module does for every
  blueprint (enable_cloud_nat, default true). With gke.subnetwork it translates that subnetwork only
  (all its ranges: nodes, pods, services), else every subnetwork of the network in the region.
- existing: the network already has egress (its own Cloud NAT, a proxy, or Artifact Registry remote
  repositories the images are mirrored to). The program creates nothing; render warns that egress is
  not checked offline. A subnetwork can be served by one NAT gateway only ("Cloud NAT overview":
  cloud.google.com/nat/docs/overview), so where the network has one, cloudNat would fail: existing.

Refused, naming the key: cloudNat on a Shared VPC network or subnetwork (a path in another project):
the router belongs to the host project, which this program does not manage; egress set to anything
but the default on a public cluster (its nodes have external IP addresses: the key does nothing).
"""

from __future__ import annotations

import enum

from config.errors import Problems

EGRESS_DESCRIPTION = ("Private nodes' route to the internet (the charts' public registries): cloudNat (a Cloud Router "
                      "and Cloud NAT created on gke.network in gcp:region) or existing (the network already has "
                      "its NAT or proxy: not checked offline).")


class GkeEgress(enum.StrEnum):
    CLOUD_NAT = "cloudNat"
    EXISTING = "existing"


def nat_names(cluster_name: str) -> tuple[str, str]:
    """The Cloud Router's and the NAT gateway's names: the cluster's name and a suffix (at most 63
    characters; a cluster name has at most 40)."""
    return f"{cluster_name}-nat-router", f"{cluster_name}-nat"


def egress_problems(private: bool, egress: GkeEgress, network: str, subnetwork: str | None) -> Problems:
    key = "gke.privateNodes.egress"
    if not private:
        if egress is not GkeEgress.CLOUD_NAT:
            return [(key, "does nothing with gke.privateNodes.enabled false: public nodes reach the internet "
                          "through their own external IP addresses")]
        return []
    shared = [k for k, v in (("gke.network", network), ("gke.subnetwork", subnetwork or "")) if v.startswith("projects/")]
    if egress is GkeEgress.CLOUD_NAT and shared:
        host = (network if shared[0] == "gke.network" else subnetwork or "").split("/")[1]
        return [(key, f"cloudNat creates the Cloud Router in gcp:project, but {shared[0]} is in project {host} "
                      "(Shared VPC): its NAT belongs to the host project; create it there and set egress existing")]
    return []


def egress_warning(private: bool, egress: GkeEgress) -> str:
    """render's warning where the plan relies on egress it does not create."""
    if private and egress is GkeEgress.EXISTING:
        return ("gke.privateNodes.egress existing: the private nodes pull the charts' images from public registries "
                "(nvcr.io, registry.k8s.io, quay.io, docker.io) through the network's own NAT or proxy, which is "
                "not checked offline (`gcloud compute routers nats list --router-region <region>`)")
    return ""
