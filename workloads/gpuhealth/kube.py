"""The few Kubernetes API calls the GPU health service makes, over urllib (no client library in
the image). In a pod: KUBERNETES_SERVICE_HOST/PORT, the ServiceAccount token and CA under
/var/run/secrets/kubernetes.io/serviceaccount. For tests: an explicit API server URL, token file,
CA file, or plain http:// to a loopback address (--insecure-loopback; refused for any other host).

Calls (and so the least RBAC; all cluster-scoped ClusterRole rules, API group "" unless noted):
  nodes            get, list, patch      read GPU nodes and diagnostics; cordon, taint, annotate
  pods             list                  GPU pods on a node (fieldSelector spec.nodeName), the
                                         NCCL pair check's finished pods (labelSelector)
  pods/eviction    create                drain through the Eviction API (PodDisruptionBudgets hold)
  events           create                one Event per action or refusal (namespace --event-namespace)
No delete of pods, no update of anything else, no secrets.
"""

from __future__ import annotations

import ipaddress
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_SECONDS = 10.0


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass
class KubeClient:
    server: str
    token_file: Path | None
    ca_file: Path | None
    insecure_loopback: bool = False

    def __post_init__(self) -> None:
        url = urllib.parse.urlparse(self.server)
        if url.scheme == "http":
            host = url.hostname or ""
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not (self.insecure_loopback and loopback):
                raise ValueError(f"plain http only to a loopback address with --insecure-loopback: {self.server}")
            self._ctx: ssl.SSLContext | None = None
        elif url.scheme == "https":
            self._ctx = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        else:
            raise ValueError(f"API server must be http(s)://: {self.server}")

    @classmethod
    def in_cluster(cls) -> KubeClient:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ValueError("not in a cluster (KUBERNETES_SERVICE_HOST unset): give --api-server")
        if ":" in host:
            host = f"[{host}]"
        return cls(f"https://{host}:{port}", SA_DIR / "token", SA_DIR / "ca.crt")

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: dict[str, str] | None = None) -> Any:
        url = self.server.rstrip("/") + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token_file is not None:
            # Read every time: projected ServiceAccount tokens are rotated on disk.
            req.add_header("Authorization", "Bearer " + self.token_file.read_text().strip())
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_SECONDS, context=self._ctx) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")[:500]
            raise ApiError(e.code, text) from None
        return json.loads(raw) if raw else {}

    # -- the calls -------------------------------------------------------------------------------
    def list_nodes(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "/api/v1/nodes").get("items", []))

    def get_node(self, name: str) -> dict[str, Any]:
        return dict(self.request("GET", f"/api/v1/nodes/{urllib.parse.quote(name)}"))

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """JSON merge patch (RFC 7386). Put metadata.resourceVersion in it to fail with 409 on a
        concurrent change (taints are a list: a merge patch replaces it whole)."""
        return dict(self.request("PATCH", f"/api/v1/nodes/{urllib.parse.quote(name)}", patch,
                                 content_type="application/merge-patch+json"))

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """Pods of `namespace` with the labels (`key=value`): the NCCL pair check's."""
        return list(self.request("GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods",
                                 query={"labelSelector": label_selector}).get("items", []))

    def list_pods_on(self, node: str) -> list[dict[str, Any]]:
        return list(self.request("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"})
                    .get("items", []))

    def evict(self, namespace: str, pod: str) -> None:
        """policy/v1 Eviction: 429 while a PodDisruptionBudget forbids it (raised as ApiError)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        self.request("POST", f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods/{urllib.parse.quote(pod)}"
                     "/eviction", body)

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        self.request("POST", f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/events", event)
