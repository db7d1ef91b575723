"""Values that reach a host script or a URL are checked before anything is registered: `python -m
render` ends with exit 2 naming the key, where it used to end in a traceback after the program had
registered resources (network.roce.hca holding the scripts' here-document terminator,
wandb.baseUrl with port 99999)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import config
from components.lab.scripts import HEREDOC_END
from components.training import wandb_launch
from render import program
from tests.conftest import SEED_002_ROCE, lab_raw, stack_config_with
from tests.render_cli import render_cli

WANDB = {"enabled": True, "entity": "team", "queue": "gpu-queue"}


@pytest.mark.parametrize(("overrides", "secrets", "key"), [
    ({"network": {"linkGbps": 25, "rdma": True, "roce": {**SEED_002_ROCE, "hca": HEREDOC_END}}}, (),
     "network.roce.hca"),
    ({"wandb": {**WANDB, "baseUrl": "https://api.wandb.ai:99999"}}, ("wandbApiKey",), "wandb.baseUrl"),
], ids=["hca-terminator", "baseUrl-port-99999"])
def test_render_refuses_with_exit_2_naming_the_key(tmp_path: Path, overrides: dict[str, Any],
                                                   secrets: tuple[str, ...], key: str) -> None:
    result = render_cli(tmp_path, "lab", overrides, secrets)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"gpu-cluster:{key}: " in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def problems(**overrides: Any) -> dict[str, str]:
    with pytest.raises(config.ConfigError) as err:
        config.parse(lab_raw(**overrides), {"sshPrivateKey", "wandbApiKey"})
    return dict(err.value.problems)


def roce(**changes: Any) -> dict[str, Any]:
    return {"linkGbps": 25, "rdma": True, "roce": {**SEED_002_ROCE, **changes}}


@pytest.mark.parametrize("hca", ["MLX5_0", "Irdma0", "0mlx5", "mlx5 0", "mlx5_0\n", "a" * 64, ""])
def test_hca_is_an_rdma_device_name(hca: str) -> None:
    assert "RDMA device name" in problems(network=roce(hca=hca))["network.roce.hca"]


@pytest.mark.parametrize("hca", ["irdma0", "mlx5_0", "rocep59s0f0", "bnxt_re0", "efa_0", "rxe0", "a" * 63])
def test_hca_names_drivers_give_are_taken(hca: str) -> None:
    cfg = config.parse(lab_raw(network=roce(hca=hca), training={"image": "r.example.com/t:1", "enabled": False}),
                       {"sshPrivateKey"})
    assert cfg.network.roce is not None and cfg.network.roce.hca == hca


BAD_URLS = {
    "port 99999": ("https://api.wandb.ai:99999", "port 99999"),
    "port 65536": ("https://api.wandb.ai:65536", "port 65536"),
    "port 0": ("https://api.wandb.ai:0", "port 0"),
    "leading zero": ("https://api.wandb.ai:0443", "leading zeros"),
    "5000-digit port": ("https://api.wandb.ai:" + "9" * 5000, "not a TCP port"),
    "http": ("http://api.wandb.ai", "https://"),
    "localhost": ("https://localhost:8080", "this machine"),
    "empty label": ("https://a..b", "DNS name"),
    "user part": ("https://user@host", "DNS name"),
}


@pytest.mark.parametrize("case", BAD_URLS)
def test_wandb_base_url_refused(case: str) -> None:
    url, words = BAD_URLS[case]
    assert words in problems(wandb={**WANDB, "baseUrl": url})["wandb.baseUrl"]


@pytest.mark.parametrize(("url", "port"), [("https://api.wandb.ai", 443), ("https://wandb.example.com:65535/x", 65535),
                                           ("https://10.0.0.5:1", 1)])
def test_wandb_base_url_port_is_what_the_egress_policy_opens(url: str, port: int) -> None:
    values = stack_config_with("lab", wandb={**WANDB, "baseUrl": url})
    values[0]["gpu-cluster:wandbApiKey"] = "[secret]"
    plan = program.run("lab", config=(values[0], [*values[1], "gpu-cluster:wandbApiKey"]))
    assert wandb_launch.api_port(plan.config.wandb) == port


@pytest.mark.parametrize(("overrides", "key"), [
    ({"storage": {"provision": True, "exportPath": f"/srv/{HEREDOC_END}"}}, "storage.exportPath"),
    ({"network": roce(ncclEnv={"NCCL_IB_TC": HEREDOC_END})}, "network.roce.ncclEnv"),
    ({"training": {"nccl": {"socketIfname": HEREDOC_END}}}, "training.nccl.socketIfname"),
])
def test_no_value_holds_the_script_terminator(overrides: dict[str, Any], key: str) -> None:
    assert "end marker of the host scripts" in problems(**overrides)[key]


@pytest.mark.parametrize("ifname", ["a" * 16, "eth0," + "b" * 16, "eth0=", "^", "eth0,",
                                    pytest.param("a" * 10_000, id="10000-characters")])
def test_socket_ifname_items_are_interface_names(ifname: str) -> None:
    assert "interface names" in problems(training={"nccl": {"socketIfname": ifname}})["training.nccl.socketIfname"]


@pytest.mark.parametrize("ifname", ["eth0", "^lo,docker", "=eth0", "^=docker0", "a" * 15, "ens1f0,ib0"])
def test_socket_ifname_forms_nccl_reads_are_taken(ifname: str) -> None:
    cfg = config.parse(lab_raw(training={"nccl": {"socketIfname": ifname}}), {"sshPrivateKey"})
    assert cfg.training.nccl.socket_ifname == ifname
