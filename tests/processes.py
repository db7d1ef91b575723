"""Stopping a test's child process (a real Prometheus, Alertmanager, an exporter, a service): ask
it to end, wait a bounded time, then kill it and wait again, so no test leaves one behind."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen, grace: float = 15.0) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
