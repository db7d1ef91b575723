"""The namespaces GKE owns in a cluster: a gke stack never creates one of them for a team.

GKE creates these for its own components, reconciles and upgrades what is in them, and on
Autopilot (and for Autopilot workloads in a Standard cluster) refuses writes there: "GKE Warden
authz [denied by managed-namespaces-limitation]: the namespace ... is managed" (the error as users
report it, e.g. gitlab-org/charts/gitlab#5007 for kube-system); the GKE API's
clusterPolicyConfig.noSystemMutation "prevents creation and mutation of resources in GKE managed
namespaces". Google publishes no single list that we found, so this one is assembled from:
  - kube-system, kube-public, kube-node-lease, default: Kubernetes' own (config/queues.py reserves
    them on every platform too);
  - gmp-system and gmp-public: Managed Service for Prometheus, on by default on GKE ("GKE creates the
    gmp-system namespace: do not modify or deploy anything in it; gmp-public holds the
    OperatorConfig": https://cloud.google.com/kubernetes-engine/multi-cloud/docs/azure/how-to/managed-service-prometheus,
    and the operator's manifest, GoogleCloudPlatform/prometheus-engine manifests/operator.yaml);
    gke-gmp-system, its managed collection's own;
  - gke-managed-*: every namespace GKE names so (gke-managed-system, gke-managed-cim,
    gke-managed-filestorecsi, gke-managed-parallelstorecsi, gke-managed-volumepopulator, ... as
    `kubectl get namespaces` lists them on a new Autopilot cluster; the set grows with GKE's
    add-ons, hence the prefix);
  - gke-connect (the Connect agent of fleet registration), gke-mcs (multi-cluster Services),
    config-management-system and config-management-monitoring (Config Sync), gke-system.
"""

from __future__ import annotations

from config.errors import Problems
from config.queues import RESERVED_NAMESPACES, QueuesConfig

GKE_MANAGED_NAMESPACES = frozenset({
    "kube-system", "kube-public", "kube-node-lease", "default", "gmp-system", "gmp-public", "gke-gmp-system",
    "gke-connect", "gke-mcs", "gke-system", "config-management-system", "config-management-monitoring",
})
GKE_MANAGED_PREFIX = "gke-managed-"


def gke_managed(namespace: str) -> bool:
    """Whether GKE owns `namespace` (the list above, or the gke-managed- prefix)."""
    return namespace in GKE_MANAGED_NAMESPACES or namespace.startswith(GKE_MANAGED_PREFIX)


def team_namespace_problems(queues: QueuesConfig) -> Problems:
    """GkeStack's part of the team checks: no team namespace is one of GKE's (those the program or
    Kubernetes owns are refused on every platform by config/queues.py)."""
    if not queues.enabled:
        return []
    return [(f"queues.teams[{i}].namespace",
             f"{t.namespace!r} is one of GKE's own namespaces (GKE runs its components there, reconciles them "
             "and on Autopilot refuses writes: config/gcp/managed_namespaces.py); not "
             f"{', '.join(sorted(GKE_MANAGED_NAMESPACES - RESERVED_NAMESPACES))} nor {GKE_MANAGED_PREFIX}*: "
             f"give the team a namespace of its own, e.g. 'team-{t.name}'")
            for i, t in enumerate(queues.teams) if t.namespace not in RESERVED_NAMESPACES and gke_managed(t.namespace)]
