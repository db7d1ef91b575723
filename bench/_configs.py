"""Generated stack configs for the benchmarks (shared by plan_scale.py and critical_path.py).

A config is what `render.program.run(stack, config=...)` takes: `(values, secret_keys)`, values as
strings keyed `gpu-cluster:<key>` (objects as JSON), exactly as `pulumi up` hands them over.

Addresses: the control plane is 192.0.2.10 (TEST-NET-1) and worker i is 198.18.0.10 + i, from
198.18.0.0/15 (RFC 2544, reserved for benchmarks); neither overlaps the default pod network
(10.244.0.0/16) or service network (10.96.0.0/12), which the config model rejects.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from pathlib import Path

PROJECT_ROOT = Path(os.path.abspath(__file__)).parent.parent
PREFIX = "gpu-cluster:"
SECRET_KEY = PREFIX + "sshPrivateKey"
# A syntactically valid pinned host key (the config model checks the format, nothing more).
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE8N2wz1xVb2cNQv7m4s1M8pC1xq2mC5yY0d3x7lW9eJ"
CONTROL_PLANE_ADDRESS = "192.0.2.10"
_WORKER_NET = ipaddress.IPv4Network("198.18.0.0/15")
_WORKER_BASE = _WORKER_NET.network_address + 10

Config = tuple[dict[str, str], list[str]]


def use_project_root() -> None:
    """Make `render`, `components` and `bench` importable when a script runs as `python bench/x.py`."""
    if str(PROJECT_ROOT) not in sys.path:
        sys.path.insert(0, str(PROJECT_ROOT))


def worker_address(i: int) -> str:
    address = _WORKER_BASE + i
    if address not in _WORKER_NET or address == _WORKER_NET.broadcast_address:
        raise ValueError(f"worker {i}: out of the benchmark range {_WORKER_NET}")
    return str(address)


def lab_hosts(workers: int, gpus: int = 8) -> list[dict]:
    """One control plane (cp-1, no GPU) and `workers` GPU workers gpu-0 .. gpu-<workers-1>."""
    hosts = [{"name": "cp-1", "address": CONTROL_PLANE_ADDRESS, "role": "control-plane", "hostKey": HOST_KEY}]
    hosts += [
        {"name": f"gpu-{i}", "address": worker_address(i), "role": "worker", "gpus": gpus, "hostKey": HOST_KEY}
        for i in range(workers)
    ]
    return hosts


def lab_config(workers: int, gpus: int = 8, **extra: object) -> Config:
    """The lab stack with `workers` GPU workers; `extra` adds keys (camelCase, without the prefix)."""
    values = {
        PREFIX + "platform": "lab",
        PREFIX + "hosts": json.dumps(lab_hosts(workers, gpus)),
        SECRET_KEY: "x",
    }
    for key, value in extra.items():
        values[PREFIX + key] = value if isinstance(value, str) else json.dumps(value)
    return values, [SECRET_KEY]


def platforms() -> list[str]:
    """The platforms the program implements (components.config.Platform)."""
    use_project_root()
    from components.config import Platform

    return [p.value for p in Platform]


def gke_status() -> str:
    """One line saying why there is no gke point (instead of benchmarking a fake config)."""
    available = platforms()
    if "gke" not in available:
        return (
            "gke: not measured: the program has no gke platform yet "
            f"(components.config.Platform = {', '.join(available)})."
        )
    return "gke: the program has a gke platform, but bench/_configs.py has no gke config generator yet."


def parse_points(text: str) -> list[int]:
    """--points: comma-separated GPU worker counts, ascending."""
    try:
        points = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not points or points[0] < 1:
        raise argparse.ArgumentTypeError("points must be positive worker counts")
    return points
