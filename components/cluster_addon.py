"""Upstream Deployments as cluster add-ons: tolerating the control-plane taint and preferring a
node without GPUs (config/scheduling_contract.py), for manifests and charts whose own pod
spec cannot be given tolerations (the training operator's kustomize overlay, whereabouts'
reconciler). Applied as a Pulumi `transforms` callback to the children of a provider-side
component (kustomize/v2 Directory, helm/v4 Chart); the whole-cluster check applies the same
function to the objects it renders."""

from __future__ import annotations

import copy
from typing import Any

import pulumi

from config.scheduling_contract import addon_affinity, addon_tolerations

DEPLOYMENT_TYPE = "kubernetes:apps/v1:Deployment"


def as_cluster_addon(manifest: dict[str, Any]) -> dict[str, Any]:
    """A copy of a Deployment whose pods tolerate the control-plane taint and prefer a node without
    GPUs (config/scheduling_contract.py); upstream's own tolerations and affinity are kept."""
    manifest = copy.deepcopy(manifest)
    pod = manifest.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    tolerations = list(pod.get("tolerations") or [])
    pod["tolerations"] = tolerations + [t for t in addon_tolerations() if t not in tolerations]
    if not pod.get("affinity"):
        pod["affinity"] = addon_affinity()
    return manifest


def tolerate_control_plane(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """Pulumi transform for the kustomize Directory's children: its Deployment becomes a cluster add-on."""
    if args.type_ != DEPLOYMENT_TYPE:
        return None
    return pulumi.ResourceTransformResult(props=as_cluster_addon(dict(args.props)), opts=args.opts)
