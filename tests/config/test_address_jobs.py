"""One address, one job (config/control_planes.py, config/address_plan.py): kubeVip.address is no
host's, not the NFS server's and in no range the cluster hands out; with more than one control
plane, controlPlaneEndpoint is not one host's own address (the API would live and die with that
host). Refused naming the key before anything is registered."""

from __future__ import annotations

from typing import Any

import pytest

import config
from render import program
from tests.config.refusals import accepted, problems, reported
from tests.conftest import SEED_002_ROCE, host, lab_raw, stack_config_with

VIP = {"address": "192.0.2.100", "interface": "ens18"}


def three_cps(**overrides: Any) -> dict[str, Any]:
    """3 control planes (192.0.2.10/20/30), a GPU worker 192.0.2.11 and a CPU worker 192.0.2.12."""
    hosts = [host(f"cp-{i}", f"192.0.2.{10 * i}", "control-plane") for i in (1, 2, 3)]
    return lab_raw(hosts=[*hosts, host("gpu-1", "192.0.2.11", gpus=2), host("cpu-1", "192.0.2.12")], **overrides)


def test_the_vip_is_not_the_nfs_server():
    raw = three_cps(kubeVip=VIP, storage={"nfs": {"server": "192.0.2.100", "path": "/export"}})
    reported(raw, "kubeVip.address", "storage.nfs.server", "free address")
    accepted(three_cps(kubeVip=VIP, storage={"nfs": {"server": "192.0.2.50", "path": "/export"}}))
    accepted(three_cps(kubeVip=VIP, storage={"nfs": {"server": "nas.lab.example", "path": "/export"}}))


@pytest.mark.parametrize(("vip", "overrides", "range_key"), [
    ("10.244.0.100", {}, "podCidr"),
    ("10.96.0.100", {}, "serviceCidr"),
    ("192.168.100.5", {"network": {"linkGbps": 25, "rdma": True, "roce": SEED_002_ROCE}}, "network.roce.range"),
])
def test_the_vip_in_a_range_is_refused(vip: str, overrides: dict[str, Any], range_key: str):
    found = problems(three_cps(kubeVip={**VIP, "address": vip}, **overrides))
    assert any(k == range_key and f"kubeVip.address {vip}" in m for k, m in found), found


@pytest.mark.parametrize(("endpoint", "who"), [
    ("192.0.2.10:6443", "cp-1, a control-plane"),
    ("192.0.2.30:443", "cp-3, a control-plane"),
    ("192.0.2.11:6443", "gpu-1, a worker"),
    ("192.0.2.12:8443", "cpu-1, a worker"),
])
def test_an_endpoint_on_one_host_is_refused_with_several_control_planes(endpoint: str, who: str):
    reported(three_cps(controlPlaneEndpoint=endpoint), "controlPlaneEndpoint", who, "high availability",
             "kubeVip", "load balancer")


def test_an_endpoint_without_a_port_is_refused():
    reported(three_cps(controlPlaneEndpoint="192.0.2.10"), "controlPlaneEndpoint", "host:port")


def test_a_load_balancer_or_one_control_plane_is_accepted():
    accepted(three_cps(controlPlaneEndpoint="192.0.2.200:6443"))
    accepted(three_cps(controlPlaneEndpoint="k8s-api.lab.example:6443"))  # a DNS name: not resolved here
    accepted(lab_raw(controlPlaneEndpoint="192.0.2.10:6443"))  # one control plane: its own address is the API


def test_lab_ha_refuses_before_registering_anything():
    cfg = stack_config_with("lab-ha", kubeVip=None, controlPlaneEndpoint="192.0.2.20:6443")
    with pytest.raises(config.ConfigError) as err:
        program.run("lab-ha", config=cfg)
    assert "gpu-cluster:controlPlaneEndpoint" in str(err.value) and "high availability" in str(err.value)
