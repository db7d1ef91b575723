"""An HTTP server for Prometheus scrapes that no client can hold up (the RDMA exporter's).

The exporter listens on the host network of every RDMA node, where any process that can reach the
node can open a connection. wsgiref's own server answers one connection at a time and waits on a
client for ever: one idle connection, or a request whose last header line never comes, stopped
every scrape of that node until it closed. This one:

- answers each connection on its own thread (daemon threads: a stuck one never holds up exit), so a
  slow client delays no other;
- gives each connection `timeout` seconds IN ALL, request read and response written (a timer shuts
  the socket down when they are over; the same value bounds each single read and write too), so an
  idle client, a half-sent request and one that trickles a byte at a time are all cut off. Ten
  seconds by default: Prometheus' own default scrape_timeout, after which it has given up anyway;
- serves at most `max_connections` connections at once (two threads each: the handler and its
  timer); one over the limit is closed at once, unanswered, rather than queued behind the others.
  So a client that holds `max_connections` connections open can still fail the scrapes made
  meanwhile, for at most `timeout` seconds after it stops opening new ones: the bound is what keeps
  the node's threads and memory finite under such a client.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_CONNECTIONS = 16


class _BoundedHandler(WSGIRequestHandler):
    """wsgiref's handler with a deadline per connection and no log line per scrape."""

    server: ScrapeServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.client_timeout)  # each single read and write
        self._deadline = threading.Timer(self.server.client_timeout, self._cut_off)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut_off(self) -> None:
        # Wakes a read or write blocked on this client; the handler then ends on its own.
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            pass  # the client timed out, was cut off or went away: nothing to answer, nothing to log

    def finish(self) -> None:
        self._deadline.cancel()
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # one line per scrape on stderr is noise


class ScrapeServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], app: Callable[..., Any], *, timeout: float = DEFAULT_TIMEOUT_SECONDS,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        if timeout <= 0 or max_connections < 1:
            raise ValueError(f"need timeout > 0 and max_connections >= 1, got {timeout} and {max_connections}")
        self.client_timeout = timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, _BoundedHandler)
        self.set_app(app)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: closed unanswered, never queued behind a slow client
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
