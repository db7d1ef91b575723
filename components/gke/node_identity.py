"""Least-privilege node service accounts for GKE node pools.

Nodes run as their own service account with only the roles GKE nodes need (logs, metrics,
resource metadata, pulling images from Artifact Registry), never the Compute Engine default
account (project Editor). Workloads get their own identities through Workload Identity.

Does not manage: roles for workloads, or access to registries in other projects.
"""

from __future__ import annotations

import hashlib

import pulumi
import pulumi_gcp as gcp

NODE_ROLES = (
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
    "roles/artifactregistry.reader",
)


def account_id(*parts: str) -> str:
    """A service account id (6-30 characters, [a-z][-a-z0-9]*[a-z0-9]) unique for these parts."""
    base = "-".join(parts)
    if 6 <= len(base) <= 30:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:6]
    return f"{base[:23].rstrip('-')}-{digest}"


def node_service_account(
    name: str, project: str, ident: str, description: str, parent: pulumi.Resource
) -> tuple[gcp.serviceaccount.Account, list[gcp.projects.IAMMember]]:
    """The account (resource `<name>-sa`) and one IAM member per role in NODE_ROLES."""
    account = gcp.serviceaccount.Account(
        f"{name}-sa",
        account_id=ident,
        display_name=description,
        project=project,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    members = [
        gcp.projects.IAMMember(
            f"{name}-sa-{role.removeprefix('roles/').replace('.', '-').lower()}",
            project=project,
            role=role,
            member=account.email.apply(lambda email: f"serviceAccount:{email}"),
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for role in NODE_ROLES
    ]
    return account, members
