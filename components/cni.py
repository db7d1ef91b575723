"""Cni: the pod network of a kubeadm cluster, as a pinned Helm release.

calico (tigera-operator; the default, as it enforces NetworkPolicies) or flannel (which does not),
both told the cluster's pod CIDR so the overlay matches what kubeadm gave the nodes. The namespace
is created here with the Pod Security level the CNI needs: it runs on the host network with
hostPath mounts, which only `privileged` admits.

calico: since Calico 3.32 the tigera-operator chart ships no CRDs, though its templates create
operator.tigera.io resources (Installation, APIServer, Goldmane, Whisker). The CRDs come first, from
their own chart of the same Calico release (crd.projectcalico.org.v1, CRDs in its templates so
that upgrades update them), as a second pinned Helm release the operator release depends on.
Upstream's docs pipe `helm template` into `kubectl apply --server-side` because some CRDs are too
large for client-side apply's last-applied annotation; Helm creates and patches objects without
that annotation, so a release works. Its Secret holds the whole chart, about 0.9 of its 1 MiB
(tests/components/test_calico_crds.py watches the margin).

Does not manage: network policies (calico enforces them, flannel does not), BGP peering, Calico's
native projectcalico.org/v3 CRDs (tech preview), or changing the backend of a running cluster.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from components.namespaces import pod_security_namespace
from config.chart_source import ChartSource
from config.lab import Cni as CniKind


@dataclass(frozen=True)
class CniArgs:
    kind: CniKind
    pod_cidr: ipaddress.IPv4Network
    charts: ChartSource = ChartSource()  # gpu-cluster:chartsDir: where the charts come from


def flannel_values(pod_cidr: ipaddress.IPv4Network) -> dict[str, Any]:
    return {"podCidr": str(pod_cidr), "flannel": {"backend": "vxlan"}}


def calico_values(pod_cidr: ipaddress.IPv4Network) -> dict[str, Any]:
    # installation.* is the operator's Installation spec, passed through by the chart.
    return {
        "installation": {
            "enabled": True,
            "calicoNetwork": {
                "ipPools": [
                    {
                        "cidr": str(pod_cidr),
                        "encapsulation": "VXLANCrossSubnet",
                        "natOutgoing": "Enabled",
                        "nodeSelector": "all()",
                    }
                ]
            },
        }
    }


_CHARTS = {
    CniKind.FLANNEL: ("kube-flannel", versions.FLANNEL_CHART, versions.FLANNEL_CHART_VERSION,
                      versions.FLANNEL_CHART_REPO, flannel_values),
    CniKind.CALICO: ("tigera-operator", versions.CALICO_CHART, versions.CALICO_CHART_VERSION,
                     versions.CALICO_CHART_REPO, calico_values),
}


def calico_crds(name: str, namespace: str, charts: ChartSource, opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release:
    """Calico's CRDs (cluster-scoped; the release record lives in `namespace`). Helm's wait holds
    the release until every CRD is established, so a release depending on it finds its kinds."""
    return k8s.helm.v3.Release(
        name,
        name="calico-crds",  # upstream's name for it
        **charts.args(versions.CALICO_CRDS_CHART, versions.CALICO_CRDS_CHART_VERSION, versions.CALICO_CRDS_CHART_REPO),
        namespace=namespace,
        timeout=300,
        opts=opts,
    )


class Cni(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    crds: k8s.helm.v3.Release | None  # calico's CRDs; None for flannel

    def __init__(self, name: str, args: CniArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:k8s:Cni", name, None, opts)
        namespace, chart, version, repo, values = _CHARTS[args.kind]
        child = pulumi.ResourceOptions(parent=self)
        # The CNI runs on the host network with hostPath mounts: only privileged admits it.
        ns = pod_security_namespace(f"{name}-ns", namespace, "privileged", child)
        before: list[pulumi.Resource] = [ns]
        self.crds = None
        if args.kind is CniKind.CALICO:
            self.crds = calico_crds(f"{name}-calico-crds", namespace, args.charts,
                                    pulumi.ResourceOptions(parent=self, depends_on=[ns]))
            before.append(self.crds)  # the operator release creates an Installation: CRDs first
        self.release = k8s.helm.v3.Release(
            f"{name}-{args.kind.value}",
            name=args.kind.value,
            **args.charts.args(chart, version, repo),
            namespace=namespace,
            values=values(args.pod_cidr),
            # Nodes are NotReady until the CNI runs; waiting here makes "ready" mean ready.
            wait_for_jobs=True,
            timeout=600,
            opts=pulumi.ResourceOptions(parent=self, depends_on=before),
        )
        self.register_outputs({"kind": args.kind.value, "chartVersion": version})
