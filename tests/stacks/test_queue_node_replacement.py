"""kueue#9616 in the whole-cluster check: lab-ha with both GPU hosts in one rack and RDMA (its queued
jobs require the rack), the GPU health service tainting a host under an admitted job. The program's
Kueue (components/queues/kueue.py: failed-node replacement gates on, recoveryTimeout set) never
leaves the replacement pod pinned; a manager Configuration that turns both off fails the check
(exit 3) naming the job."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.queues import kueue
from render import cluster, program
from tests.stacks.test_queue_topology import ROCE, _plan

PINNED = "kueue#9616"


@pytest.fixture(scope="module")
def one_rack() -> program.Plan:
    return _plan("r1", "r1", network=ROCE)


def _with_manager_config(plan: program.Plan, **changes: dict[str, Any]) -> program.Plan:
    plan = copy.deepcopy(plan)
    (release,) = [r for r in plan.resources if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs.get("name") == kueue.RELEASE_NAME]
    manager = release.inputs["values"]["managerConfig"]
    doc = yaml.safe_load(manager["controllerManagerConfigYaml"])
    for key, value in changes.items():
        doc[key] = {**(doc.get(key) or {}), **value}
    manager["controllerManagerConfigYaml"] = yaml.safe_dump(doc)
    return plan


def test_the_programs_kueue_never_leaves_a_pod_pinned_to_a_tainted_host(one_rack: program.Plan, upstream_dir: Path) -> None:
    report = cluster.check(one_rack, one_rack.config, upstream_dir)
    assert not [p for p in report.problems if PINNED in p], report.problems
    assert any("admitted whole" in q for q in report.queued), report.queued


def test_a_manager_config_that_pins_pods_to_a_tainted_host_fails_the_check(one_rack: program.Plan,
                                                                           upstream_dir: Path) -> None:
    plan = _with_manager_config(one_rack, featureGates={"TASFailedNodeReplacement": False},
                                waitForPodsReady={"recoveryTimeout": "0s"})
    report = cluster.check(plan, plan.config, upstream_dir)
    pinned = [p for p in report.problems if PINNED in p]
    assert pinned and not report.ok, report.problems
    assert any("nccl-acceptance" in p and "gpu-cluster.io/gpu-unhealthy" in p for p in pinned), pinned
    assert all("recoveryTimeout above 0s" in p for p in pinned), pinned


def test_recovery_timeout_alone_is_enough(one_rack: program.Plan, upstream_dir: Path) -> None:
    """The gates off but recoveryTimeout on: requeued after it, not pinned."""
    plan = _with_manager_config(one_rack, featureGates={"TASFailedNodeReplacement": False})
    report = cluster.check(plan, plan.config, upstream_dir)
    assert not [p for p in report.problems if PINNED in p], report.problems
