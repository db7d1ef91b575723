"""One Kubernetes object from a manifest dict, registered exactly as its typed pulumi-kubernetes class would.

The GPU health checks, their pair tests and the RDMA link test build their objects as plain manifests
(validated against the Kubernetes schemas by the whole-cluster check). Handing such a dict to the typed
class (`k8s.batch.v1.CronJob(spec=...)`) makes the Python SDK walk the whole nested spec against the
generated input types before serializing it, key by key (typing.get_origin, unwrap_type): at 128
GPU workers that was a fifth of the program's evaluation, for its 384 CronJobs alone.

`k8s.apiextensions.CustomResource` registers the same type token (`kubernetes:<apiVersion>:<kind>`)
with the same `apiVersion`, `kind`, `metadata` and `spec` properties and the same provider version,
so the engine and the provider receive the same request; what the typed class adds on top is its
aliases (the kind's older API groups, so a stack created before an API moved keeps its objects),
which are added here from the table below. tests/components/test_manifest_resource.py holds the two
registrations equal, field by field, for every kind in the table, against the installed
pulumi-kubernetes.

Only kinds whose manifest is apiVersion/kind/metadata/spec (CustomResource takes nothing else), whose
typed class marks no output secret, and of a named API group are listed: CustomResource builds the
type token from the manifest's apiVersion, `kubernetes:v1:Service` for the core group where the typed
class registers `kubernetes:core/v1:Service` (another URN: a replacement). Anything else stays typed.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

# The aliases each typed class registers (pulumi-kubernetes' generated `_internal_init`).
TYPED_ALIASES: dict[tuple[str, str], tuple[str, ...]] = {
    ("batch/v1", "CronJob"): ("kubernetes:batch/v1beta1:CronJob", "kubernetes:batch/v2alpha1:CronJob"),
    ("batch/v1", "Job"): (),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("kubernetes:extensions/v1beta1:NetworkPolicy",),
    ("apps/v1", "Deployment"): ("kubernetes:apps/v1beta1:Deployment", "kubernetes:apps/v1beta2:Deployment",
                                "kubernetes:extensions/v1beta1:Deployment"),
    ("apps/v1", "DaemonSet"): ("kubernetes:apps/v1beta2:DaemonSet", "kubernetes:extensions/v1beta1:DaemonSet"),
}


def registers_like_typed(body: dict[str, Any]) -> bool:
    """Whether manifest_resource can register `body` as its typed class would."""
    return (str(body.get("apiVersion")), str(body.get("kind"))) in TYPED_ALIASES and set(body) <= {
        "apiVersion", "kind", "metadata", "spec"}


def manifest_resource(name: str, body: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """Register `body` (one of TYPED_ALIASES' kinds) as the typed class would, without its input types."""
    if not registers_like_typed(body):
        raise ValueError(f"{body.get('apiVersion')} {body.get('kind')} {name}: not a kind manifest_resource "
                         "registers like its typed class (components/manifest_resource.py)")
    aliases = TYPED_ALIASES[(body["apiVersion"], body["kind"])]
    if aliases:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
            aliases=[pulumi.Alias(type_=alias) for alias in aliases]))
    return k8s.apiextensions.CustomResource(
        name, api_version=body["apiVersion"], kind=body["kind"], metadata=body["metadata"], spec=body.get("spec"),
        opts=opts)
