"""GPU counts and MIG profiles held to what exists (config/gpu_inventory.py, config/mig_profiles.py):
a host's GPUs up to the densest real server, dev's declared GPU nodes fitting the training job, and
a MIG layout some GPU (the pool's GPU, where the config knows it) has."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import config
from config.gcp import accelerators
from config.mig_profiles import GKE_ACCELERATOR_GPU, OPERATOR_LAYOUTS, PROFILES_BY_GPU, gke_partition_problem
from render import program
from tests.config.refusals import accepted, reported
from tests.conftest import host, lab_raw, stack_config_with

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"
GCP = {"gcp:project": "my-gpu-project", "gcp:region": "us-central1"}


def dev(**overrides: Any) -> dict[str, Any]:
    return {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"], **overrides}


def dev_training(**training: Any) -> dict[str, Any]:
    return {"training": {"enabled": True, "image": IMAGE, **training}, "storage": {"useDefaultClass": True}}


# --- GPUs per node ---------------------------------------------------------------------------------


@pytest.mark.parametrize("gpus", [17, 1_000_000])
def test_lab_host_gpus_beyond_any_server_are_refused(gpus: int) -> None:
    raw = lab_raw()
    raw["hosts"][1]["gpus"] = gpus
    reported(raw, "hosts[1].gpus", "at most 16")


def test_lab_host_with_16_gpus_is_accepted() -> None:
    raw = lab_raw()
    raw["hosts"][1]["gpus"] = 16
    accepted(raw)


def test_dev_committed_stack_refuses_more_gpus_per_pod_than_its_node_has() -> None:
    """The issue's case: the committed dev stack (its minikube node declared with its one GPU) and 16 GPUs
    per pod."""
    values, secret_keys = stack_config_with("dev", training={"gpusPerNode": 16})
    with pytest.raises(config.ConfigError) as info:
        program.run("dev", config=(values, secret_keys))
    assert ("training.gpusPerNode", "16 GPUs per pod but no GPU node has more than 1 (gpuNodeGpus)") \
        in info.value.problems


def test_dev_pods_must_fit_the_declared_nodes() -> None:
    nodes = {"gpuNodes": ["a", "b"], "gpuNodeGpus": {"a": 2, "b": 1}}
    accepted(dev(**nodes, **dev_training(nodes=2, gpusPerNode=1)))
    accepted(dev(**nodes, **dev_training(nodes=1, gpusPerNode=2)))
    reported(dev(**nodes, **dev_training(nodes=2, gpusPerNode=2)), "training.gpusPerNode", "2 x 2 GPUs do not fit")


def test_dev_unknown_counts_are_not_guessed() -> None:
    """A node without a declared count could have any: nothing is refused on its account."""
    accepted(dev(gpuNodes=["a", "b"], gpuNodeGpus={"a": 1}, **dev_training(nodes=2, gpusPerNode=8)))


@pytest.mark.parametrize(("gpus", "words"), [
    ({"other": 1}, ("other is not in gpuNodes",)),
    ({"minikube": 0}, ("minikube: 0 GPUs", "1 to 16")),
    ({"minikube": 17}, ("minikube: 17 GPUs", "1 to 16")),
])
def test_dev_gpu_node_gpus_refused(gpus: dict[str, int], words: tuple[str, ...]) -> None:
    reported(dev(gpuNodeGpus=gpus), "gpuNodeGpus", *words)


def test_dev_declared_counts_reach_the_pair_check() -> None:
    """Two dev nodes of equal declared count: the NCCL pair check pairs them (dev knew no count before)."""
    values, secret_keys = stack_config_with("dev", gpuNodes=["gpu-a", "gpu-b"],
                                            gpuNodeGpus=json.dumps({"gpu-a": 1, "gpu-b": 1}), network={"linkGbps": 100})
    out = program.run("dev", config=(values, secret_keys)).outputs["gpuHealth"]["ncclPairCheck"]
    assert isinstance(out, dict) and list(out["pairs"].values()) == ["gpu-a,gpu-b"]


# --- MIG profiles ----------------------------------------------------------------------------------


def mig(profile: str, strategy: str = "single") -> dict[str, Any]:
    return {"stack": "operator", "sharing": {"mode": "mig", "migStrategy": strategy, "migProfile": profile}}


@pytest.mark.parametrize("profile", ["all-99g.1gb", "all-1g.99gb", "all-7g.10gb", "all-5g.40gb"])
def test_a_profile_no_gpu_has_is_refused(profile: str) -> None:
    reported(lab_raw(gpu=mig(profile)), "gpu.sharing.migProfile", "no NVIDIA GPU has MIG profile")


@pytest.mark.parametrize("profile", ["all-1g.5gb", "all-1g.10gb", "all-3g.40gb", "all-7g.141gb", "all-1g.23gb",
                                     "all-4g.24gb", "all-balanced"])
def test_real_profiles_are_accepted_where_the_gpu_is_unknown(profile: str) -> None:
    accepted(lab_raw(gpu=mig(profile)))


def test_profile_table_follows_nvidias_naming() -> None:
    """Each GPU's profiles as the MIG user guide names them: <g>g.<memory>gb with g of the GPU's compute
    slices (7, or 4 on A30 and RTX PRO 6000), the whole GPU's profile carrying the model's memory, and
    memory growing with the slices."""
    for model, profiles in PROFILES_BY_GPU.items():
        parsed = [tuple(map(int, re.fullmatch(r"(\d)g\.(\d+)gb", p).groups())) for p in profiles]  # type: ignore[union-attr]
        whole = max(parsed)
        assert whole[0] in (4, 7), model
        assert f"{whole[1]}GB" in model, (model, whole)
        assert all(g <= whole[0] and m <= whole[1] for g, m in parsed), model
        assert sorted(parsed) == parsed, model
        assert all(f"all-{p}" in OPERATOR_LAYOUTS for p in profiles)


def test_gke_partition_sizes_agree_with_the_table() -> None:
    """GKE's own partitions (gke.gpuPools[].migPartitionSize) are profiles of the pool's GPU."""
    for acc in accelerators.ACCELERATORS.values():
        if acc.mig_partitions:
            assert acc.type in GKE_ACCELERATOR_GPU
            assert gke_partition_problem(acc.type, acc.mig_partitions) is None


def gke_mig(profile: str, accelerator: str = "nvidia-tesla-a100", machine: str = "a2-highgpu-1g") -> dict[str, Any]:
    pools = [
        {"name": "l4", "machineType": "g2-standard-8", "accelerator": {"type": "nvidia-l4", "count": 1},
         "zones": ["us-central1-a"], "driver": "installer-ubuntu"},
        {"name": "big", "machineType": machine, "accelerator": {"type": accelerator, "count": 1},
         "zones": ["us-central1-a"], "autoscaling": {"minNodes": 1, "maxNodes": 2}, "driver": "installer-ubuntu"},
    ]
    return {"platform": "gke", **GCP, "gpu": mig(profile), "gke": {"zone": "us-central1-a", "gpuPools": pools}}


def test_gke_checks_the_profile_against_the_pools_gpu() -> None:
    accepted(gke_mig("all-1g.10gb"))  # A100 40GB has 1g.10gb (four of them)
    accepted(gke_mig("all-balanced"))
    reported(gke_mig("all-3g.40gb"), "gpu.sharing.migProfile", "gke.gpuPools[1]", "A100 40GB has no MIG profile 3g.40gb")
    accepted(gke_mig("all-3g.40gb", "nvidia-a100-80gb", "a2-ultragpu-1g"))


def test_gke_mig_needs_a_mig_capable_pool() -> None:
    raw = gke_mig("all-1g.10gb")
    raw["gke"]["gpuPools"] = raw["gke"]["gpuPools"][:1]
    reported(raw, "gpu.sharing.migProfile", "no GPU pool has a MIG-capable GPU (nvidia-l4)")


def test_lab_gpu_hosts_in_the_table_message_are_unaffected() -> None:
    """The GPU count cap leaves the committed stacks alone."""
    raw = lab_raw(hosts=[host("cp-1", "192.0.2.10", "control-plane"), host("g", "192.0.2.11", gpus=8)])
    accepted(raw)
