"""A real browser for the docs layout tests: Debian's headless Chromium (.ci/run installs it), driven
over the DevTools protocol on a pipe (--remote-debugging-pipe: NUL-terminated JSON on fds 3 and 4),
so no browser-automation package is needed. Every read is bounded by a deadline."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps dialling Google's hosts, which this
# machine's closed network refuses (/work/.library/env/machines: the flags the probe needed).
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-extensions", "--remote-debugging-pipe",
          # Every host name fails at once: the pages are files, and the theme's web fonts (Google's)
          # must not hold the load event for as long as a dropped connection takes to time out.
          "--host-resolver-rules=MAP * ~NOTFOUND"]


class BrowserError(RuntimeError):
    pass


class Browser:
    """One Chromium process with one page of the given window size; `open` loads a URL and
    `evaluate` runs a JS expression in it and returns its JSON value."""

    def __init__(self, width: int, height: int, timeout_s: float = 20.0) -> None:
        self._timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="gpu-cluster-chromium-")
        # The protocol's fds are 3 (the browser reads) and 4 (it writes): the pipe ends are moved
        # above 9 first, so bash's redirections into 3 and 4 cannot overwrite one another.
        to_browser_r, self._to_browser = (_above_9(fd) for fd in os.pipe())
        self._from_browser, from_browser_w = (_above_9(fd) for fd in os.pipe())
        command = [CHROMIUM, *_FLAGS, f"--user-data-dir={self._profile}", f"--window-size={width},{height}", "about:blank"]
        redirect = f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self._proc = subprocess.Popen(["bash", "-c", redirect, "bash", *command], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      pass_fds=(to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self._call("Page.enable", session=True)
        self._call("Emulation.setDeviceMetricsOverride",
                   {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def open(self, url: str) -> None:
        self._events.clear()
        self._call("Page.navigate", {"url": url}, session=True)
        self._wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait(timeout=10)
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, params: dict[str, Any] | None = None, session: bool = False) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self._timeout_s
        while True:
            reply = self._read(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result
            if "method" in reply:
                self._events.append(reply)

    def _wait_event(self, method: str) -> None:
        deadline = time.monotonic() + self._timeout_s
        while not any(e["method"] == method for e in self._events):
            self._events.append(self._read(deadline, method))

    def _read(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or self._proc.poll() is not None:
                raise BrowserError(f"no answer from Chromium to {waiting_for} (exit code {self._proc.poll()})")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise BrowserError(f"Chromium closed the pipe while waiting for {waiting_for}")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed


def _above_9(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def page_url(site: Path, page: str) -> str:
    """The file:// URL of a built page (`queues/` -> site/queues/index.html)."""
    return (site / page / "index.html").as_uri()
