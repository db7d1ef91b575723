"""NamespacePolicies: the training namespace's default deny and DNS egress
(components/training/network_policy.py has the manifests and why); each job brings its own peer
policy with it.

Does not manage: the namespace itself (the platform's wiring creates it, stacks/contract.py).
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.training import network_policy


class NamespacePolicies(pulumi.ComponentResource):
    """Default deny for the training namespace, plus DNS egress (job peers come with each job)."""

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpucluster:training:NamespacePolicies", name, None, opts)
        manifests = (network_policy.default_deny(), network_policy.allow_dns())
        self.policies = [
            k8s.networking.v1.NetworkPolicy(
                f"{name}-{manifest['metadata']['name']}",
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(parent=self),
            )
            for manifest in manifests
        ]
        self.register_outputs({"policies": [m["metadata"]["name"] for m in manifests]})
