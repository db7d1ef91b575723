"""A team's Role and RoleBinding (components/queues/objects.py) judged by the real API server's RBAC
authorizer (SubjectAccessReview, as the aggregated visibility server asks it for every request):
a member of the team's group may read its LocalQueues' pending workloads through Kueue's visibility
API (visibility.kueue.x-k8s.io, localqueues/pendingworkloads) in the team's namespace only, and not
the ClusterQueues' (every team's)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from components.queues import kueue, objects
from e2e import api

GRANTED_TIMEOUT = 15  # seconds for the RBAC authorizer's informers to see a new RoleBinding


def _allowed(client: api.Client, group: str, attributes: dict[str, Any]) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": "member@example.com", "groups": [group, "system:authenticated"],
                       "resourceAttributes": attributes}}
    return bool(client.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get("allowed"))


def test_a_team_member_reads_its_own_local_queues_pending_workloads_only(client: api.Client, namespace: str) -> None:
    group = f"gpu-team-{uuid.uuid4().hex[:6]}"
    role, binding = objects.team_role(namespace), objects.team_role_binding(namespace, group)
    client.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", role)
    client.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", binding)
    visibility = {"group": kueue.VISIBILITY_API.split("/")[0], "version": kueue.VISIBILITY_API.split("/")[1],
                  "resource": "localqueues", "subresource": "pendingworkloads", "verb": "get", "name": "vision"}
    own = {**visibility, "namespace": namespace}
    deadline = time.monotonic() + GRANTED_TIMEOUT
    while not _allowed(client, group, own) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _allowed(client, group, own)
    assert _allowed(client, group, {**own, "verb": "list", "name": ""})
    assert not _allowed(client, group, {**visibility, "namespace": "default"})  # another namespace's queues
    assert not _allowed(client, group, {**visibility, "resource": "clusterqueues", "name": "vision"})
    assert not _allowed(client, "someone-else", own)
