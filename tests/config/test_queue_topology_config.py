"""Topology levels and GPU-model flavors in config (config/lab_hosts.py, config/queue_flavors.py):
hosts[].block and hosts[].gpuModel (every GPU host or none, each rack in one block, the model as GFD
spells it), queues.rdmaTopologyLevel (a level the cluster has), a team's GPUs per model (a mapping
naming models the hosts have, within each); refused naming the key, exit 2, and what is accepted."""

from __future__ import annotations

from typing import Any

from config.queue_flavors import TOPOLOGY_NAME, required_topology
from config.queues import flavors
from config.scheduling_contract import (
    BLOCK_LABEL,
    GKE_BLOCK_LABEL,
    GKE_HOST_LABEL,
    GKE_SUBBLOCK_LABEL,
    GPU_MODEL_LABEL,
    RACK_LABEL,
)
from tests.config.refusals import accepted, reported
from tests.config.test_gke_config import gke_raw
from tests.config.test_queues_config import dev_raw, queues, team
from tests.conftest import host, lab_raw

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def two_models(queues: dict[str, Any] | None = None, **per_host: list[Any]) -> dict[str, Any]:
    """A lab of two H100 hosts (4 GPUs each) then two A100 hosts (2 each); `per_host`: a field's value
    on each GPU host in that order (None: left out); `queues` as given."""
    gpu = [host(f"h100-{i}", f"192.0.2.2{i}", gpus=4, gpuModel=H100) for i in (1, 2)]
    gpu += [host(f"a100-{i}", f"192.0.2.3{i}", gpus=2, gpuModel=A100) for i in (1, 2)]
    for key, values in per_host.items():
        for h, v in zip(gpu, values, strict=True):
            if v is not None:
                h[key] = v
    raw = lab_raw(hosts=[host("cp-1", "192.0.2.10", "control-plane"), *gpu])
    return {**raw, "queues": queues} if queues is not None else raw


# --- hosts[].block -------------------------------------------------------------------------------

def test_a_block_on_some_gpu_hosts_only_is_refused() -> None:
    reported(two_models(block=["b1", "b1", "b1", None]), "hosts[4].block", "every GPU host must name one")


def test_a_rack_in_two_blocks_is_refused() -> None:
    raw = two_models(rack=["r1", "r1", "r2", "r2"], block=["b1", "b2", "b2", "b2"])
    reported(raw, "hosts[2].block", "rack 'r1' is in block 'b1'", "exactly one block")


def test_a_block_must_be_a_label() -> None:
    reported(two_models(block=["Block 1"] * 4), "hosts[1].block", "RFC 1123")


def test_blocks_over_racks_make_a_three_level_topology() -> None:
    cfg = accepted(two_models(rack=["r1", "r1", "r2", "r3"], block=["b1", "b1", "b1", "b2"]))
    assert [f.topology for f in flavors(cfg)] == [(TOPOLOGY_NAME, (BLOCK_LABEL, RACK_LABEL, "kubernetes.io/hostname"))] * 2
    blocks_only = accepted(two_models(block=["b1", "b1", "b2", "b2"]))
    assert flavors(blocks_only)[0].topology == (TOPOLOGY_NAME, (BLOCK_LABEL, "kubernetes.io/hostname"))


# --- queues.rdmaTopologyLevel --------------------------------------------------------------------

def test_the_rdma_level_defaults_to_the_rack_else_the_block() -> None:
    with_racks = accepted(two_models(rack=["r1", "r1", "r2", "r2"], block=["b1"] * 4, queues=queues(team(gpus=1))))
    assert required_topology(with_racks) == RACK_LABEL
    blocks = accepted(two_models(block=["b1"] * 4, queues=queues(team(gpus=1))))
    assert required_topology(blocks) == BLOCK_LABEL
    chosen = accepted(two_models(rack=["r1", "r1", "r2", "r2"], block=["b1"] * 4,
                                 queues=queues(team(gpus=1), rdmaTopologyLevel="block")))
    assert required_topology(chosen) == BLOCK_LABEL
    assert required_topology(accepted(two_models(queues=queues(team(gpus=1))))) is None


def test_a_level_the_lab_does_not_have_is_refused() -> None:
    raw = two_models(rack=["r1", "r1", "r2", "r2"], queues=queues(team(gpus=1), rdmaTopologyLevel="block"))
    reported(raw, "queues.rdmaTopologyLevel", "no GPU host names its block", "rack, host")
    reported(two_models(queues=queues(team(gpus=1), rdmaTopologyLevel="rack")), "queues.rdmaTopologyLevel",
             "hosts[].rack")
    reported(two_models(queues=queues(team(gpus=1), rdmaTopologyLevel="aisle")), "queues.rdmaTopologyLevel",
             "block", "rack", "host")


