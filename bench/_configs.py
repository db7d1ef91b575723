"""Generated stack configs for the benchmarks (shared by plan_scale.py and critical_path.py).

A config is what `render.program.run(stack, config=...)` takes: `(values, secret_keys)`, values as
strings keyed `gpu-cluster:<key>` (objects as JSON), exactly as `pulumi up` hands them over.

lab: the control plane is 192.0.2.10 (TEST-NET-1) and worker i is 198.18.0.10 + i, from
198.18.0.0/15 (RFC 2544, reserved for benchmarks); neither overlaps the default pod network
(10.244.0.0/16) or service network (10.96.0.0/12), which the config model rejects.

gke: gcp:project / gcp:region (the Google Cloud provider's own keys) plus gpu-cluster:gke with N GPU
pools alternating g2-standard-8 + 1 L4 (spot) and a2-highgpu-1g + 1 A100 40GB, each pool in one
zone, rotating over the zones of us-central1 that offer its accelerator. Every pair is valid per
config/gcp/accelerators.py; per-zone availability is Google's table as of writing (the program
does not check it, GKE would).
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


def pod_cidr(hosts: int) -> str:
    """The default 10.244.0.0/16 while it has a /24 for every host; from 256 hosts a larger range
    (kube-controller-manager gives each node a /24; the config refuses a range that runs out)."""
    prefix = min(16, 24 - max(0, hosts - 1).bit_length())
    return str(ipaddress.IPv4Network(f"10.244.0.0/{prefix}", strict=False))


def lab_config(workers: int, gpus: int = 8, **extra: object) -> Config:
    """The lab stack with `workers` GPU workers; `extra` adds keys (camelCase, without the prefix)."""
    values = {
        PREFIX + "platform": "lab",
        PREFIX + "hosts": json.dumps(lab_hosts(workers, gpus)),
        PREFIX + "podCidr": pod_cidr(workers + 1),
        SECRET_KEY: "x",
    }
    for key, value in extra.items():
        values[PREFIX + key] = value if isinstance(value, str) else json.dumps(value)
    return values, [SECRET_KEY]


# The in-cluster layers of Pulumi.lab.yaml (training with the NCCL acceptance Job, NFS storage on the
# control plane): lab_config(n, **lab_layers()) is the example stack's shape with n workers.
def lab_layers(launcher: str = "indexed-job") -> dict[str, object]:
    return {
        "training": {
            "enabled": True,
            "launcher": launcher,
            "image": "registry.example.com/gpu-cluster/trainer:0.1.0",
            "nodes": 2,
            "gpusPerNode": 1,
        },
        # pytorchjob: the config rejects acceptance and training in one `up` (the PyTorchJob is not awaited).
        "acceptance": {"nccl": launcher != "pytorchjob", "minBusbwFraction": 0.9},
        "network": {"linkGbps": 25, "rdma": False},
        "storage": {"provision": True, "exportPath": "/srv/gpu-cluster/shared", "size": "100Gi"},
    }


GCP_PROJECT = "gpu-cluster-bench"
GCP_REGION = "us-central1"
# (machine type, accelerator, zones of GCP_REGION offering it), alternated pool by pool.
GKE_POOL_KINDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("g2-standard-8", "nvidia-l4", ("us-central1-a", "us-central1-b", "us-central1-c")),
    ("a2-highgpu-1g", "nvidia-tesla-a100", ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")),
)


def gke_pools(pools: int) -> list[dict]:
    """`pools` GPU pools: even ones L4 (spot, scale from 0), odd ones A100 (1 node kept up)."""
    out = []
    for i in range(pools):
        machine, accelerator, zones = GKE_POOL_KINDS[i % len(GKE_POOL_KINDS)]
        l4 = accelerator == "nvidia-l4"
        out.append({
            "name": f"{'l4' if l4 else 'a100'}-{i}",
            "machineType": machine,
            "accelerator": {"type": accelerator, "count": 1},
            "zones": [zones[(i // len(GKE_POOL_KINDS)) % len(zones)]],
            "autoscaling": {"minNodes": 0 if l4 else 1, "maxNodes": 4 if l4 else 2},
            "spot": l4,
            "driver": "gke-latest" if l4 else "gke-default",
        })
    return out


def gke_config(pools: int, **extra: object) -> Config:
    """The gke stack (zonal cluster in us-central1-a) with `pools` GPU pools; `extra` as lab_config."""
    gke = {
        "clusterName": "gpu-cluster",
        "location": "zonal",
        "zone": "us-central1-a",
        "releaseChannel": "REGULAR",
        "network": "default",
        "authorizedNetworks": [{"cidr": "203.0.113.0/24", "name": "office"}],
        "systemPool": {"machineType": "e2-standard-4", "nodesPerZone": 1},
        "gpuPools": gke_pools(pools),
        "filestore": {"tier": "BASIC_HDD", "capacityGb": 1024},
    }
    values = {
        "gcp:project": GCP_PROJECT,
        "gcp:region": GCP_REGION,
        PREFIX + "platform": "gke",
        PREFIX + "gke": json.dumps(gke),
    }
    for key, value in extra.items():
        values[PREFIX + key] = value if isinstance(value, str) else json.dumps(value)
    return values, []


def config_for(platform: str, n: int) -> Config:
    """lab: n GPU workers; gke: n GPU pools."""
    if platform == "lab":
        return lab_config(n)
    if platform == "gke":
        return gke_config(n)
    raise ValueError(f"no benchmark config for platform {platform!r}")


def parse_points(text: str) -> list[int]:
    """--points: comma-separated GPU worker counts, ascending."""
    try:
        points = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not points or points[0] < 1:
        raise argparse.ArgumentTypeError("points must be positive worker counts")
    return points
