"""Every object the API serves, by its resource and name: taken before `pulumi up` and after
`pulumi destroy`, the difference is what destroy left behind (Helm charts' own objects included,
which the stack's state does not list one by one).

Found through the API's discovery, as `kubectl api-resources` does: every resource of every group's
preferred version that can be listed. Left out: what the cluster itself writes all the time (events,
leases, endpoints and their slices, which follow Services and pods) and the nodes, which exist
before and after (the dev stack labels them; tests/e2e/test_dev_stack_up.py checks the label).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from e2e import api
from render.cluster.objects import parse_documents

VOLATILE = {("", "events"), ("events.k8s.io", "events"), ("coordination.k8s.io", "leases"),
            ("", "endpoints"), ("discovery.k8s.io", "endpointslices"), ("", "nodes")}

ObjectKey = tuple[str, str, str, str]  # (group, resource, namespace, name)


def _resources(client: api.Client) -> list[tuple[str, str, str]]:
    """(group, version path, resource) of every listable resource, preferred versions only."""
    found = [("", "/api/v1", r["name"]) for r in client.get("/api/v1")["resources"]
             if "/" not in r["name"] and "list" in r.get("verbs", [])]
    for group in client.get("/apis")["groups"]:
        version = group["preferredVersion"]["groupVersion"]
        response = client.request("GET", f"/apis/{version}")
        if not response.ok:  # an aggregated API whose server is down: nothing of it can be listed
            continue
        found += [(group["name"], f"/apis/{version}", r["name"]) for r in response.body["resources"]
                  if "/" not in r["name"] and "list" in r.get("verbs", [])]
    return [f for f in found if (f[0], f[2]) not in VOLATILE]


def snapshot(client: api.Client) -> set[ObjectKey]:
    objects: set[ObjectKey] = set()
    for group, path, resource in _resources(client):
        response = client.request("GET", f"{path}/{resource}")
        if not response.ok:
            continue
        for item in response.body.get("items") or []:
            metadata: dict[str, Any] = item["metadata"]
            objects.add((group, resource, metadata.get("namespace", ""), metadata["name"]))
    return objects


def describe(key: ObjectKey) -> str:
    group, resource, namespace, name = key
    kind = f"{resource}.{group}" if group else resource
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def crds_helm_keeps(charts_dir: Path) -> set[str]:
    """The CRDs in a `crds/` folder of any chart (and subchart) under `charts_dir`: Helm installs
    them before the release and never deletes them, by design ("There is no support at this time
    for upgrading or deleting CRDs using Helm": helm.sh/docs, Custom Resource Definitions), since
    deleting a CRD deletes every object of its kind in the cluster, other users' too."""
    names = set()
    for folder, _dirs, files in os.walk(charts_dir, followlinks=True):
        parts = Path(folder).relative_to(charts_dir).parts
        # <chart>/crds or <chart>/charts/<subchart>/crds, and folders below: never rendered as templates
        if not any(part == "crds" and (i == 1 or (i >= 3 and parts[i - 2] == "charts"))
                   for i, part in enumerate(parts)):
            continue
        for file in files:
            if file.endswith((".yaml", ".yml")):
                for doc in parse_documents((Path(folder) / file).read_text()):
                    if doc.get("kind") == "CustomResourceDefinition":
                        names.add(doc["metadata"]["name"])
    return names
