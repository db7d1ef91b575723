"""Issue 15's keys: training.dataset, model, learningRate, warmupEpochs, weightDecay, prepareData
and dev's storage.nfs. One row per refused input (the error names the key), then what is accepted
and what it becomes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import config
from config.training import DEFAULT_LEARNING_RATE, Dataset, ModelKind
from tests.config.test_config_refused import IMAGE, dev, gke_training, lab_training, refusal

SEED_003_NFS = {"server": "192.168.49.1", "path": "/srv/nfs/kubedata"}


def dev_training(storage: dict[str, Any] | None = None, gpu_nodes: int = 1, **training: Any) -> dict[str, Any]:
    return dev(training={"enabled": True, "image": IMAGE, **training},
               storage=storage if storage is not None else {"nfs": SEED_003_NFS},
               gpuNodes=[f"gpu{i}" for i in range(gpu_nodes)])


ROWS: list[tuple[str, Callable[[], dict[str, Any]], str, str]] = [
    ("dataset unknown", lambda: lab_training(dataset="imagenet"), "training.dataset", "cifar10"),
    ("model unknown", lambda: lab_training(model="vit"), "training.model", "resnet18"),
    ("learningRate 0", lambda: lab_training(learningRate=0), "training.learningRate", "(0, 10]"),
    ("learningRate negative", lambda: lab_training(learningRate=-0.1), "training.learningRate", "(0, 10]"),
    ("learningRate above 10", lambda: lab_training(learningRate=50), "training.learningRate", "(0, 10]"),
    ("learningRate NaN", lambda: lab_training(learningRate=float("nan")), "training.learningRate", "(0, 10]"),
    ("learningRate text", lambda: lab_training(learningRate="fast"), "training.learningRate", "number"),
    ("warmupEpochs negative", lambda: lab_training(warmupEpochs=-1), "training.warmupEpochs", ">= 0"),
    ("warmupEpochs = epochs", lambda: lab_training(warmupEpochs=10, epochs=10), "training.warmupEpochs",
     "not less than training.epochs 10"),
    ("warmupEpochs > epochs", lambda: gke_training(warmupEpochs=2.5, epochs=2), "training.warmupEpochs",
     "not less than training.epochs 2"),
    ("weightDecay 1", lambda: lab_training(weightDecay=1), "training.weightDecay", "[0, 1)"),
    ("weightDecay negative", lambda: lab_training(weightDecay=-0.01), "training.weightDecay", "[0, 1)"),
    ("prepareData with auto", lambda: lab_training(prepareData=True), "training.prepareData",
     "set training.dataset cifar10 or fashion-mnist (is auto)"),
    ("prepareData with synthetic", lambda: dev_training(dataset="synthetic", prepareData=True), "training.prepareData",
     "(is synthetic)"),
    # dev: an existing NFS export (seed 003)
    ("dev nfs server localhost", lambda: dev_training({"nfs": {"server": "localhost", "path": "/srv/nfs"}}),
     "storage.nfs.server", "localhost is this machine"),
    ("dev nfs server loopback", lambda: dev_training({"nfs": {"server": "127.0.0.1", "path": "/srv/nfs"}}),
     "storage.nfs.server", "loopback"),
    ("dev nfs server not an address", lambda: dev_training({"nfs": {"server": "999.1.1.1", "path": "/srv/nfs"}}),
     "storage.nfs.server", "not a valid IPv4 address"),
    ("dev nfs server shell", lambda: dev_training({"nfs": {"server": "nas;reboot", "path": "/srv/nfs"}}),
     "storage.nfs.server", "DNS name"),
    ("dev nfs path relative", lambda: dev_training({"nfs": {"server": "nas.example", "path": "srv/nfs"}}),
     "storage.nfs.path", "absolute"),
    ("dev nfs path ..", lambda: dev_training({"nfs": {"server": "nas.example", "path": "/srv/../etc"}}),
     "storage.nfs.path", "'..'"),
    ("dev nfs without path", lambda: dev_training({"nfs": {"server": "nas.example"}}), "storage.nfs.path", "required"),
    ("dev nfs unknown key", lambda: dev_training({"nfs": {**SEED_003_NFS, "options": "vers=3"}}),
     "storage.nfs.options", ""),
    ("dev nfs with hostPath", lambda: dev_training({"nfs": SEED_003_NFS, "hostPath": "/data/shared"}),
     "storage.nfs", "choose one: storage.nfs (an existing export) or storage.hostPath"),
    ("dev nfs with useDefaultClass", lambda: dev_training({"nfs": SEED_003_NFS, "useDefaultClass": True}),
     "storage.nfs", "or storage.useDefaultClass"),
    ("dev provision still lab's", lambda: dev_training({"nfs": SEED_003_NFS, "provision": True}), "storage",
     "provision and exportPath are lab keys"),
    ("dev hostPath with two nodes names nfs", lambda: dev_training({"hostPath": "/data/shared"}, gpu_nodes=2, nodes=2),
     "storage.hostPath", "use storage.nfs or useDefaultClass"),
    ("dev no storage names nfs", lambda: dev_training({}), "storage", "storage.nfs {server, path}"),
]


@pytest.mark.parametrize(("description", "make", "key", "message"), ROWS, ids=[r[0] for r in ROWS])
def test_refused(description: str, make: Callable[[], dict[str, Any]], key: str, message: str) -> None:
    err = refusal(make())
    found = [(err.qualified_key(k), m) for k, m in err.problems]
    assert any(key == k.removeprefix(f"{config.NAMESPACE}:") and message in m for k, m in found), (
        f"{description}: want {key} / {message!r}; got {found}")
    assert f"{config.NAMESPACE}:{key}" in str(err)


def test_defaults_keep_todays_training() -> None:
    t = config.parse(lab_training(), {"sshPrivateKey"}).training
    assert (t.dataset, t.model, t.learning_rate, t.warmup_epochs, t.weight_decay, t.prepare_data) == (
        Dataset.AUTO, ModelKind.RESNET18, DEFAULT_LEARNING_RATE, None, None, False)


@pytest.mark.parametrize(("dataset", "model"), [(d, m) for d in Dataset for m in ModelKind])
def test_every_dataset_with_every_model_is_accepted(dataset: Dataset, model: ModelKind) -> None:
    # resnet18's stem takes the samples' channels, so Fashion-MNIST's 1x28x28 trains on it as
    # CIFAR-10's 3x32x32 does (28 -> 14 -> 7 -> 4 through its three stride-2 stages).
    prepare = dataset.downloadable
    t = config.parse(lab_training(dataset=dataset.value, model=model.value, prepareData=prepare),
                     {"sshPrivateKey"}).training
    assert (t.dataset, t.model, t.prepare_data) == (dataset, model, prepare)


def test_schedule_keys_accepted() -> None:
    t = config.parse(lab_training(learningRate=10, warmupEpochs=0, weightDecay=0, epochs=1), {"sshPrivateKey"}).training
    assert (t.learning_rate, t.warmup_epochs, t.weight_decay) == (10, 0, 0)
    t = config.parse(lab_training(warmupEpochs="", weightDecay=""), {"sshPrivateKey"}).training  # Pulumi's ""
    assert (t.warmup_epochs, t.weight_decay) == (None, None)


def test_dev_nfs_accepted_with_several_nodes() -> None:
    cfg = config.parse(dev_training(gpu_nodes=2, nodes=2))
    assert isinstance(cfg, config.DevStack)
    assert cfg.storage.nfs is not None and cfg.storage.configured
    assert (cfg.storage.nfs.server, cfg.storage.nfs.path) == (SEED_003_NFS["server"], SEED_003_NFS["path"])
    assert cfg.storage.host_path is None and not cfg.storage.use_default_class


def test_lab_nfs_unchanged() -> None:
    raw = lab_training()
    raw["storage"] = {"nfs": {"server": "nas.lab.example", "path": "/export/gpu"}}
    cfg = config.parse(raw, {"sshPrivateKey"})
    assert isinstance(cfg, config.LabStack) and cfg.storage.nfs is not None and not cfg.storage.provision
