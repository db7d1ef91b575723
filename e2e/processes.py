"""A control plane component as a child process: started in its own process group (so its children go
with it) with stdout and stderr kept in a log file, stopped by SIGTERM to the group, then SIGKILL
after a bounded grace. Free loopback ports come from the kernel (bind port 0), never a fixed number.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LOG_TAIL_BYTES = 6000  # what a failure prints of each log


def free_port() -> int:
    """A port nothing listens on now; the component binds it a moment later (the usual small race:
    a port taken in between fails the start with the component's own 'address in use')."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Component:
    name: str
    proc: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self) -> str:
        if not self.log.is_file():
            return ""
        data = self.log.read_bytes()[-LOG_TAIL_BYTES:]
        return data.decode(errors="replace")


def start(name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None) -> Component:
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    return Component(name, proc, log)


def group_members(pgid: int) -> list[int]:
    """Processes still in process group `pgid` (from /proc: no psutil in the venv)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone while reading
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def stop(component: Component, grace: float = 15.0) -> None:
    """SIGTERM to the whole group, wait up to `grace` s, then SIGKILL; reaps the leader. The group id
    is the leader's pid (start_new_session), valid while any member lives."""
    pgid = component.proc.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if component.proc.poll() is not None and not group_members(pgid):
            return
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)
    component.proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


class StartFailed(RuntimeError):
    """A component did not become ready in time, or exited: the message carries its log's tail."""


def wait_until(what: str, ready: Callable[[], bool], timeout: float, component: Component | None = None,
               interval: float = 0.25) -> float:
    """Poll `ready` until it holds or `timeout` s pass (a failed start of `component` ends it early);
    returns the seconds it took."""
    start_time = time.monotonic()
    deadline = start_time + timeout
    while time.monotonic() < deadline:
        if component is not None and not component.alive():
            raise StartFailed(f"{component.name} exited ({component.proc.returncode}) before {what}:\n"
                              f"{component.log_tail()}")
        try:
            if ready():
                return time.monotonic() - start_time
        except OSError:  # not listening yet, connection reset while starting
            pass
        time.sleep(interval)
    tail = f":\n{component.log_tail()}" if component is not None else ""
    raise StartFailed(f"{what}: not within {timeout:.0f} s{tail}")
