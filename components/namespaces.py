"""Namespaces with the Pod Security Admission level their workloads need, made one way everywhere."""

from __future__ import annotations

from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

PodSecurityLevel = Literal["privileged", "baseline", "restricted"]


def pod_security_namespace(
    resource_name: str, name: str, level: PodSecurityLevel, opts: pulumi.ResourceOptions
) -> k8s.core.v1.Namespace:
    """A Namespace whose Pod Security level is enforced; callers say in a comment why not stricter."""
    return k8s.core.v1.Namespace(
        resource_name,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, labels={"pod-security.kubernetes.io/enforce": level}),
        opts=opts,
    )
