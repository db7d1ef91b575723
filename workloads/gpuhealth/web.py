"""The GPU health service's HTTP side and its reconcile loop thread.

  POST /webhook (also /)  Alertmanager's webhook JSON (version 4). Only with `Authorization: Bearer
                          <token>`, the token of --webhook-token-file (compared in constant time;
                          the file is re-read when it changes, as a mounted Secret does): else 401,
                          the body unread and nothing changed. The body needs a Content-Length
                          (411 without, 400 when not one decimal number), of at most MAX_BODY_BYTES
                          (413 over, unread), that arrives within the read timeout (400 when it stops
                          short) and parses as a webhook payload (400 with the reason). Then 200
                          {"accepted": n, "rejected": [{"alert": index, "reason": ...}]}: each alert
                          is judged alone (gpuhealth/alerts.py), the well-formed ones are acted on.
  GET  /metrics           Prometheus metrics (gpuhealth/metrics.py).
  GET  /healthz           200 while a reconcile pass succeeded within Settings.stale_seconds; 503
                          when the loop thread died or is stuck or failing (the API unreachable).
  anything else           404 for an unknown path, 405 (with Allow) for another method on a known
                          one; an unexpected error is a 500. Every request gets an answer.
Every answer closes the connection (HTTP/1.0): a body left unread can never be taken for the next
request.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gpuhealth.alerts import PayloadError

if TYPE_CHECKING:
    from gpuhealth.service import GpuHealth

log = logging.getLogger("gpuhealth")

WEBHOOK_PATHS = ("/webhook", "/")
GET_PATHS = ("/metrics", "/healthz")
# Alertmanager's batches are a few KiB per alert; 1 MiB holds hundreds of them.
MAX_BODY_BYTES = 1024 * 1024
# How long a client may take to send its request (headers and body): a stalled one is answered
# (or dropped) then, never holding a thread for good.
READ_TIMEOUT_SECONDS = 10.0
# A refused body still on its way is read and dropped for this long at most after the answer:
# closing on unread data resets the connection, and the client would lose the answer.
LINGER_SECONDS = 2.0
_DECIMAL = re.compile(r"[0-9]{1,12}")


class WebhookToken:
    """The bearer token Alertmanager must send, read from a file (a mounted Secret's key). A file
    that changes (Kubernetes swaps a Secret volume's files when the Secret changes) is re-read; an
    empty or unreadable new version keeps the last good token (and is logged)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        token = self._read()
        if not token:
            raise ValueError(f"--webhook-token-file {path}: empty or unreadable (the webhook needs a token)")
        self._token = token

    def _read(self) -> bytes:
        try:
            st = self.path.stat()
            token = self.path.read_bytes().strip()
        except OSError as e:
            log.warning("webhook token file %s: %s", self.path, e)
            return b""
        self._stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        return token

    def current(self) -> bytes:
        with self._lock:
            try:
                st = self.path.stat()
                changed = self._stamp != (st.st_ino, st.st_mtime_ns, st.st_size)
            except OSError:
                changed = False  # gone for now: keep the last good token
            if changed:
                token = self._read()
                if token:
                    self._token = token
                else:
                    log.warning("webhook token file %s is empty now: keeping the previous token", self.path)
            return self._token

    def admits(self, authorization: str | None) -> bool:
        """`Authorization: Bearer <token>` with this token (the comparison takes the same time
        whatever the given token shares with the right one)."""
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode("latin-1", "replace"), self.current())


class _Reply(Exception):
    """An answer decided while reading the request (status, text)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


class _Handler(BaseHTTPRequestHandler):
    service: GpuHealth
    token: WebhookToken
    wake: threading.Event
    healthy: Callable[[], tuple[bool, str]]
    max_body: int
    timeout = READ_TIMEOUT_SECONDS  # the socket's: StreamRequestHandler applies it

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("http: " + format, *args)

    def _handler(self, path: str) -> str:
        return {"/metrics": "metrics", "/healthz": "healthz"}.get(path, "webhook" if path in WEBHOOK_PATHS else "other")

    def _reply(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
               headers: dict[str, str] | None = None) -> None:
        self.service.metrics.requests.labels(self._handler(self.path.split("?")[0]), str(code)).inc()
        self.close_connection = True
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)
        except OSError as e:  # the client left: nobody to answer
            log.debug("http: answer %d not delivered: %s", code, e)

    def _text(self, code: int, text: str, headers: dict[str, str] | None = None) -> None:
        self._reply(code, (text.rstrip("\n") + "\n").encode(), headers=headers)

    def _wrong_method(self, allowed: str) -> None:
        self._text(405, f"method {self.command} not allowed here; allowed: {allowed}", {"Allow": allowed})

    def _route(self, method: str) -> None:
        path = self.path.split("?")[0]
        try:
            if path not in WEBHOOK_PATHS + GET_PATHS:
                self._text(404, f"not found: {path[:200]}")
            elif path in WEBHOOK_PATHS and method != "POST":
                self._wrong_method("POST")
            elif path in GET_PATHS and method != "GET":
                self._wrong_method("GET")
            elif method == "POST":
                self._webhook()
            else:
                self._get(path)
        except Exception:  # a bug must still get an answer, and not kill the server
            log.exception("http: %s %s failed", method, path[:200])
            self._text(500, "internal error (logged)")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_OPTIONS(self) -> None:
        self._route("OPTIONS")

    def _get(self, path: str) -> None:
        if path == "/metrics":
            self._reply(200, generate_latest(self.service.metrics.registry), CONTENT_TYPE_LATEST)
            return
        ok, why = self.healthy()
        self._text(200 if ok else 503, why)

    def _body(self) -> bytes:
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            raise _Reply(411, "Content-Length required (chunked bodies are not accepted)")
        if len(set(lengths)) != 1 or not _DECIMAL.fullmatch(lengths[0].strip()):
            raise _Reply(400, "Content-Length: not one decimal number")
        length = int(lengths[0])
        if length == 0:
            raise _Reply(400, "empty body: an Alertmanager webhook payload (JSON) was expected")
        if length > self.max_body:
            raise _Reply(413, f"body of {length} bytes is over the limit of {self.max_body}")
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise _Reply(400, f"body shorter than its Content-Length {length} (nothing more within "
                              f"{self.timeout:g} s)") from None
        if len(body) < length:
            raise _Reply(400, f"body of {len(body)} bytes is shorter than its Content-Length {length}")
        return body

    def _linger(self) -> None:
        """After an answer that left the body unread: stop sending, then drop what the client
        still sends (bounded in time and bytes), so that it reads the answer instead of a reset."""
        deadline = time.monotonic() + LINGER_SECONDS
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            for _ in range(1024):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.connection.settimeout(left)
                if not self.connection.recv(64 * 1024):
                    break

    def _webhook(self) -> None:
        if not self.token.admits(self.headers.get("Authorization")):
            log.warning("webhook request from %s without the right bearer token: refused (401)", self.client_address[0])
            self._text(401, "bearer token required", {"WWW-Authenticate": 'Bearer realm="gpu-health"'})
            self._linger()
            return
        try:
            raw = self._body()
            try:
                payload = json.loads(raw)
            except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
                raise _Reply(400, f"not JSON: {str(e)[:200]}") from None
            try:
                judged = self.service.handle_webhook(payload)
            except PayloadError as e:
                raise _Reply(400, str(e)) from None
        except _Reply as r:
            self._text(r.status, r.text)
            if r.status in (400, 411, 413):
                self._linger()
            return
        accepted = [j for j in judged if not j.problem]
        if accepted:
            self.wake.set()
        answer = {"accepted": len(accepted),
                  "rejected": [{"alert": j.index, "reason": j.problem} for j in judged if j.problem]}
        self._reply(200, json.dumps(answer).encode(), "application/json")


class Server:
    """The HTTP server and the reconcile loop (every --reconcile-seconds, and at once after a webhook)."""

    def __init__(self, service: GpuHealth, address: str, port: int, token: WebhookToken, *,
                 read_timeout: float = READ_TIMEOUT_SECONDS, max_body: int = MAX_BODY_BYTES) -> None:
        self.service = service
        self.wake = threading.Event()
        self.stop = threading.Event()
        # Starting counts as a success: the first pass has its full allowance.
        self.last_success = time.monotonic()
        self.loop = threading.Thread(target=self._run, name="reconcile", daemon=True)
        handler = type("Handler", (_Handler,), {
            "service": service, "token": token, "wake": self.wake, "healthy": staticmethod(self.health),
            "max_body": max_body, "timeout": read_timeout,
        })
        self.http = ThreadingHTTPServer((address, port), handler)
        self.http.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    def health(self) -> tuple[bool, str]:
        """(healthy, why) for /healthz."""
        if not self.loop.is_alive():
            return False, "reconcile loop stopped"
        age, most = time.monotonic() - self.last_success, self.service.settings.stale_seconds
        if age > most:
            return False, (f"no successful reconcile pass for {age:.0f} s (at most {most:g} s: "
                           f"{self.service.settings.stale_reconciles:g} intervals); the loop is stuck or failing")
        return True, "ok"

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.service.reconcile():
                    self.last_success = time.monotonic()
            except Exception:  # a bug in one pass must not stop the loop; /healthz tells
                self.service.metrics.reconcile_failures.inc()
                log.exception("reconcile failed")
            self.wake.wait(self.service.settings.reconcile_seconds)
            self.wake.clear()

    def start(self) -> None:
        self.loop.start()
        threading.Thread(target=self.http.serve_forever, name="http", daemon=True).start()

    def shutdown(self) -> None:
        self.stop.set()
        self.wake.set()
        self.http.shutdown()
        self.http.server_close()
        self.loop.join(timeout=15)
