"""`pulumi up` of the dev stack with the real engine, the real pulumi-kubernetes provider and the
real control plane (issue 31, item 3), once per GPU stack (e2e/dev_stack.py VARIANTS: the device
plugin, the GPU Operator): every object the program registers is created and awaited as the
provider awaits it, a second preview proposes nothing, one changed value updates exactly what the
offline update preview (render --against, render/update.py) says it would, and `pulumi destroy`
leaves nothing in the API that was not there before, but the CRDs Helm keeps by design.

The steps of a variant share one stack (a module fixture, parametrized) and run in file order; each
records what it measured for out/e2e/report.json (report.UP). The kubeconfig and the W&B key are
stack secrets set from stdin; no test prints a secret.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from components.toolchain_versions import PULUMI, PULUMI_KUBERNETES, PULUMI_LANGUAGE_PYTHON
from e2e import api, dev_stack, inventory, report
from e2e.control_plane import ControlPlane
from e2e.published_charts import published_charts
from e2e.pulumi_stack import PulumiFailed, Workspace, changed, resource_key
from render import program, update
from render.update_risks import plan_side
from tests.toolchain import toolchain_binary

SECRETS = ("kubeconfig", "wandbApiKey")


def _program_config(cfg: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The config as program.run takes it (the offline plan), secrets as its marker."""
    values = {f"gpu-cluster:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in cfg.items()}
    keys = [f"gpu-cluster:{k}" for k in SECRETS]
    values.update(dict.fromkeys(keys, program.SECRET_MARKER))
    return values, keys


def _offline_update(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    plan = update.compare(plan_side(program.run("dev", config=_program_config(old))).resources,
                          plan_side(program.run("dev", config=_program_config(new))).resources)
    return {resource_key(s.resource.urn): str(s.action) for s in plan.steps if s.action is not update.Action.SAME}


def _kubernetes_objects(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in resources if r.get("type", "").startswith("kubernetes:") and "metadata" in (r.get("outputs") or {})]


@pytest.fixture(scope="module")
def charts_dir(tmp_path_factory: pytest.TempPathFactory, upstream_dir: Path) -> Path:
    return published_charts(upstream_dir / "charts", tmp_path_factory.mktemp("charts") / "charts")


@dataclass
class Variant:
    name: str  # a key of dev_stack.VARIANTS
    stack: Workspace
    before: set[inventory.ObjectKey]  # what the API served before `up`


@pytest.fixture(scope="module", params=list(dev_stack.VARIANTS))
def run(request: pytest.FixtureRequest, control_plane: ControlPlane, client: api.Client, charts_dir: Path,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Variant]:
    for component, binary in ((PULUMI, "pulumi"), (PULUMI_LANGUAGE_PYTHON, "pulumi-language-python"),
                              (PULUMI_KUBERNETES, "pulumi-resource-kubernetes")):
        toolchain_binary(component, binary)
    name = request.param
    workspace = Workspace(tmp_path_factory.mktemp(f"pulumi-{name}"), f"e2e-{name}",
                          dev_stack.config(control_plane, charts_dir, name))
    variant = Variant(name, workspace, inventory.snapshot(client))
    workspace.init({"kubeconfig": dev_stack.admin_kubeconfig(control_plane),
                    "wandbApiKey": secrets.token_hex(20)})  # a throwaway: the agent runs nothing here
    yield variant
    if workspace.resources():  # what a failed step left: the control plane is shared
        workspace.run("destroy", "--yes", "--skip-preview")


def _facts(request: pytest.FixtureRequest, run: Variant) -> dict[str, Any]:
    return request.config.stash.setdefault(report.UP, {}).setdefault(run.name, {})


def test_up_creates_every_object_and_the_api_serves_each(request, run: Variant, client: api.Client):
    stack = run.stack
    try:
        result = stack.up()
    except PulumiFailed as failed:
        pytest.fail(str(failed))
    resources = stack.resources()
    objects = _kubernetes_objects(resources)
    _facts(request, run)["up"] = {"seconds": result.seconds, "created": len(resources),
                                    "kubernetes_objects": len(objects)}
    assert objects, "the dev stack registers Kubernetes objects"
    served = inventory.snapshot(client)
    missing = []
    for resource in objects:
        out = resource["outputs"]
        group = out["apiVersion"].rpartition("/")[0]
        names = {(g, ns, n) for g, _r, ns, n in served}
        if resource["type"].endswith("Patch"):
            continue  # a patch of a node that exists anyway: the label is checked below
        if (group, out["metadata"].get("namespace", ""), out["metadata"]["name"]) not in names:
            missing.append(resource["urn"])
    assert not missing, "in the state but not served by the API:\n" + "\n".join(missing)
    gpu_nodes = stack.config("gpuNodes")
    labelled = {n["metadata"]["name"] for n in client.get("/api/v1/nodes?labelSelector=nvidia.com/gpu.present=true")["items"]}
    assert set(gpu_nodes) <= labelled


def test_a_second_preview_proposes_no_change(request, run: Variant):
    result, steps = run.stack.preview_steps("--expect-no-changes")
    proposed = changed(steps)
    _facts(request, run)["second_preview_changes"] = len(proposed)
    assert result.ok and not proposed, f"a preview right after up proposes {proposed}\n{result.tail()}"


def test_one_changed_value_updates_what_the_offline_update_preview_says(request, run: Variant):
    stack = run.stack
    key, value = dev_stack.VARIANTS[run.name][1]
    old = {k: stack.config(k) for k in stack.config_keys()}
    new = dev_stack.with_value(old, key, value)
    stack.set_config(key.split(".")[0], new[key.split(".")[0]])
    _, steps = stack.preview_steps()
    real = {resource_key(urn): op for urn, op in changed(steps).items()}
    offline = _offline_update(old, new)
    _facts(request, run)["update_changed"] = {"value": key, "real": real, "offline_agrees": real == offline}
    assert real, f"changing {key} changes something"
    assert real == offline, f"the engine's preview and render's update preview differ:\nreal {real}\noffline {offline}"
    try:
        stack.up()
    except PulumiFailed as failed:
        pytest.fail(str(failed))


def test_destroy_leaves_nothing_but_the_crds_helm_keeps(request, run: Variant, client: api.Client,
                                                       charts_dir: Path):
    stack = run.stack
    try:
        result = stack.destroy()
    except PulumiFailed as failed:
        pytest.fail(str(failed))
    assert not stack.resources(), "destroy empties the stack's state"
    kept_by_helm = inventory.crds_helm_keeps(charts_dir)
    left = inventory.snapshot(client) - run.before
    crds = {k for k in left if k[:2] == ("apiextensions.k8s.io", "customresourcedefinitions") and k[3] in kept_by_helm}
    # The API server registers a local APIService <version>.<group> for each group a CRD serves
    # (its autoregistration controller): they go when the CRDs go.
    groups = {name.split(".", 1)[1] for *_, name in crds}
    local = {k for k in left if k[:2] == ("apiregistration.k8s.io", "apiservices") and k[3].split(".", 1)[1] in groups}
    others = sorted(inventory.describe(k) for k in left - crds - local)
    _facts(request, run)["destroy"] = {"seconds": result.seconds, "left": others,
                                         "crds_kept_by_helm": sorted(k[3] for k in crds)}
    assert not others, "left in the API after destroy:\n" + "\n".join(others)
