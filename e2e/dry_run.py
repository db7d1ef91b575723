"""Objects of a plan sent to the real API server as server-side dry runs (tests/e2e/
test_admission_differential.py).

What a dry run needs to exist to be judged as on the stack's cluster is first created for real, and
removed again afterwards (the dev stack's `pulumi up` creates the same namespaces and CRDs): the
CRDs the plan installs (waited for until Established), the plan's Namespaces with their labels (so
their Pod Security level applies), and what the pod admission plugins look up (ServiceAccounts,
PriorityClasses). Discovery (/api, /apis) maps apiVersion+kind to the collection to POST to.
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from e2e import api

ESTABLISH_TIMEOUT = 90  # seconds for every CRD of a plan to be Established and discovered
DELETE_TIMEOUT = 60  # seconds for the namespaces and CRDs made for a plan to be gone
# Strict field validation: an unknown field is refused, as the check refuses it (admission.py).
DRY_RUN = "dryRun=All&fieldValidation=Strict"


@dataclass(frozen=True)
class Collection:
    path: str  # /api/v1 or /apis/<group>/<version>
    resource: str
    namespaced: bool

    def url(self, namespace: str | None) -> str:
        if self.namespaced:
            return f"{self.path}/namespaces/{namespace or 'default'}/{self.resource}"
        return f"{self.path}/{self.resource}"


def discovery(client: api.Client) -> dict[tuple[str, str], Collection]:
    """(apiVersion, kind) -> its collection, for every version the server serves."""
    found: dict[tuple[str, str], Collection] = {}
    group_versions = ["v1"] + [v["groupVersion"] for g in client.get("/apis")["groups"] for v in g["versions"]]
    for gv in group_versions:
        path = "/api/v1" if gv == "v1" else f"/apis/{gv}"
        response = client.request("GET", path)
        if not response.ok:  # an aggregated API without its server
            continue
        for r in response.body.get("resources") or []:
            if "/" not in r["name"]:
                found[(gv, r["kind"])] = Collection(path, r["name"], bool(r["namespaced"]))
    return found


@dataclass
class Made:
    """What was created for real for one plan, to be removed in reverse order."""

    urls: list[str] = field(default_factory=list)

    def remove(self, client: api.Client) -> list[str]:
        """Delete everything made, wait (bounded) until gone; what is still there after the timeout."""
        for url in reversed(self.urls):
            client.request("DELETE", url)
        left = self._wait(client, list(self.urls), DELETE_TIMEOUT)
        # A CRD whose cleanup finalizer cannot list its instances (seen: Kueue's cohorts, whose
        # conversion webhook has no server here) stays Terminating; only dry runs were made of its
        # kind, so there is nothing for the finalizer to delete.
        for url in [u for u in left if "/customresourcedefinitions/" in u]:
            client.request("PATCH", url, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
        return self._wait(client, left, DELETE_TIMEOUT / 4)

    @staticmethod
    def _wait(client: api.Client, left: list[str], timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            left = [u for u in left if client.request("GET", u).status != 404]
            if left:
                time.sleep(0.5)
        return left


def _name(body: dict[str, Any]) -> str:
    return str(body["metadata"]["name"])


def create_or_replace(client: api.Client, collection_url: str, body: dict[str, Any], made: Made) -> api.Response:
    """Create `body` for real; if it exists already (a built-in namespace), leave it as it is."""
    response = client.request("POST", collection_url, as_sent(body))
    if response.ok:
        made.urls.append(f"{collection_url}/{urllib.parse.quote(_name(body))}")
    if response.status == 409:
        return api.Response(200, response.body)
    return response


def establish(client: api.Client, crds: list[dict[str, Any]], made: Made) -> list[str]:
    """Create the CRDs for real and wait until each is Established; refusals and timeouts, as lines."""
    refused = []
    url = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        response = create_or_replace(client, url, crd, made)
        if not response.ok:
            refused.append(f"CustomResourceDefinition {_name(crd)}: {response.status} {_message(response)}")
    deadline = time.monotonic() + ESTABLISH_TIMEOUT
    waiting = {_name(c) for c in crds}
    while waiting and time.monotonic() < deadline:
        for name in sorted(waiting):
            body = client.request("GET", f"{url}/{name}").body
            conditions = (body.get("status") or {}).get("conditions") or [] if isinstance(body, dict) else []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                waiting.discard(name)
        if waiting:
            time.sleep(0.5)
    return refused + [f"CustomResourceDefinition {n}: not Established within {ESTABLISH_TIMEOUT} s" for n in sorted(waiting)]


def discovered(client: api.Client, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], Collection]:
    """Discovery once every wanted (apiVersion, kind) is served, or the last one seen (bounded)."""
    deadline = time.monotonic() + ESTABLISH_TIMEOUT
    found = discovery(client)
    while not wanted <= found.keys() and time.monotonic() < deadline:
        time.sleep(1)
        found = discovery(client)
    return found


def as_sent(value: Any) -> Any:
    """The body as pulumi-kubernetes sends it: the plan's inputs come through the engine's protobuf
    Struct, where every number is a double (1800.0), and the provider's Go JSON encoder writes an
    integral float64 without the fraction (1800); the API server refuses 1800.0 for an int32 field."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: as_sent(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_sent(v) for v in value]
    return value


def dry_run(client: api.Client, collection: Collection, body: dict[str, Any], namespace: str | None) -> api.Response:
    return client.request("POST", f"{collection.url(namespace)}?{DRY_RUN}", as_sent(body))


def _message(response: api.Response) -> str:
    body = response.body
    return str(body.get("message") if isinstance(body, dict) else body)[:600]


def refusal(subject: str, response: api.Response) -> str:
    return f"{subject}: {response.status} {_message(response)}"
