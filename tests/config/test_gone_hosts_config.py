"""hosts[].gone (config/lab_hosts.py gone_problems): a dead host the next `up` forgets. Refused,
naming gpu-cluster:hosts[i].gone: more gone control planes than etcd's quorum leaves room for (the
only one included). The first control plane may be gone: the next one is the entry point."""

from __future__ import annotations

from typing import Any

from tests.config.refusals import accepted, reported
from tests.conftest import host, lab_raw

VIP = {"address": "192.0.2.100", "interface": "ens18"}


def _hosts(n: int, gone: tuple[str, ...]) -> list[dict[str, Any]]:
    planes = [host(f"cp-{i}", f"192.0.2.{10 * i}", "control-plane", gone=f"cp-{i}" in gone) for i in range(1, n + 1)]
    return [*planes, host("gpu-1", "192.0.2.11", gpus=2, gone="gpu-1" in gone),
            host("gpu-2", "192.0.2.12", gpus=2)]


def test_a_gone_worker_and_a_gone_control_plane_of_three_are_accepted():
    cfg = accepted(lab_raw(hosts=_hosts(3, ("cp-3", "gpu-1")), kubeVip=VIP))
    assert [h.name for h in cfg.gone] == ["cp-3", "gpu-1"]
    assert len(cfg.control_planes) == 3  # still listed: its steps are kept, retained, until the entry goes


def test_the_only_control_plane_cannot_be_gone():
    reported(lab_raw(hosts=_hosts(1, ("cp-1",))), "hosts[0].gone", "leaves 0", "etcd snapshot")


def test_the_first_of_three_may_be_gone_and_the_next_takes_over():
    """Issue 34: no special first server; the entry point is the first control plane not gone."""
    cfg = accepted(lab_raw(hosts=_hosts(3, ("cp-1",)), kubeVip=VIP))
    assert cfg.entry_point.name == "cp-2"


def test_two_of_three_gone_leave_no_quorum():
    reported(lab_raw(hosts=_hosts(3, ("cp-2", "cp-3")), kubeVip=VIP), "hosts[2].gone", "fewer than etcd's quorum of 2",
             "restore from an etcd snapshot")


def test_two_of_five_gone_are_accepted():
    accepted(lab_raw(hosts=_hosts(5, ("cp-4", "cp-5")), kubeVip=VIP))
