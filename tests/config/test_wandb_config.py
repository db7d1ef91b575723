"""The wandb section (W&B Launch): accepted on every platform, refused with the key named, and its
API key a secret that never reaches the model or an error message."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

import config
from config.wandb import WandbConfig
from render import program
from tests.config.test_config_refused import gke
from tests.conftest import PROJECT_DIR, lab_raw

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"
WANDB = {"enabled": True, "entity": "ml-team", "queue": "gpu-queue"}
KEY = frozenset({"wandbApiKey"})


def dev(wandb: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """A dev stack with training's image and a shared directory: what wandb.enabled needs."""
    return {
        "platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"],
        "training": {"image": IMAGE}, "storage": {"hostPath": "/data/gpu-cluster-shared"},
        "wandb": {**WANDB, **(wandb or {})}, **overrides,
    }


def test_off_by_default_and_the_project_default_is_the_model_default() -> None:
    assert WandbConfig().enabled is False
    declared = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"]["wandb"]
    assert declared["type"] == "object"
    assert WandbConfig.model_validate(declared["default"]) == WandbConfig()
    # Off, nothing else is asked for: no entity, queue, key, image or storage.
    config.parse({"platform": "dev", "kubeContext": "minikube", "wandb": declared["default"]})


@pytest.mark.parametrize("raw, secrets", [
    (dev(), {"wandbApiKey"}),
    (lab_raw(training={"image": IMAGE}, storage={"provision": True}, wandb=WANDB), {"sshPrivateKey", "wandbApiKey"}),
    # gke's shared claim is always Filestore: no storage key to set
    (gke(top={"training": {"image": IMAGE}, "wandb": WANDB}), {"wandbApiKey"}),
], ids=["dev", "lab", "gke"])
def test_every_platform_accepts_it(raw: dict[str, Any], secrets: set[str]) -> None:
    w = config.parse(raw, secrets).wandb
    assert (w.enabled, w.entity, w.queue, w.max_jobs, w.base_url) == (True, "ml-team", "gpu-queue", 1, "https://api.wandb.ai")


def test_values_as_given() -> None:
    w = config.parse(dev({"project": "llm.pretrain", "maxJobs": 4, "baseUrl": "https://wandb.corp.example:8443/"}),
                     KEY).wandb
    assert (w.project, w.max_jobs, w.base_url) == ("llm.pretrain", 4, "https://wandb.corp.example:8443")


@pytest.mark.parametrize("raw, secrets, key, message", [
    (dev(), set(), "wandbApiKey", "pulumi config set --secret wandbApiKey"),
    (dev(wandbApiKey="plain-key"), set(), "wandbApiKey", "must be set as a secret"),
    (dev({"entity": ""}), KEY, "wandb.entity", "is required with wandb.enabled"),
    (dev({"queue": None}), KEY, "wandb.queue", "is required with wandb.enabled"),
    (dev({"entity": "ML Team"}), KEY, "wandb.entity", "is not a W&B entity name"),
    (dev({"entity": "ml-team\n"}), KEY, "wandb.entity", "is not a W&B entity name"),
    (dev({"queue": "gpu/queue"}), KEY, "wandb.queue", "is not a W&B name"),
    (dev({"queue": "-q"}), KEY, "wandb.queue", "is not a W&B name"),
    (dev({"project": "my project"}), KEY, "wandb.project", "is not a W&B name"),
    (dev({"maxJobs": 0}), KEY, "wandb.maxJobs", "greater than or equal to 1"),
    (dev({"baseUrl": "http://api.wandb.ai"}), KEY, "wandb.baseUrl", "https://"),
    (dev({"queues": ["a"]}), KEY, "wandb.queues", "is not a known key"),
    (dev(training={}), KEY, "training.image", "the queue's pods run the workload image"),
    (dev(storage={}), KEY, "storage", "the queue's pods mount the shared claim"),
], ids=["no-key", "plaintext-key", "no-entity", "no-queue", "entity-space", "entity-newline", "queue-slash",
        "queue-dash", "project-space", "max-jobs-0", "http", "unknown-key", "no-image", "no-storage"])
def test_refused(raw: dict[str, Any], secrets: set[str], key: str, message: str) -> None:
    with pytest.raises(config.ConfigError) as exc:
        config.parse(raw, secrets)
    found = exc.value.problems
    assert any(k == key and message in m for k, m in found), found
    assert f"{config.NAMESPACE}:{key}" in str(exc.value)


def test_a_plaintext_key_in_the_stack_is_refused_without_echoing_it() -> None:
    """As `pulumi up` hands it over: the runtime config, the key not marked secret."""
    values, secret_keys = program.stack_config("dev")
    values["gpu-cluster:wandb"] = json.dumps(WANDB)
    values["gpu-cluster:wandbApiKey"] = "PLAINTEXT-WANDB-KEY-5c1d"
    with pytest.raises(config.ConfigError) as exc:
        program.run("dev", config=(values, secret_keys))
    assert "gpu-cluster:wandbApiKey: must be set as a secret" in str(exc.value)
    assert "PLAINTEXT-WANDB-KEY-5c1d" not in str(exc.value)
