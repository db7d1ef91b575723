"""The GPU health objects of the rendered stacks, shared by test_gpu_health.py and
test_gpu_health_diagnostic.py: the committed stacks and overrides of them, planned once each."""

from __future__ import annotations

import functools
import json
from typing import Any

from components.gpu_health import DIAG_NAME, NAME, NAMESPACE
from render import program
from render.__main__ import kubernetes_objects

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"


def config_with(stack: str, **overrides: Any) -> tuple[dict[str, str], list[str]]:
    """The stack's committed config with these gpu-cluster keys replaced."""
    values, secret_keys = program.stack_config(stack)
    return {**values, **{f"gpu-cluster:{k}": json.dumps(v) for k, v in overrides.items()}}, secret_keys


CASES: dict[str, tuple[str, Any]] = {
    "lab": ("lab", None),  # the committed stacks: on by default
    "dev": ("dev", None),
    "dev-dry-run": ("dev", lambda: config_with("dev", gpuHealth={"dryRun": True, "maxNodesOut": 3, "maxPercentOut": 50})),
    "gke-on": ("gke", lambda: config_with("gke", gpuHealth={"enabled": True})),
}


@functools.cache
def plan(case: str) -> program.Plan:
    stack, override = CASES[case]
    return program.run(stack, config=override() if override else program.stack_config(stack))


def health_objects(case: str) -> list[dict[str, Any]]:
    objs = [o for o in kubernetes_objects(plan(case))
            if o["metadata"].get("namespace") == NAMESPACE or o["metadata"]["name"] in (NAMESPACE, NAME, DIAG_NAME)]
    # A secret map is masked whole in the plan (its keys are checked in test_gpu_health_access.py).
    return [{**o, **{k: {} for k in ("data", "stringData") if o.get(k) == program.SECRET_MARKER}} for o in objs]


def find(case: str, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in health_objects(case) if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def kinds(case: str) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in health_objects(case)}
