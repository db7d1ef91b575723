"""A small client of the API server over HTTPS with a client certificate (Python's stdlib: no
kubectl is built, and the tests need only JSON requests). Errors come back as the API's Status.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REQUEST_TIMEOUT = 30  # seconds per request


@dataclass(frozen=True)
class Response:
    status: int
    body: Any  # parsed JSON where the server answered JSON, else the text

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, response: Response):
        message = response.body.get("message") if isinstance(response.body, dict) else response.body
        super().__init__(f"{method} {path}: {response.status} {message}")
        self.response = response


class Client:
    def __init__(self, server: str, ca_file: str, cert_file: str, key_file: str):
        self.server = server.rstrip("/")
        self._context = ssl.create_default_context(cafile=ca_file)
        self._context.load_cert_chain(cert_file, key_file)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Response:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Accept": "application/json", "Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, context=self._context, timeout=REQUEST_TIMEOUT) as resp:
                return Response(resp.status, _parse(resp.read()))
        except urllib.error.HTTPError as err:
            return Response(err.code, _parse(err.read()))

    def must(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """The body of a 2xx answer; anything else raises ApiError with the server's message."""
        response = self.request(method, path, body, content_type)
        if not response.ok:
            raise ApiError(method, path, response)
        return response.body

    def get(self, path: str) -> Any:
        return self.must("GET", path)

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.must("POST", path, body)

    def patch_status(self, path: str, status: dict[str, Any]) -> Any:
        return self.must("PATCH", f"{path}/status", {"status": status}, "application/merge-patch+json")

    def wait_for(self, what: str, path: str, holds: Callable[[Any], bool], timeout: float) -> Any:
        """GET `path` until `holds(body)` or `timeout` s pass; returns the body that held."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            response = self.request("GET", path)
            last = response.body
            if response.ok and holds(response.body):
                return response.body
            time.sleep(0.5)
        raise TimeoutError(f"{what}: not within {timeout:.0f} s; last seen: {json.dumps(last)[:2000]}")


def _parse(raw: bytes) -> Any:
    text = raw.decode(errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text
