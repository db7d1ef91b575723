"""A Kubernetes API stand-in on 127.0.0.1 for the GPU health service's calls: it keeps nodes and
pods, records every request, and answers as the API server would for those calls only:

  GET    /api/v1/nodes, /api/v1/nodes/<name>
  PATCH  /api/v1/nodes/<name>              JSON merge patch (RFC 7386); metadata.resourceVersion in
                                           the patch must match (else 409), as the real server checks
  GET    /api/v1/pods?fieldSelector=spec.nodeName=<node>, ?labelSelector=<key>=<value>[,...]
  GET    /api/v1/namespaces/<ns>/pods?labelSelector=...
  POST   /api/v1/namespaces/<ns>/pods/<pod>/eviction   201 and the pod is gone, or 429 while the
                                           pod's `pdb_blocks` count (set by the test) is above 0
  POST   /api/v1/namespaces/<ns>/events    kept in `events`
Anything else (a DELETE of a pod included) is recorded and answered 405. A request without the
expected bearer token gets 401.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "fake-token"


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    status: int


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


class FakeKubeApi:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.pdb_blocks: dict[tuple[str, str], int] = {}
        self.events: list[dict[str, Any]] = []
        self.calls: list[Call] = []
        self._rv = 0
        self.server: ThreadingHTTPServer | None = None

    # -- state, for tests ------------------------------------------------------------------------
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def add_node(self, name: str, gpus: int = 8, annotations: dict[str, str] | None = None) -> None:
        with self.lock:
            self.nodes[name] = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": self._next_rv(),
                             "annotations": dict(annotations or {}), "labels": {}},
                "spec": {},
                "status": {"capacity": {"cpu": "64", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}},
            }

    def add_pod(self, namespace: str, name: str, node: str, gpus: int = 1, pdb_blocks: int = 0,
                daemonset: bool = False) -> None:
        with self.lock:
            res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
            meta: dict[str, Any] = {"name": name, "namespace": namespace}
            if daemonset:
                meta["ownerReferences"] = [{"kind": "DaemonSet", "name": "ds", "apiVersion": "apps/v1"}]
            self.pods[(namespace, name)] = {
                "metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": res}]},
                "status": {"phase": "Running"},
            }
            self.pdb_blocks[(namespace, name)] = pdb_blocks

    def put_pod(self, pod: dict[str, Any]) -> None:
        """A whole pod object, as the Job controller and kubelet would leave it (status included)."""
        with self.lock:
            meta = pod["metadata"]
            self.pods[(meta.get("namespace", "default"), meta["name"])] = copy.deepcopy(pod)

    def annotate(self, node: str, annotations: dict[str, str | None]) -> None:
        """What another client (the diagnostic) would write."""
        with self.lock:
            n = self.nodes[node]
            n["metadata"] = merge_patch(n["metadata"], {"annotations": annotations})
            n["metadata"]["resourceVersion"] = self._next_rv()

    def node(self, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.nodes[name])

    def calls_of(self, method: str, fragment: str = "") -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method and fragment in c.path]

    def event_reasons(self, node: str) -> list[str]:
        with self.lock:
            return [e["reason"] for e in self.events if e["involvedObject"]["name"] == node]

    # -- HTTP ------------------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, body: Any, auth: str) -> tuple[int, Any]:
        url = urllib.parse.urlparse(raw_path)
        path, query = url.path, urllib.parse.parse_qs(url.query)
        with self.lock:
            status, reply = self._route(method, path, query, body, auth)
            self.calls.append(Call(method, path, query, body, status))
            return status, copy.deepcopy(reply)

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any, auth: str) -> tuple[int, Any]:
        if auth != f"Bearer {TOKEN}":
            return 401, {"kind": "Status", "code": 401}
        parts = path.strip("/").split("/")
        if parts[:2] != ["api", "v1"]:
            return 404, {"kind": "Status", "code": 404}
        rest = parts[2:]
        if method == "GET" and rest == ["nodes"]:
            return 200, {"kind": "NodeList", "items": list(self.nodes.values())}
        if rest[:1] == ["nodes"] and len(rest) == 2:
            node = self.nodes.get(rest[1])
            if node is None:
                return 404, {"kind": "Status", "code": 404}
            if method == "GET":
                return 200, node
            if method == "PATCH":
                rv = ((body or {}).get("metadata") or {}).get("resourceVersion")
                if rv is not None and rv != node["metadata"]["resourceVersion"]:
                    return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
                new = merge_patch(node, body)
                new["metadata"]["resourceVersion"] = self._next_rv()
                self.nodes[rest[1]] = new
                return 200, new
        namespaced = len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "pods"
        if method == "GET" and (rest == ["pods"] or namespaced):
            selector = (query.get("fieldSelector") or [""])[0]
            node = selector.removeprefix("spec.nodeName=") if selector.startswith("spec.nodeName=") else None
            items = [p for p in self.pods.values() if node is None or p["spec"]["nodeName"] == node]
            if namespaced:
                items = [p for p in items if p["metadata"].get("namespace") == rest[1]]
            for term in filter(None, (query.get("labelSelector") or [""])[0].split(",")):
                key, _, value = term.partition("=")  # equality terms only: what the service sends
                items = [p for p in items if (p["metadata"].get("labels") or {}).get(key) == value]
            return 200, {"kind": "PodList", "items": items}
        if len(rest) == 5 and rest[0] == "namespaces" and rest[2] == "pods" and rest[4] == "eviction" and method == "POST":
            key = (rest[1], rest[3])
            if key not in self.pods:
                return 404, {"kind": "Status", "code": 404}
            if (body or {}).get("apiVersion") != "policy/v1" or (body or {}).get("kind") != "Eviction":
                return 400, {"kind": "Status", "code": 400}
            if self.pdb_blocks.get(key, 0) > 0:
                self.pdb_blocks[key] -= 1
                return 429, {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                             "message": "Cannot evict pod as it would violate the pod's disruption budget."}
            del self.pods[key]
            return 201, {"kind": "Status", "status": "Success"}
        if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "events" and method == "POST":
            event = dict(body or {})
            if event.get("involvedObject", {}).get("kind") != "Node" or not event.get("reason"):
                return 422, {"kind": "Status", "code": 422}
            self.events.append(event)
            return 201, event
        return 405, {"kind": "Status", "code": 405}

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _do(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                status, reply = api.handle(self.command, self.path, body, self.headers.get("Authorization", ""))
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _do

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
