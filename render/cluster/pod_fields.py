"""Pod rules of the API server's own validation that the OpenAPI schema cannot express, so that
kubernetes-validate passes what a real API server refuses (each found by creating the program's
objects on the e2e control plane).

- A node field selector (`matchFields` of a node affinity term): key `metadata.name`, operator In
  or NotIn, and exactly one value (k8s.io/kubernetes pkg/apis/core/validation/validation.go,
  ValidateNodeFieldSelectorRequirement: "must be only one value when `operator` is 'In' or 'NotIn'
  for node field selector").
"""

from __future__ import annotations

from typing import Any

FIELD_SELECTOR_KEYS = ("metadata.name",)  # nodeFieldSelectorValidators


def _terms(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    node = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = (node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    preferred = [p.get("preference") or {} for p in node.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    return ([(f"requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]", t) for i, t in enumerate(required)]
            + [(f"preferredDuringSchedulingIgnoredDuringExecution[{i}].preference", t) for i, t in enumerate(preferred)])


def node_field_selector_problems(spec: dict[str, Any]) -> list[str]:
    """Why the API server would refuse the pod spec's node field selectors (none: accepted)."""
    problems = []
    for where, term in _terms(spec):
        for j, requirement in enumerate(term.get("matchFields") or []):
            path = f"affinity.nodeAffinity.{where}.matchFields[{j}]"
            operator, values = requirement.get("operator"), requirement.get("values") or []
            if operator not in ("In", "NotIn"):
                problems.append(f"{path}.operator: {operator!r} is not a valid field selector operator (In or NotIn)")
            elif len(values) != 1:
                problems.append(f"{path}.values: must be only one value when `operator` is 'In' or 'NotIn' for "
                                f"node field selector (has {len(values)}: the API server refuses the object)")
            if requirement.get("key") not in FIELD_SELECTOR_KEYS:
                problems.append(f"{path}.key: {requirement.get('key')!r} is not a valid field selector key "
                                f"({', '.join(FIELD_SELECTOR_KEYS)})")
    return problems
