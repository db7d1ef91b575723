"""The `training` Namespace, created once per cluster provider.

Shared storage (each platform's claim lives there), the training job, its acceptance test and its
network policies all need it; whichever asks first creates it, the others get the same resource.
Pod Security `baseline`: training images usually run as root (most PyTorch bases do), which
`restricted` forbids, and nothing there needs host access (claims are PersistentVolumeClaims,
not hostPath volumes in the pod).

Does not manage: quotas or limit ranges for the namespace.
"""

from __future__ import annotations

import weakref

import pulumi
import pulumi_kubernetes as k8s

from components.namespaces import pod_security_namespace
from components.storage_contract import TRAINING_NAMESPACE

_CREATED: weakref.WeakKeyDictionary[k8s.Provider, k8s.core.v1.Namespace] = weakref.WeakKeyDictionary()


def training_namespace(
    provider: k8s.Provider, depends_on: list[pulumi.Resource] | None = None
) -> k8s.core.v1.Namespace:
    """The training Namespace of the cluster behind `provider` (registered on the first call)."""
    ns = _CREATED.get(provider)
    if ns is None:
        # baseline, not restricted: the trainer image runs as root (its base image's default).
        ns = pod_security_namespace(
            f"{TRAINING_NAMESPACE}-ns",
            TRAINING_NAMESPACE,
            "baseline",
            pulumi.ResourceOptions(provider=provider, depends_on=depends_on or []),
        )
        _CREATED[provider] = ns
    return ns
