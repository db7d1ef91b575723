"""Shared fixtures: the Pulumi mocks (set per test, never at module level), the upstream data
folder, and small builders of valid configs."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime.settings import set_root_resource

import config
from render import program
from render.cluster import memo

# Every plan a test renders also goes through the whole-cluster check (tests/whole_cluster.py).
pytest_plugins = ["tests.whole_cluster"]

PROJECT_DIR = Path(__file__).resolve().parent.parent

# An example host key: well-formed ("ssh-ed25519" + 32 bytes in SSH wire format), of no real host.
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE8N2wz1xVb2cNQv7m4s1M8pC1xq2mC5yY0d3x7lW9eJ"


IN_CI = os.environ.get("CI", "").lower() == "true"

# The whole-cluster check's disk memo (render/cluster/memo.py): one folder for this test run (xdist's
# workers inherit it), removed at its end, so no test reads what an earlier run or ./plan left behind.
if memo.CACHE_ENV not in os.environ:
    _MEMO_DIR = tempfile.mkdtemp(prefix="gpu-cluster-check-memo-")
    os.environ[memo.CACHE_ENV] = _MEMO_DIR
    atexit.register(shutil.rmtree, _MEMO_DIR, True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Under CI=true a skip is a failure: .ci/run installs every tool the tests use (promtool,
    Prometheus, Alertmanager, shellcheck, iproute2, nftables, the upstream data), so a skip there
    means a test that proved nothing while CI went green. That happened: Alertmanager was not
    installed and the GPU health end-to-end tests skipped quietly."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (CI installs every tool the tests need): {reason}"


@pytest.fixture
def mocks() -> program.ProgramMocks:
    """Fresh mocks for this test: every resource registered is recorded in `mocks.plan`."""
    plan = program.Plan(stack="test")
    m = program.ProgramMocks()
    set_root_resource(None)  # set_mocks reuses an existing root stack; start from none
    pulumi.runtime.set_mocks(m, project="gpu-cluster", stack="test", preview=False,
                             monitor=program.RecordingMonitor(m, plan))
    m.plan = plan  # type: ignore[attr-defined]
    return m


@pytest.fixture(scope="session")
def upstream_dir() -> Path:
    """../shared/upstream (or $GPU_CLUSTER_UPSTREAM): upstream chart defaults and CRDs."""
    path = Path(os.environ.get("GPU_CLUSTER_UPSTREAM", PROJECT_DIR.parent / "shared" / "upstream"))
    if not path.is_dir():
        if IN_CI:  # CI must not pass by skipping the upstream checks
            pytest.fail(f"upstream reference data not found at {path} (CI=true; set GPU_CLUSTER_UPSTREAM)")
        pytest.skip(f"upstream reference data not found at {path} (set GPU_CLUSTER_UPSTREAM)")
    return path


# Seed 002's RoCE NIC (Intel E810, irdma, GID index 1 for RoCE v2 over IPv4; the PCI address is
# an example: the post does not print it) and a range for the pods' net1. Not the seed's
# 10.100.100.0/30: that lies inside kubeadm's default serviceCidr 10.96.0.0/12 (refused).
SEED_002_ROCE: dict[str, Any] = {
    "interface": "ens192", "pciAddress": "0000:3b:00.0", "hca": "irdma0", "driver": "ice",
    "gidIndex": 1, "range": "192.168.100.0/24",
}


def host(name: str, address: str, role: str = "worker", gpus: int = 0, **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": address, "role": role, "gpus": gpus, "hostKey": ED25519, **extra}


def stack_config_with(stack: str, **overrides: Any) -> tuple[dict[str, str], list[str]]:
    """The committed Pulumi.<stack>.yaml's config (program.run's `config`) with keys overridden: an
    object is merged into the committed one, None removes the key, anything else replaces it (strings
    as given)."""
    values, secret_keys = program.stack_config(stack)
    out = dict(values)
    for key, value in overrides.items():
        full = f"gpu-cluster:{key}"
        if value is None:
            out.pop(full, None)
            continue
        if isinstance(value, dict) and out.get(full):
            value = {**json.loads(out[full]), **value}
        out[full] = value if isinstance(value, str) else json.dumps(value)
    return out, secret_keys


def lab_raw(**overrides: Any) -> dict[str, Any]:
    """A valid lab config (keys as in the stack file, without the namespace)."""
    raw: dict[str, Any] = {
        "platform": "lab",
        "hosts": [
            host("cp-1", "192.0.2.10", "control-plane"),
            host("gpu-1", "192.0.2.11", gpus=2),
            host("cpu-1", "192.0.2.12"),
        ],
    }
    raw.update(overrides)
    return raw


def lab_config(**overrides: Any) -> config.LabStack:
    cfg = config.parse(lab_raw(**overrides), {"sshPrivateKey"})
    assert isinstance(cfg, config.LabStack)
    return cfg
