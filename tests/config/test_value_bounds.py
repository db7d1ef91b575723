"""Every config key at its boundary values ends in a plan or a ConfigError (exit 0 or exit 2 of
`python -m render`), never in a traceback; a value that is wrong on its own is refused naming its key.

tests/config/bounds.py walks the stack types' models and generates the values; here are the base
configs that reach every key and one test per (platform, key). Rendering happens once per module
for all keys (the `outcomes` fixture), so each test only reads its key's results.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

import config
from tests.config import bounds
from tests.conftest import ED25519, SEED_002_ROCE

WANDB = {"enabled": True, "entity": "team", "queue": "gpu-queue", "project": "demo"}
ROCE = {"linkGbps": 25, "rdma": True, "roce": SEED_002_ROCE}
NFS = {"server": "192.0.2.50", "path": "/srv/nfs/shared"}
QUEUES = {"enabled": True, "teams": [{"name": "vision", "namespace": "team-vision", "group": "gpu-vision", "gpus": 0,
                                      "borrowingLimitGpus": 1, "cpu": "4", "memory": "16Gi", "priority": "training"}]}
S3 = {"s3": {"endpoint": "https://s3.example.com", "bucket": "lab-backups", "prefix": "lab/etcd/", "retainDays": 30}}
S3_SECRETS = ("etcdBackupS3AccessKeyId", "etcdBackupS3SecretAccessKey", "etcdBackupEncryptionKey")
FLEX_RETRY = {"enabled": True, "flexStartRetry": {"backoffLimitCount": 3, "backoffBaseSeconds": 60,
                                                  "backoffMaxSeconds": 1800}}
FLEX_POOL = {"name": "h100-flex", "machineType": "a3-megagpu-8g", "accelerator": {"type": "nvidia-h100-mega-80gb", "count": 8},
             "zones": ["us-central1-a"], "autoscaling": {"minNodes": 0, "maxNodes": 2}, "driver": "gke-latest",
             "provisioning": "flexStart"}


def _bases() -> dict[str, list[bounds.Base]]:
    """Per platform, configs that together reach every key (each optional section set in one)."""
    return {
        "lab": [
            bounds.base("lab", "RoCE, W&B, bastion", ("wandbApiKey",), network=ROCE, wandb=WANDB,
                        bastion={"host": "198.51.100.7", "hostKey": ED25519},
                        monitoring={"storageClass": "fast"}, nvidiaDriver={"branch": "570", "version": "570.172.08-0ubuntu1"}),
            bounds.base("lab", "NFS server, sockets, queues", storage={"nfs": NFS, "provision": False, "size": "100Gi"},
                        training={"nccl": {"debug": "WARN", "socketIfname": "eth0"}},
                        controlPlaneEndpoint="192.0.2.10:6443", queues=QUEUES),
            bounds.base("lab", "etcd snapshots to S3", S3_SECRETS, etcdBackup=S3),
            bounds.base("lab", "flex-start retries (refused on lab: the keys under it still name themselves)",
                        queues=FLEX_RETRY),
        ],
        "dev": [
            bounds.base("dev", "RoCE, W&B", ("wandbApiKey",), network=ROCE, wandb=WANDB),
            bounds.base("dev", "NFS, queues", storage={"hostPath": "", "nfs": NFS, "size": "50Gi"}, queues=QUEUES),
            bounds.base("dev", "flex-start retries (refused on dev)", queues=FLEX_RETRY),
        ],
        "gke": [
            bounds.base("gke", "W&B, private nodes, queues", ("wandbApiKey",), wandb=WANDB, queues=QUEUES,
                        gke={"privateNodes": {"enabled": True, "masterCidr": "172.16.0.32/28"}, "subnetwork": "gpu-subnet",
                             # an exclusion of its own, so that the keys under exclusions[0] are reached
                             "maintenance": {"exclusions": [{"name": "run", "start": "2026-03-01T00:00:00Z",
                                                             "end": "2026-03-20T00:00:00Z"}]}}),
            bounds.base("gke", "RoCE (refused on gke: the keys under it still name themselves)", network=ROCE),
            bounds.base("gke", "a flex-start pool and its retries", queues=FLEX_RETRY, gke={"gpuPools": [FLEX_POOL]}),
        ],
    }


def _keys() -> list[tuple[str, str]]:
    return [(platform, key.name) for platform, stack_type in _stack_types() for key in bounds.walk(stack_type)]


def _stack_types() -> list[tuple[str, Any]]:
    return [(platform.value, stack_type) for platform, stack_type in config.STACK_TYPES.items()]


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, str], list[str]]:
    return run_every_key()


def run_every_key() -> dict[tuple[str, str], list[str]]:
    """(platform, key) -> what went wrong with its values ("label value: problem"), empty when
    none; a key no base reaches is reported as such."""
    started = time.monotonic()
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    bases = _bases()
    for platform, stack_type in _stack_types():
        optional = bounds.optional_sections(stack_type)
        taken: dict[int, list[bounds.Case]] = defaultdict(list)
        for key in bounds.walk(stack_type):
            reach = [(i, b) for i, b in enumerate(bases[platform]) if bounds.current(b.raw, key.path, optional)[0]]
            if not reach:
                found[(platform, key.name)].append("no base config reaches this key")
                continue
            i, base = reach[0]
            for case in bounds.cases(key, bounds.current(base.raw, key.path, optional)[1]):
                outcome = bounds.load(base, [case])
                where = f"{case.label} {str(case.value)[:60]!r}"
                if outcome.error:
                    found[(platform, key.name)].append(f"{where}: {outcome.error}")
                elif outcome.refused is not None:
                    if case.bad and not any(_related(k, key.name) for k in outcome.refused):
                        found[(platform, key.name)].append(f"{where}: refused without naming the key: {outcome.refused}")
                elif case.bad:
                    found[(platform, key.name)].append(f"{where}: taken, but it is wrong whatever the other keys say")
                else:
                    taken[i].append(case)
        for i, cases in taken.items():
            base = bases[platform][i]
            for group in bounds.batches(base, cases, bounds.load):
                if bounds.render(base, group) is None:
                    continue
                for case, error in bounds.culprits(base, group):
                    found[(platform, case.key.name)].append(f"{case.label} {str(case.value)[:60]!r}: render raised {error}")
    print(f"boundary values of {len(_keys())} keys in {time.monotonic() - started:.0f} s")
    return found


def _related(problem_key: str, key: str) -> bool:
    """The problem names the key, a section holding it or a key under it."""
    return any(a == b or b.startswith(a + ".") or b.startswith(a + "[") for a, b in ((problem_key, key), (key, problem_key)))


# One worker renders them all: make test's --dist loadfile keeps a file on one worker, and this group does
# the same under --dist loadgroup (the fixture is per module).
@pytest.mark.xdist_group("value_bounds")
@pytest.mark.parametrize(("platform", "key"), _keys())
def test_every_value_ends_in_a_plan_or_a_refusal_naming_the_key(
    outcomes: dict[tuple[str, str], list[str]], platform: str, key: str,
) -> None:
    assert outcomes.get((platform, key), []) == []
