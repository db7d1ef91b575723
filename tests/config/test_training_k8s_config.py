"""The training/acceptance/network/storage config keys: accepted shapes, rejected configs (each
error names its key), and the project file declaring them."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

import config
from config.addons import Addons
from config.fields import quantity_value
from config.lab import NfsExport
from config.training import RDMA_MIN_BUSBW_FRACTION, SOCKET_MIN_BUSBW_FRACTION, Launcher, NcclDebug
from tests.conftest import PROJECT_DIR, host, lab_raw

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"
DIGEST = "registry.example.com/trainer@sha256:" + "a" * 64


def lab_two_gpu_workers(**overrides: Any) -> dict[str, Any]:
    return lab_raw(
        hosts=[
            host("cp-1", "192.0.2.10", "control-plane"),
            host("gpu-1", "192.0.2.11", gpus=2),
            host("gpu-2", "192.0.2.12", gpus=1),
        ],
        **overrides,
    )


def dev_raw(**overrides: Any) -> dict[str, Any]:
    return {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"], **overrides}


def parse(raw: dict[str, Any]) -> config.StackConfig:
    return config.parse(raw, {"sshPrivateKey"} if raw["platform"] == "lab" else set())


def problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(config.ConfigError) as info:
        parse(raw)
    return info.value.problems


def assert_rejected(raw: dict[str, Any], key: str, *words: str) -> None:
    found = [m for k, m in problems(raw) if k == key]
    assert found, f"{key} not reported: {problems(raw)}"
    assert all(any(w in m for m in found) for w in words), (key, found)


def test_defaults_register_no_training():
    cfg = parse(lab_raw())
    assert cfg.training.enabled is False and cfg.acceptance.nccl is False
    assert cfg.training.launcher is Launcher.INDEXED_JOB
    # unset: the verdict's fraction follows the declared transport
    assert cfg.acceptance.min_busbw_fraction is None
    assert cfg.acceptance.busbw_fraction(rdma=True) == RDMA_MIN_BUSBW_FRACTION == 0.8
    assert cfg.acceptance.busbw_fraction(rdma=False) == SOCKET_MIN_BUSBW_FRACTION == 0.25
    assert cfg.acceptance.max_bytes == 2**30
    assert not cfg.storage.configured


def test_full_lab_training_config_parses():
    cfg = parse(lab_two_gpu_workers(
        training={"enabled": True, "image": IMAGE, "nodes": 2, "gpusPerNode": 1, "launcher": "pytorchjob",
                  "elastic": {"enabled": True, "minNodes": 1}, "nccl": {"debug": "INFO", "socketIfname": "^lo,docker"}},
        acceptance={"nccl": False, "minBusbwFraction": 0.8},
        network={"linkGbps": 25, "rdma": False},
        storage={"nfs": {"server": "nas.lab.example", "path": "/export/gpu"}},
    ))
    assert cfg.training.world_size == 2
    assert cfg.training.nccl.debug is NcclDebug.INFO
    assert cfg.network.link_gbps == 25.0 and not cfg.network.rdma
    assert cfg.storage.nfs == NfsExport(server="nas.lab.example", path="/export/gpu")


@pytest.mark.parametrize("image", [IMAGE, DIGEST, "localhost:5000/trainer:1", "trainer:v1.2.3-cuda12"])
def test_pinned_images_accepted(image):
    cfg = parse(dev_raw(training={"enabled": True, "image": image}, storage={"hostPath": "/data/shared"}))
    assert cfg.training.image == image


@pytest.mark.parametrize(
    ("image", "words"),
    [
        ("registry.example.com/trainer:latest", ("pinned", "latest")),
        ("registry.example.com/trainer", ("tag or digest",)),
        ("localhost:5000/trainer", ("tag or digest",)),
        ("registry.example.com/trainer@sha256:abc", ("digest",)),
        ("Registry/Trainer:1", ("image name",)),
    ],
)
def test_unpinned_or_malformed_images_rejected(image, words):
    assert_rejected(dev_raw(training={"enabled": True, "image": image}, storage={"hostPath": "/d"}), "training.image", *words)


def test_enabled_training_needs_an_image():
    assert_rejected(dev_raw(training={"enabled": True}, storage={"hostPath": "/d"}), "training.image", "training.enabled")
    assert_rejected(
        lab_two_gpu_workers(acceptance={"nccl": True}, training={"nodes": 2}, network={"linkGbps": 25},
                            storage={"provision": True}),
        "training.image", "acceptance.nccl",
    )


def test_nodes_beyond_configured_gpu_nodes_rejected():
    assert_rejected(
        lab_two_gpu_workers(training={"enabled": True, "image": IMAGE, "nodes": 3}, storage={"provision": True}),
        "training.nodes", "3", "2",
    )
    assert_rejected(dev_raw(training={"enabled": True, "image": IMAGE, "nodes": 2},
                            storage={"useDefaultClass": True}), "training.nodes", "gpuNodes")


def test_gpus_per_node_must_fit_on_lab_hosts():
    # gpu-1 has 2 GPUs, gpu-2 has 1: one pod with 2 fits, two pods with 2 do not.
    parse(lab_two_gpu_workers(training={"enabled": True, "image": IMAGE, "nodes": 1, "gpusPerNode": 2},
                              storage={"provision": True}))
    assert_rejected(
        lab_two_gpu_workers(training={"enabled": True, "image": IMAGE, "nodes": 2, "gpusPerNode": 2},
                            storage={"provision": True}),
        "training.gpusPerNode", "2 x 2",
    )


@pytest.mark.parametrize("fraction", [0, -0.5, 1.5])
def test_bad_busbw_fraction_rejected(fraction):
    assert_rejected(lab_raw(acceptance={"minBusbwFraction": fraction}), "acceptance.minBusbwFraction", "fraction")


def test_acceptance_below_one_gib_rejected():
    assert any(k == "acceptance.maxBytes" for k, _ in problems(lab_raw(acceptance={"maxBytes": 2**20})))


def test_pytorchjob_acceptance_and_training_in_one_up_rejected():
    """The acceptance PyTorchJob is not awaited: training would race it for the GPUs."""
    base = {"image": IMAGE, "nodes": 2, "launcher": "pytorchjob"}
    raw = lab_two_gpu_workers(training={**base, "enabled": True}, acceptance={"nccl": True},
                              network={"linkGbps": 25}, storage={"provision": True})
    assert_rejected(raw, "training.enabled", "pytorchjob", "acceptance.nccl", "training.enabled false first")
    # either one alone is fine, and indexed-job (whose acceptance Job `up` awaits) takes both
    parse(lab_two_gpu_workers(training={**base, "enabled": False}, acceptance={"nccl": True},
                              network={"linkGbps": 25}, storage={"provision": True}))
    parse(lab_two_gpu_workers(training={**base, "enabled": True}, acceptance={"nccl": False},
                              network={"linkGbps": 25}, storage={"provision": True}))
    parse(lab_two_gpu_workers(training={**base, "enabled": True, "launcher": "indexed-job"},
                              acceptance={"nccl": True}, network={"linkGbps": 25}, storage={"provision": True}))


def test_checkpoint_every_steps_defaults_off_and_rejects_negative():
    assert parse(lab_raw()).training.checkpoint_every_steps == 0
    assert parse(lab_raw(training={"checkpointEverySteps": 500})).training.checkpoint_every_steps == 500
    assert_rejected(lab_raw(training={"checkpointEverySteps": -1}), "training.checkpointEverySteps")


def test_acceptance_needs_two_nodes_and_a_link_rate():
    raw = lab_two_gpu_workers(training={"image": IMAGE}, acceptance={"nccl": True}, storage={"provision": True})
    assert_rejected(raw, "acceptance.nccl", "nodes >= 2")
    assert_rejected(raw, "network.linkGbps", "link rate")


def test_pytorchjob_needs_at_least_one_node():
    assert_rejected(dev_raw(training={"launcher": "pytorchjob", "nodes": 0}), "training.nodes")


def test_elastic_needs_pytorchjob_and_min_within_nodes():
    raw = lab_two_gpu_workers(training={"enabled": True, "image": IMAGE, "nodes": 2, "elastic": {"enabled": True}},
                              storage={"provision": True})
    assert_rejected(raw, "training.elastic.enabled", "pytorchjob")
    raw["training"] = {**raw["training"], "launcher": "pytorchjob", "elastic": {"enabled": True, "minNodes": 3}}
    assert_rejected(raw, "training.elastic.minNodes", "more than training.nodes")


def test_unknown_launcher_and_training_key_rejected():
    assert_rejected(lab_raw(training={"launcher": "mpijob"}), "training.launcher", "indexed-job", "pytorchjob")
    assert_rejected(lab_raw(training={"gpus": 1}), "training.gpus", "not a known key")


@pytest.mark.parametrize(
    ("training", "key"),
    [
        ({"cpuRequest": "9", "cpuLimit": "8"}, "training.cpuRequest"),
        ({"memoryRequest": "64Gi", "memoryLimit": "32Gi"}, "training.memoryRequest"),
        ({"shmSize": "64Gi"}, "training.shmSize"),
        ({"memoryLimit": "lots"}, "training.memoryLimit"),
        ({"nccl": {"socketIfname": "eth0; rm -rf /"}}, "training.nccl.socketIfname"),
        ({"nccl": {"debug": "LOUD"}}, "training.nccl.debug"),
        ({"maxRestarts": -1}, "training.maxRestarts"),
    ],
)
def test_bad_training_values_rejected(training, key):
    assert any(k == key for k, _ in problems(lab_raw(training=training))), problems(lab_raw(training=training))


def test_lab_training_needs_storage_and_only_lab_storage_keys():
    raw = lab_two_gpu_workers(training={"enabled": True, "image": IMAGE})
    assert_rejected(raw, "storage", "storage.nfs", "provision")
    assert_rejected(lab_raw(storage={"hostPath": "/data"}), "storage", "dev keys")
    assert_rejected(lab_raw(storage={"provision": True, "nfs": {"server": "nas", "path": "/x"}}),
                    "storage.provision", "choose one")
    assert any(k == "storage.nfs.path" for k, _ in problems(lab_raw(storage={"nfs": {"server": "nas", "path": "x"}})))


def test_dev_storage_rules():
    assert_rejected(dev_raw(training={"enabled": True, "image": IMAGE}), "storage", "hostPath", "useDefaultClass")
    assert_rejected(dev_raw(storage={"provision": True}), "storage", "lab keys")
    assert_rejected(dev_raw(storage={"hostPath": "/d", "useDefaultClass": True}), "storage.useDefaultClass", "choose one")
    raw = dev_raw(gpuNodes=["a", "b"], training={"enabled": True, "image": IMAGE, "nodes": 2}, storage={"hostPath": "/d"})
    assert_rejected(raw, "storage.hostPath", "not shared")
    assert_rejected(dev_raw(storage={"hostPath": "/"}), "storage.hostPath", "absolute")


def test_no_gpu_node_configured_rejected():
    raw = dev_raw(gpuNodes=[], training={"enabled": True, "image": IMAGE}, storage={"hostPath": "/d"})
    assert_rejected(raw, "training.enabled", "no GPU node")


def test_quantity_value():
    assert quantity_value("500m") == 0.5
    assert quantity_value("16Gi") == 16 * 2**30
    assert quantity_value("1.5G") == 1.5e9
    with pytest.raises(ValueError):
        quantity_value("16GB")


def test_project_file_declares_the_keys_with_model_defaults():
    decls = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"]
    for stack_type, key in ((Addons, "training"), (Addons, "acceptance"), (Addons, "network"),
                            (config.LabStack, "storage"), (config.DevStack, "storage")):
        assert decls[key]["type"] == "object"
        model = stack_type.model_fields[key].annotation
        assert model.model_validate(decls[key]["default"]) == model(), (stack_type, key)


def test_config_reference_lists_every_new_key():
    # docs/reference/config.md (generated from the models): each key by its full dotted name.
    reference = (PROJECT_DIR / "docs" / "reference" / "config.md").read_text()
    for key in ("training.enabled", "training.launcher", "training.image", "training.nodes", "training.gpusPerNode",
                "training.maxRestarts", "training.backoffLimitPerIndex", "training.shmSize", "training.nccl.debug",
                "training.nccl.socketIfname", "acceptance.nccl", "acceptance.minBusbwFraction", "acceptance.maxBytes",
                "network.linkGbps", "network.rdma", "network.roce.interface", "network.roce.pciAddress",
                "network.roce.hca", "network.roce.driver", "network.roce.gidIndex", "network.roce.range",
                "network.roce.ncclEnv", "network.roce.minLinkFraction", "training.dataset", "training.model",
                "training.learningRate", "training.warmupEpochs", "training.weightDecay", "training.prepareData",
                "wandb.enabled", "wandb.maxJobs", "wandb.baseUrl", "storage.size", "storage.nfs", "storage.provision",
                "storage.exportPath", "storage.hostPath", "storage.useDefaultClass"):
        assert re.search(rf"(?<![\w.]){re.escape(key)}(?![\w.])", reference), key
