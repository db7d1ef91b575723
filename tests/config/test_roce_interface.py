"""network.roce.interface that is the node's own network interface (config/roce_interface.py): refused
naming the key where the config tells (dev: minikube's and kind's eth0; lab: kubeVip.interface on a
GPU control plane), a `warning:` on stderr and in summary.md's Warnings where it cannot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from render import __main__ as render_main
from render import program
from tests.config.refusals import accepted, reported
from tests.conftest import SEED_002_ROCE, host, lab_raw, stack_config_with

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"
_RUN = program.run  # before any test patches it


def roce(**changes: Any) -> dict[str, Any]:
    return {"linkGbps": 25, "rdma": True, "roce": {**SEED_002_ROCE, **changes}}


def dev(**overrides: Any) -> dict[str, Any]:
    return {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"], "training": {"image": IMAGE},
            **overrides}


def lab_ha(gpu_control_plane: bool, **overrides: Any) -> dict[str, Any]:
    hosts = [host(f"cp-{i}", f"192.0.2.{10 * i}", "control-plane", gpus=2 if gpu_control_plane and i == 1 else 0)
             for i in (1, 2, 3)]
    return lab_raw(hosts=[*hosts, host("gpu-1", "192.0.2.11", gpus=2)], training={"image": IMAGE},
                   kubeVip={"address": "192.0.2.100", "interface": "ens18"}, **overrides)


def test_dev_eth0_is_refused():
    reported(dev(network=roce(interface="eth0")), "network.roce.interface", "eth0 is the node's own interface",
             "minikube", "drops off the network")


def test_dev_another_name_is_accepted_and_warned():
    cfg = accepted(dev(network=roce(interface="ens192")))
    warning = cfg.roce_interface_warning()
    assert warning is not None
    assert "network.roce.interface ens192" in warning and "cannot tell" in warning and "InternalIP" in warning


def test_lab_kube_vip_interface_on_a_gpu_control_plane_is_refused():
    reported(lab_ha(True, network=roce(interface="ens18")), "network.roce.interface", "kubeVip.interface", "cp-1")


def test_lab_kube_vip_interface_without_a_gpu_control_plane_is_only_warned():
    """The workers' interfaces are not named anywhere: the same name may be a different NIC there."""
    cfg = accepted(lab_ha(False, network=roce(interface="ens18")))
    warning = cfg.roce_interface_warning()
    assert warning is not None
    assert "hosts[] do not name their interfaces" in warning and "hosts[].address" in warning


def test_no_roce_no_warning():
    assert accepted(lab_raw()).roce_interface_warning() is None
    assert accepted(dev()).roce_interface_warning() is None


def test_render_prints_the_warning_and_summary_lists_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    overrides = {"network": roce(), "training": {"image": IMAGE}}
    monkeypatch.setattr(render_main.program, "run",
                        lambda s, **kw: _RUN(s, config=kw.get("config") or stack_config_with(s, **overrides)))
    rc = render_main.main(["lab", "--out", str(tmp_path / "out"), "--no-check"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert any(line.startswith("warning: gpu-cluster:network.roce.interface ens192") for line in err.splitlines()), err
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Warnings" in summary and "network.roce.interface ens192" in summary
