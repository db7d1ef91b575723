"""Stopping a component ends its whole process group, even a process that ignores SIGTERM and the
children it started (what e2e/processes.py promises the control plane's teardown)."""

from __future__ import annotations

import socket
import time

import pytest

from e2e import processes

# A shell that ignores SIGTERM, with a child that does too: only SIGKILL ends them.
STUBBORN = "trap '' TERM; (trap '' TERM; sleep 300) & echo started; wait"


def test_stop_kills_a_group_that_ignores_sigterm(tmp_path):
    component = processes.start("stubborn", ["bash", "-c", STUBBORN], tmp_path)
    processes.wait_until("the child started", lambda: "started" in component.log_tail(), 10, component)
    assert len(processes.group_members(component.proc.pid)) >= 2
    began = time.monotonic()
    processes.stop(component, grace=1)
    assert time.monotonic() - began < 15
    assert processes.group_members(component.proc.pid) == []
    assert component.proc.returncode is not None


def test_a_start_that_exits_fails_with_its_log(tmp_path):
    component = processes.start("failing", ["bash", "-c", "echo no such flag >&2; exit 3"], tmp_path)
    with pytest.raises(processes.StartFailed, match=r"exited \(3\)[\s\S]*no such flag"):
        processes.wait_until("never", lambda: False, 10, component)
    processes.stop(component)


def test_a_free_port_can_be_bound():
    port = processes.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing holds it
