"""gpuHealth: its defaults per platform, and every refusal naming the key (config/health.py)."""

from __future__ import annotations

from typing import Any

import pytest

import config
from config.errors import ConfigError
from config.health import check_cron
from tests.conftest import lab_raw

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"
GCP = {"gcp:project": "my-gpu-project", "gcp:region": "us-central1"}


def dev(**overrides: Any) -> dict[str, Any]:
    return {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"], **overrides}


L4 = {"name": "l4", "machineType": "g2-standard-8", "accelerator": {"type": "nvidia-l4", "count": 1},
      "zones": ["us-central1-a"]}


def gke(**overrides: Any) -> dict[str, Any]:
    return {"platform": "gke", **GCP, "gke": {"zone": "us-central1-a", "gpuPools": [L4]}, **overrides}


def parse(raw: dict[str, Any]) -> config.StackConfig:
    return config.parse(raw, {"sshPrivateKey"} if raw.get("platform") == "lab" else set())


def problems(raw: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse(raw)
    return dict(err.value.problems)


# --- defaults -------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [lab_raw(training={"image": IMAGE}), dev(training={"image": IMAGE})],
                         ids=["lab", "dev"])
def test_on_by_default_on_lab_and_dev_with_an_image(raw: dict[str, Any]) -> None:
    cfg = parse(raw)
    assert cfg.gpu_health_enabled and cfg.gpu_health_image == IMAGE
    h = cfg.gpu_health
    assert (h.dry_run, h.max_nodes_out, h.max_percent_out, h.diagnostic.level) == (False, 1, 25, 1)


def test_off_by_default_on_gke_even_with_an_image() -> None:
    cfg = parse(gke(training={"image": IMAGE}))
    assert not cfg.gpu_health_enabled  # GKE's node auto-repair acts on failing nodes
    assert parse(gke(training={"image": IMAGE}, gpuHealth={"enabled": True})).gpu_health_enabled


@pytest.mark.parametrize("raw", [lab_raw(), dev()], ids=["lab", "dev"])
def test_without_an_image_the_default_is_off_not_a_refusal(raw: dict[str, Any]) -> None:
    assert not parse(raw).gpu_health_enabled


def test_its_own_image_wins_over_trainings() -> None:
    own = "registry.example.com/gpu-cluster/trainer:0.2.0"
    cfg = parse(dev(training={"image": IMAGE}, gpuHealth={"image": own}))
    assert cfg.gpu_health_image == own
    assert parse(dev(gpuHealth={"image": own})).gpu_health_enabled


def test_pulumi_yaml_default_object_parses_to_the_model_defaults() -> None:
    declared = {"dryRun": False, "maxNodesOut": 1, "maxPercentOut": 25,
                "diagnostic": {"enabled": True, "schedule": "17 3 * * *", "level": 1}}
    assert parse(dev(gpuHealth=declared)).gpu_health == parse(dev()).gpu_health


# --- refusals -------------------------------------------------------------------------------------

REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "enabled-without-image": (dev(gpuHealth={"enabled": True}), "gpuHealth.image", "training.image or gpuHealth.image"),
    "gke-enabled-without-image": (gke(gpuHealth={"enabled": True}), "gpuHealth.image", "workload image"),
    "unpinned-image": (dev(gpuHealth={"image": "trainer"}), "gpuHealth.image", "pinned"),
    "latest-image": (dev(gpuHealth={"image": "trainer:latest"}), "gpuHealth.image", "pinned"),
    "negative-max-nodes": (dev(gpuHealth={"maxNodesOut": -1}), "gpuHealth.maxNodesOut", "greater than or equal to 0"),
    "percent-over-100": (dev(gpuHealth={"maxPercentOut": 101}), "gpuHealth.maxPercentOut", "less than or equal to 100"),
    "percent-negative": (dev(gpuHealth={"maxPercentOut": -5}), "gpuHealth.maxPercentOut", "greater than or equal to 0"),
    "reconcile-too-fast": (dev(gpuHealth={"reconcileSeconds": 1}), "gpuHealth.reconcileSeconds", "10"),
    "level-3": (dev(gpuHealth={"diagnostic": {"level": 3}}), "gpuHealth.diagnostic.level", "less than or equal to 2"),
    "level-0": (dev(gpuHealth={"diagnostic": {"level": 0}}), "gpuHealth.diagnostic.level", "greater than or equal to 1"),
    "cron-four-fields": (dev(gpuHealth={"diagnostic": {"schedule": "0 3 * *"}}), "gpuHealth.diagnostic.schedule",
                         "five fields"),
    "cron-macro": (dev(gpuHealth={"diagnostic": {"schedule": "@daily"}}), "gpuHealth.diagnostic.schedule", "five fields"),
    "cron-hour-24": (dev(gpuHealth={"diagnostic": {"schedule": "0 24 * * *"}}), "gpuHealth.diagnostic.schedule",
                     "outside 0-23"),
    "expiry-zero": (dev(gpuHealth={"diagnostic": {"validHours": 0}}), "gpuHealth.diagnostic.validHours",
                    "greater than or equal to 1"),
    "unknown-key": (dev(gpuHealth={"maxNodes": 2}), "gpuHealth.maxNodes", "not a known key"),
    "not-a-bool": (dev(gpuHealth={"dryRun": "sometimes"}), "gpuHealth.dryRun", "boolean"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_naming_the_key(case: str) -> None:
    raw, key, words = REFUSED[case]
    found = problems(raw)
    assert key in found, found
    assert words in found[key], found[key]
    assert f"gpu-cluster:{key}: " in str(ConfigError(list(found.items())))


@pytest.mark.parametrize("schedule", ["17 3 * * *", "*/15 * * * *", "0 1-5/2 1,15 * 0", "0 0 * 12 0"])
def test_cron_schedules_a_cronjob_takes(schedule: str) -> None:
    assert check_cron(schedule) == schedule


def test_dry_run_and_breaker_zero_are_allowed() -> None:
    cfg = parse(dev(training={"image": IMAGE}, gpuHealth={"dryRun": True, "maxNodesOut": 0, "maxPercentOut": 0}))
    assert cfg.gpu_health.dry_run and cfg.gpu_health.max_nodes_out == 0


def test_explicitly_off_stays_off() -> None:
    assert not parse(dev(training={"image": IMAGE}, gpuHealth={"enabled": False})).gpu_health_enabled
