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

Two things the engine sees make it the same plan under the real engine too (bench/engine_scale.py):
each resource goes to its recorded explicit provider, and a provider's input that the program took
from another custom resource's output (the lab's kubeconfig, a Command's stdout) waits on that
resource's id, so in a first `pulumi preview` it is unknown, as the program's is. The engine then
configures that provider with unknowns and skips its Check and Diff of every resource it manages,
as it does for the program; with the value known, pulumi-kubernetes would check each resource
against a cluster and fetch each Helm chart. Under render's mocks every id is known: the recorded
value as before.
"""

import json
from pathlib import Path

import pulumi

cfg = pulumi.Config()
recorded = json.loads(Path(cfg.require("floorPlan")).read_text())["resources"]
by_urn = {r["urn"]: r for r in recorded}
registered: dict[str, pulumi.Resource] = {}
components: list[pulumi.ComponentResource] = []


def _constant(value: object):
    return lambda _ids: value


def provider_inputs(entry: dict) -> dict:
    """A provider's inputs, each one the program took from custom resources' outputs waiting on their ids."""
    inputs: dict = dict(entry["inputs"])
    for key, sources in (entry.get("propertyDependencies") or {}).items():
        ids = [r.id for r in (registered.get(u) for u in sources) if isinstance(r, pulumi.CustomResource)]
        if key in inputs and ids:
            inputs[key] = pulumi.Output.all(*ids).apply(_constant(inputs[key]))
    return inputs


def register(entry: dict, visiting: frozenset = frozenset()) -> pulumi.Resource:
    """Register `entry` after its parent and dependencies (the plan lists resources by URN)."""
    urn = entry["urn"]
    if urn in registered:
        return registered[urn]
    if urn in visiting:
        raise SystemExit(f"floor_replay: a dependency cycle through {urn}")
    provider_urn = entry.get("provider", "").rsplit("::", 1)[0]  # a reference is `urn::id`
    before = [by_urn[u] for u in [entry["parent"], provider_urn, *entry["dependencies"]] if u in by_urn]
    for other in before:
        register(other, visiting | {urn})
    parent = registered.get(entry["parent"])
    provider = registered.get(provider_urn)
    opts = pulumi.ResourceOptions(
        parent=parent, depends_on=[registered[u] for u in entry["dependencies"] if u in registered],
        provider=provider if isinstance(provider, pulumi.ProviderResource) else None,
    )
    type_, name = entry["type"], entry["name"]
    if not entry["custom"]:
        component = pulumi.ComponentResource(type_, name, None, opts)
        components.append(component)
        resource: pulumi.Resource = component
    elif type_.startswith("pulumi:providers:"):
        resource = pulumi.ProviderResource(type_.split(":")[-1], name, provider_inputs(entry), opts)
    else:
        resource = pulumi.CustomResource(type_, name, dict(entry["inputs"]), opts)
    registered[urn] = resource
    return resource


for item in recorded:
    register(item)
for component in components:
    component.register_outputs({})
