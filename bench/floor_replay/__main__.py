"""The replay floor: the SDK registering exactly the plan a ./plan recorded, with no project logic.

plan_scale.py runs this file through render.program.run (project_dir=bench/floor_replay), under
the very mocks and recording monitor the real program runs under. It reads the plan.json a ./plan
wrote (config `floorPlan`) and registers every recorded resource again: each component as a
ComponentResource of its type, each custom resource as a CustomResource (a provider as a
ProviderResource) of its type with its recorded inputs as plain values, under its recorded parent
and depending on its recorded dependencies.

Where bench/floor/ registers as many remote.Commands as the plan has custom resources, each with one
flat string of the plan's average size, this registers the plan's own nested inputs (a CronJob's
spec as the dicts and lists it is): what the Pulumi SDK needs to serialize, send and deserialize
that very plan. What the real program takes above it is the project's own evaluation (config,
scripts, Output plumbing between resources).
"""

import json
from pathlib import Path

import pulumi

cfg = pulumi.Config()
recorded = json.loads(Path(cfg.require("floorPlan")).read_text())["resources"]
by_urn = {r["urn"]: r for r in recorded}
registered: dict[str, pulumi.Resource] = {}
components: list[pulumi.ComponentResource] = []


def register(entry: dict, visiting: frozenset = frozenset()) -> pulumi.Resource:
    """Register `entry` after its parent and dependencies (the plan lists resources by URN)."""
    urn = entry["urn"]
    if urn in registered:
        return registered[urn]
    if urn in visiting:
        raise SystemExit(f"floor_replay: a dependency cycle through {urn}")
    before = [by_urn[u] for u in [entry["parent"], *entry["dependencies"]] if u in by_urn]
    for other in before:
        register(other, visiting | {urn})
    parent = registered.get(entry["parent"])
    opts = pulumi.ResourceOptions(
        parent=parent, depends_on=[registered[u] for u in entry["dependencies"] if u in registered]
    )
    type_, name = entry["type"], entry["name"]
    if not entry["custom"]:
        component = pulumi.ComponentResource(type_, name, None, opts)
        components.append(component)
        resource: pulumi.Resource = component
    elif type_.startswith("pulumi:providers:"):
        resource = pulumi.ProviderResource(type_.split(":")[-1], name, dict(entry["inputs"]), opts)
    else:
        resource = pulumi.CustomResource(type_, name, dict(entry["inputs"]), opts)
    registered[urn] = resource
    return resource


for item in recorded:
    register(item)
for component in components:
    component.register_outputs({})
