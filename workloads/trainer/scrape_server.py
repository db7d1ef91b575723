"""An HTTP server for Prometheus scrapes that no client can hold up (the RDMA exporter's).

The exporter listens on the host network of every RDMA node, where any process that can reach the
node can open a connection. A thread per connection with a small cap (this server's previous form)
let 16 idle connections take every slot, so with 50 clients holding or re-opening connections one
scrape in 38 was answered in 25 s. This one is a single asyncio event loop:

- a connection that has not finished its request costs a socket and a small buffer, no thread, so
  many can wait while scrapes are answered; reading the request head is bounded (HEAD_LIMIT bytes);
- each connection has `timeout` seconds IN ALL, request read and response written; after that it is
  dropped, so an idle client, a half-sent request and one that trickles a byte at a time are all cut
  off. Ten seconds by default: Prometheus' own default scrape_timeout, after which it has given up;
- at most `max_connections` connections are open at once (what keeps memory and file descriptors
  finite). When one more arrives, the OLDEST connection still waiting for its request is closed to
  make room: a scrape sends its request as soon as it connects, so clients that hold connections
  open lose them, not the scrape. Only when every connection is already being answered is the new
  one closed unanswered;
- the metrics are rendered on a small thread pool (RENDER_THREADS; the collector walks sysfs), so a
  render never stops the loop from accepting and reading;
- one request per connection (`Connection: close`), GET or HEAD, any path; Prometheus'
  `Accept` header picks the text or OpenMetrics format, as prometheus_client's own server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_CONNECTIONS = 256
HEAD_LIMIT = 16 * 1024  # request line and headers; Prometheus sends a few hundred bytes
RENDER_THREADS = 4
BACKLOG = 128


class _Connection:
    __slots__ = ("opened", "requested", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.opened = time.monotonic()
        self.requested = False  # its request head has arrived: it is being answered


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET  # a name: IPv4, as before


class ScrapeServer:
    """Binds at once (so a bad address fails here); serve_forever() runs the loop."""

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, *,
                 timeout: float = DEFAULT_TIMEOUT_SECONDS, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        if not timeout > 0 or max_connections < 1:
            raise ValueError(f"need timeout > 0 and max_connections >= 1, got {timeout} and {max_connections}")
        self.client_timeout = timeout
        self.max_connections = max_connections
        self.registry = registry
        self._socket = socket.create_server(address, family=_family(address[0]), backlog=BACKLOG)
        self.server_port: int = self._socket.getsockname()[1]
        self._open: dict[asyncio.StreamWriter, _Connection] = {}  # insertion order: oldest first
        self._pool = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="render")

    def serve_forever(self) -> None:
        asyncio.run(self._serve())

    def server_close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(OSError):
            self._socket.close()

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._handle, sock=self._socket, limit=HEAD_LIMIT)
        async with server:
            await server.serve_forever()

    def _make_room(self) -> bool:
        """Close the oldest connection still waiting for its request; False when there is none."""
        for conn in self._open.values():
            if not conn.requested:
                conn.writer.transport.abort()
                del self._open[conn.writer]
                return True
        return False

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._open) >= self.max_connections and not self._make_room():
            writer.transport.abort()  # every slot is answering a scrape: this one goes unanswered
            return
        conn = self._open[writer] = _Connection(writer)
        try:
            async with asyncio.timeout(self.client_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
                conn.requested = True
                status, body, content_type = await self._answer(head)
                with_body = not head.startswith(b"HEAD ")
                writer.write(_response(status, body, content_type, with_body))
                await writer.drain()
                writer.close()
                await writer.wait_closed()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # timed out, cut off, gone away or sent too much: nothing to answer, nothing to log
        finally:
            writer.transport.abort()  # no-op once closed; drops what a timed-out client left unread
            self._open.pop(writer, None)

    async def _answer(self, head: bytes) -> tuple[str, bytes, str]:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", b"bad request line\n", "text/plain; charset=utf-8"
        method = parts[0]
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", b"GET or HEAD\n", "text/plain; charset=utf-8"
        accept = _header(head, b"accept")
        encoder, content_type = choose_encoder(accept)
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(self._pool, _render, encoder, self.registry)
        return "200 OK", body, content_type


def _render(encoder: Callable[[CollectorRegistry], bytes], registry: CollectorRegistry) -> bytes:
    return encoder(registry)


def _header(head: bytes, name: bytes) -> str:
    for line in head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return ""


def _response(status: str, body: bytes, content_type: str, with_body: bool) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode("latin-1") + (body if with_body else b"")
