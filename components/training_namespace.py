"""The `training` Namespace: each platform's wiring (stacks/) creates it once and passes it down
in the cluster contract (stacks/contract.py); its shared claim, the training job, its acceptance
test and its network policies all live there.

Pod Security `baseline`: training images usually run as root (most PyTorch bases do), which
`restricted` forbids, and nothing there needs host access (claims are PersistentVolumeClaims,
not hostPath volumes in the pod). With network.roce `privileged`: the pods add IPC_LOCK for RDMA
memory registration, a capability outside baseline's list; still no pod there is privileged.

Does not manage: quotas or limit ranges for the namespace.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.namespaces import pod_security_namespace
from components.storage_contract import TRAINING_NAMESPACE


def training_namespace(
    provider: k8s.Provider, depends_on: list[pulumi.Resource] | None = None, rdma: bool = False
) -> k8s.core.v1.Namespace:
    """Register the training Namespace of the cluster behind `provider` (call it once per stack).
    `rdma`: its pods add IPC_LOCK (components/rdma_network.py), which only `privileged` admits."""
    # baseline, not restricted: the trainer image runs as root (its base image's default).
    return pod_security_namespace(
        f"{TRAINING_NAMESPACE}-ns",
        TRAINING_NAMESPACE,
        "privileged" if rdma else "baseline",
        pulumi.ResourceOptions(provider=provider, depends_on=depends_on or []),
    )
