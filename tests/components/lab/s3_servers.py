"""The S3 server the etcdBackup.s3 tests talk to: gofakes3 v1.2.0 from the toolchain on loopback, and a
loopback front before it (plain or TLS) that forwards every request unchanged, except the one part
a test fails or holds, to interrupt a multipart upload at a known point. The plain front is also an
HTTP proxy (absolute request URIs, as urllib sends through http_proxy), so a virtual-hosted name
such as <bucket>.s3.test reaches gofakes3 with its Host header and no DNS."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from components import toolchain_versions as tv
from tests.components.lab.etcd_rehearsal import free_port
from tests.toolchain import toolchain_binary

HOLD_SECONDS = 30  # the longest a held part waits for the test


@contextmanager
def gofakes3(log: Path, bucket: str, *flags: str) -> Iterator[str]:
    """gofakes3 on 127.0.0.1 (a free port), `bucket` in memory; its endpoint URL."""
    binary = toolchain_binary(tv.GOFAKES3, "gofakes3")
    port = free_port()
    with log.open("wb") as out:
        server = subprocess.Popen([str(binary), "-backend", "mem", "-host", f"127.0.0.1:{port}",
                                   "-initialbucket", bucket, *flags], stdout=out, stderr=out)
    try:
        for _ in range(100):  # 10 s
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, log.read_text()
                time.sleep(0.1)
        else:
            raise AssertionError(f"gofakes3 did not listen on {port}: {log.read_text()}")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def open_uploads(endpoint: str, bucket: str) -> list[str]:
    """ListMultipartUploads straight from the server: the keys of uploads begun and neither completed nor aborted."""
    conn = http.client.HTTPConnection(urlsplit(endpoint).netloc, timeout=30)
    try:
        conn.request("GET", f"/{bucket}?uploads")
        answer = conn.getresponse()
        body = answer.read()
    finally:
        conn.close()
    assert answer.status == 200, body
    return [item.text or "" for item in ET.fromstring(body).iter() if item.tag.rsplit("}", 1)[-1] == "Key"]


class S3Front(ThreadingHTTPServer):
    """Forwards to `upstream` (http://host:port); `fail_part` answers that UploadPart 500, `hold_part`
    sets `arrived` and waits for `release` (at most HOLD_SECONDS) before answering it 500;
    `fail_complete` answers CompleteMultipartUpload 200 with an <Error> body, as S3 may when it fails
    while assembling the parts (its CompleteMultipartUpload docs); `redirect_to` (a base URL) answers
    every request 307 TemporaryRedirect to it, as S3 does for a bucket in another region."""

    daemon_threads = True

    def __init__(self, upstream: str, tls: ssl.SSLContext | None = None, fail_part: int | None = None,
                 hold_part: int | None = None, fail_complete: bool = False, redirect_to: str | None = None):
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream, self.redirect_to = urlsplit(upstream).netloc, redirect_to
        self.fail_part, self.hold_part, self.fail_complete = fail_part, hold_part, fail_complete
        self.arrived, self.release = threading.Event(), threading.Event()
        self.seen: list[str] = []
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.scheme = "https" if tls else "http"

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[S3Front]:
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.release.set()
            self.shutdown()
            self.server_close()
            thread.join(timeout=30)


class _Forward(BaseHTTPRequestHandler):
    server: S3Front

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def _any(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(f"{self.command} {self.path}")
        target = urlsplit(self.path)  # as a proxy: http://host/path?query
        path = target.path + (f"?{target.query}" if target.query else "")
        query = parse_qs(target.query, keep_blank_values=True)
        part = int(query["partNumber"][0]) if "partNumber" in query else None
        completing = self.command == "POST" and "uploadId" in query
        if self.server.redirect_to:
            moved = (b"<Error><Code>TemporaryRedirect</Code><Message>Please re-send this request to the specified "
                     b"temporary endpoint.</Message></Error>")
            self.send_response(307)
            self.send_header("Location", self.server.redirect_to + path)
            self.send_header("Content-Length", str(len(moved)))
            self.end_headers()
            self.wfile.write(moved)
            return
        if completing and self.server.fail_complete or part is not None and part in (self.server.fail_part,
                                                                                     self.server.hold_part):
            if part is not None and part == self.server.hold_part:
                self.server.arrived.set()
                self.server.release.wait(HOLD_SECONDS)
            error = b"<Error><Code>InternalError</Code><Message>the front failed this part</Message></Error>"
            self.send_response(200 if completing else 500)
            self.send_header("Content-Length", str(len(error)))
            self.end_headers()
            self.wfile.write(error)
            return
        conn = http.client.HTTPConnection(self.server.upstream, timeout=60)
        try:
            conn.request(self.command, path, body=body, headers=dict(self.headers.items()))
            answer = conn.getresponse()
            data = answer.read()
        finally:
            conn.close()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815 - BaseHTTPRequestHandler's names