def test_a_level_without_queues_or_on_dev_is_refused() -> None:
    reported(two_models(rack=["r1"] * 4, queues={"enabled": False, "rdmaTopologyLevel": "rack"}),
             "queues.rdmaTopologyLevel", "queues.enabled is false")
    reported(dev_raw(queues=queues(team(gpus=1), rdmaTopologyLevel="rack")),
             "queues.rdmaTopologyLevel", "dev")


def test_gke_names_googles_topology_only_when_a_level_is_set() -> None:
    plain = accepted({**gke_raw(), "queues": queues(team(gpus=1))})
    assert all(f.topology is None for f in flavors(plain)) and required_topology(plain) is None
    # The level needs a pool Google labels (an A3 Ultra reservation: tests/stacks/test_gke_google_topology.py).
    h200 = {"name": "h200-res", "machineType": "a3-ultragpu-8g", "accelerator": {"type": "nvidia-h200-141gb", "count": 8},
            "zones": ["us-central1-a"], "provisioning": "reservation", "reservation": "h200-block"}
    cfg = accepted({**gke_raw(*gke_raw()["gke"]["gpuPools"], h200), "queues": queues(team(gpus=1), rdmaTopologyLevel="rack")})
    levels = (GKE_BLOCK_LABEL, GKE_SUBBLOCK_LABEL, GKE_HOST_LABEL, "kubernetes.io/hostname")
    assert [f.topology for f in flavors(cfg)] == [(TOPOLOGY_NAME, levels)] * 3
    assert required_topology(cfg) == GKE_SUBBLOCK_LABEL


# --- hosts[].gpuModel and per-model quotas ---------------------------------------------------------

def test_one_flavor_per_gpu_model_in_host_order() -> None:
    cfg = accepted(two_models(queues=queues(team(gpus={H100: 4, A100: 2}))))
    got = [(f.name, f.node_labels, f.gpus, f.model) for f in flavors(cfg)]
    assert got == [("nvidia-h100-80gb-hbm3", {GPU_MODEL_LABEL: H100}, 8, H100),
                   ("nvidia-a100-sxm4-80gb", {GPU_MODEL_LABEL: A100}, 4, A100)]


def test_a_gpu_model_must_be_gfds_unshared_name() -> None:
    reported(two_models(gpuModel=["NVIDIA H100 80GB HBM3", H100, A100, A100]), "hosts[1].gpuModel",
             "nvidia.com/gpu.product")
    reported(two_models(gpuModel=[f"{H100}-SHARED", H100, A100, A100]), "hosts[1].gpuModel", "-SHARED")
    reported(two_models(gpuModel=[f"{A100}-MIG-1g.10gb", H100, A100, A100]), "hosts[1].gpuModel", "MIG")


def test_two_spellings_of_one_model_are_refused() -> None:
    # Both would be the ResourceFlavor nvidia-h100-80gb-hbm3.
    reported(two_models(gpuModel=[H100, "nvidia-h100-80gb-hbm3", A100, A100]), "hosts[2].gpuModel", "only in case")


def test_a_gpu_model_on_some_gpu_hosts_only_or_on_a_cpu_host_is_refused() -> None:
    raw = two_models()
    del raw["hosts"][4]["gpuModel"]
    reported(raw, "hosts[4].gpuModel", "every GPU host must name one")
    raw = two_models()
    raw["hosts"].append(host("cpu-1", "192.0.2.40", gpuModel=H100))
    reported(raw, "hosts[5].gpuModel", "without GPUs")


def test_a_quota_naming_a_model_no_host_has_is_refused() -> None:
    raw = two_models(queues=queues(team(gpus={"NVIDIA-B200": 1})))
    reported(raw, "queues.teams[0].gpus.NVIDIA-B200", "no GPU node has model", H100, A100)


def test_a_quota_beyond_a_models_gpus_is_refused() -> None:
    reported(two_models(queues=queues(team(gpus={A100: 5}))), f"queues.teams[0].gpus.{A100}", "5 GPUs", "has 4")
    # A number is in every flavor: beyond the smaller model, the mapping is the way out.
    reported(two_models(queues=queues(team(gpus=5))), "queues.teams[0].gpus", "has 4", "mapping")
    reported(two_models(queues=queues(team("a", gpus={H100: 5}), team("b", gpus={H100: 4}))), "queues.teams",
             "add up to 9", "nvidia-h100-80gb-hbm3")


def test_a_number_still_means_every_flavor() -> None:
    cfg = accepted(two_models(queues=queues(team("a", gpus=2), team("b", gpus={H100: 6}))))
    assert [t.gpus for t in cfg.queues.teams] == [2, {H100: 6}]
    reported(two_models(queues=queues(team(gpus={H100: -1}))), "queues.teams[0].gpus", "0 or more")
