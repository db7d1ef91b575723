"""The model of the API server's pod rules (render/cluster/pod_fields.py) against the real API
server: each case of tests/render/test_pod_fields.py is created (server-side dry run) and the
server's verdict must be the model's."""

from __future__ import annotations

from typing import Any

import pytest

from e2e import api
from render.cluster.pod_fields import node_field_selector_problems
from tests.render.test_pod_fields import CASES, affinity


@pytest.mark.parametrize("case", CASES)
def test_the_api_server_agrees_with_the_model(case: str, client: api.Client, namespace: str) -> None:
    requirement, _ = CASES[case]
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fields"},
           "spec": {**affinity(requirement), "containers": [{"name": "main", "image": "registry.example.com/x:1"}]}}
    response = client.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)
    model_accepts = node_field_selector_problems(pod["spec"]) == []
    assert response.ok is model_accepts, f"API server {response.status}: {str(response.body)[:400]}"
    if not response.ok:
        assert response.status == 422
