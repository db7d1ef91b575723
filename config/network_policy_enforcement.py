"""Who enforces the NetworkPolicies the program writes (training default-deny, DNS, job peers, data
egress; the GPU health service's ingress), per platform, and the warning when nobody does.

A NetworkPolicy is only an API object: the pod network enforces it, or it is ignored ("Creating a
NetworkPolicy resource without a controller that implements it will have no effect", the
Kubernetes docs). Each platform's choice, and its default:

- lab, `gpu-cluster:cni` (config/lab.py): calico (default) enforces them; flannel does not.
- gke, `gpu-cluster:gke.dataplane`: v2 (default), GKE Dataplane V2, whose eBPF dataplane enforces
  them; legacy, GKE's iptables dataplane with no network policy enforcement. GKE fixes it when the
  cluster is created: changing it replaces the cluster.
- dev, `gpu-cluster:clusterCni`: the CNI the existing cluster already runs (the program installs
  none). Plain `minikube start` picks bridge (kindnet with several nodes or another runtime),
  which enforce nothing; `minikube start --cni=calico` (or cilium) does.

`render` prints each stack's `unenforced_warning()` (the three functions below) and writes it to summary.md; it is a warning, not a refusal:
a cluster without enforcement still runs, only without the isolation the policies describe.
"""

from __future__ import annotations

import enum


class Cni(enum.StrEnum):
    FLANNEL = "flannel"
    CALICO = "calico"


class GkeDataplane(enum.StrEnum):
    V2 = "v2"  # GKE Dataplane V2 (ADVANCED_DATAPATH): enforces NetworkPolicy
    LEGACY = "legacy"  # LEGACY_DATAPATH without the network policy add-on: enforces nothing

    @property
    def datapath_provider(self) -> str:
        """The value of the GKE API's (and pulumi-gcp's) datapath_provider."""
        return "ADVANCED_DATAPATH" if self is GkeDataplane.V2 else "LEGACY_DATAPATH"


GKE_DATAPLANE_DESCRIPTION = ("v2 (GKE Dataplane V2, which enforces NetworkPolicies) or legacy (iptables, no "
                             "enforcement). Fixed at cluster creation: changing it replaces the cluster.")


class DevCni(enum.StrEnum):
    """What `minikube start --cni=<value>` installs (minikube's pkg/minikube/cni); minikube-default
    is what it picks without the flag."""

    MINIKUBE_DEFAULT = "minikube-default"
    BRIDGE = "bridge"
    KINDNET = "kindnet"
    FLANNEL = "flannel"
    CALICO = "calico"
    CILIUM = "cilium"


ENFORCING_DEV_CNIS = frozenset({DevCni.CALICO, DevCni.CILIUM})
DEV_CNI_DESCRIPTION = ("The CNI the existing cluster runs (the program installs none): minikube-default (plain "
                       "`minikube start`: bridge or kindnet), bridge, kindnet, flannel, calico or cilium. Only "
                       "calico and cilium are counted as enforcing NetworkPolicies; render warns otherwise.")

_WHAT = ("the NetworkPolicies this program writes (the training namespace's default-deny, DNS, job peers and "
         "data egress; the GPU health service's ingress) are accepted by the API server but not enforced")


def lab_unenforced_warning(cni: Cni) -> str:
    """lab's warning for a pod network that ignores NetworkPolicies, '' when it enforces them."""
    if cni is Cni.FLANNEL:
        return (f"gpu-cluster:cni is flannel: {_WHAT}; set gpu-cluster:cni: calico for a new cluster "
                "(docs/network-policies.md; a running cluster's CNI is not changed in place)")
    return ""


def gke_unenforced_warning(dataplane: GkeDataplane) -> str:
    if dataplane is GkeDataplane.LEGACY:
        return (f"gpu-cluster:gke.dataplane is legacy: {_WHAT}; gke.dataplane: v2 (the default) enforces them, "
                "and replaces the cluster (docs/network-policies.md)")
    return ""


def dev_unenforced_warning(cni: DevCni) -> str:
    if cni not in ENFORCING_DEV_CNIS:
        return (f"gpu-cluster:clusterCni is {cni.value}: {_WHAT}; start minikube with "
                "`--cni=calico` and set gpu-cluster:clusterCni: calico (docs/getting-started/dev.md)")
    return ""
