"""The API server's own pod rules that the schema cannot express (render/cluster/pod_fields.py):
a node field selector takes exactly one value. The NCCL pair check pinned each pod to its pair with
both names in one `metadata.name In`, which kubernetes-validate passed and a real API server
refused at create (tests/e2e/test_pod_fields_real.py holds this model to that server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from render import cluster
from render.cluster.pod_fields import node_field_selector_problems
from tests.components.health.test_nccl_pairs import cronjobs, plan, pod_spec


def affinity(*requirements: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": list(requirements)}]}}}}


def field(operator: str, *values: str, key: str = "metadata.name") -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


# (requirement, accepted by the API server): each is also created on the real one (the e2e test).
CASES = {
    "one name In": (field("In", "gpu-1"), True),
    "one name NotIn": (field("NotIn", "gpu-1"), True),
    "two names In": (field("In", "gpu-1", "gpu-2"), False),
    "no value": (field("In"), False),
    "Exists": (field("Exists"), False),
    "another field": (field("In", "gpu-1", key="metadata.namespace"), False),
}


@pytest.mark.parametrize("case", CASES)
def test_the_rule(case: str) -> None:
    requirement, accepted = CASES[case]
    assert (node_field_selector_problems(affinity(requirement)) == []) is accepted


def test_preferred_terms_are_held_to_it_too() -> None:
    spec = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchFields": [field("In", "a", "b")]}}]}}}
    (problem,) = node_field_selector_problems(spec)
    assert "preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchFields[0].values" in problem


@pytest.mark.parametrize("case", ["lab", "lab-5"])
def test_the_nccl_pair_pods_pass_it_and_still_land_only_on_their_pair(case: str, upstream_dir: Path) -> None:
    for cj in cronjobs(case):
        spec = pod_spec(cj)
        assert node_field_selector_problems(spec) == []
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        pinned = {v for t in terms for f in t["matchFields"] for v in f["values"]}
        assert pinned == set(cj["metadata"]["annotations"]["gpu-cluster.io/nodes"].split(","))
    p = plan(case)
    assert cluster.check(p, p.config, upstream_dir).ok
