"""A key set to a value that does nothing on the stack is refused with the reason
(config/inert_keys.py, config/gpu.py); the same key at its default, or where it acts, is accepted."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.config.refusals import accepted, reported
from tests.conftest import PROJECT_DIR, lab_raw

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"
GCP = {"gcp:project": "my-gpu-project", "gcp:region": "us-central1"}
A100 = {"name": "a100", "machineType": "a2-highgpu-1g", "accelerator": {"type": "nvidia-tesla-a100", "count": 1},
        "zones": ["us-central1-a"], "autoscaling": {"minNodes": 1, "maxNodes": 2}}


def lab_pair(**overrides: Any) -> dict[str, Any]:
    """Two one-GPU workers, a link rate and an image: the pair check has a pair."""
    raw = lab_raw(training={"image": IMAGE}, network={"linkGbps": 25}, **overrides)
    raw["hosts"][2]["gpus"] = 1
    raw["hosts"][1]["gpus"] = 1
    return raw


def dev(**overrides: Any) -> dict[str, Any]:
    return {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["a", "b"], "training": {"image": IMAGE},
            "network": {"linkGbps": 25}, **overrides}


def gke(**top: Any) -> dict[str, Any]:
    return {"platform": "gke", **GCP, "gke": {"zone": "us-central1-a", "gpuPools": [A100]},
            "training": {"image": IMAGE}, "network": {"linkGbps": 25}, **top}


NCCL_ON = {"ncclCheck": {"enabled": True}}


# --- gpuHealth.ncclCheck.enabled -------------------------------------------------------------------


def test_nccl_check_on_dev_without_gpu_counts_is_refused() -> None:
    reported(dev(gpuHealth=NCCL_ON), "gpuHealth.ncclCheck.enabled", "dev knows no GPU node's GPU count")


def test_nccl_check_on_dev_with_a_declared_pair_is_accepted() -> None:
    accepted(dev(gpuHealth=NCCL_ON, gpuNodeGpus={"a": 4, "b": 4}))
    reported(dev(gpuHealth=NCCL_ON, gpuNodeGpus={"a": 4, "b": 2}), "gpuHealth.ncclCheck.enabled",
             "no such pair", "a: 4, b: 2")


def test_nccl_check_on_gke_is_refused() -> None:
    reported(gke(gpuHealth={"enabled": True, **NCCL_ON}), "gpuHealth.ncclCheck.enabled", "autoscaler")
    # gke's service is off by default: the check would be part of nothing.
    reported(gke(gpuHealth=NCCL_ON), "gpuHealth.ncclCheck.enabled", "GPU health service, which is off")


def test_nccl_check_on_lab_needs_a_pair_and_whole_gpus() -> None:
    accepted(lab_pair(gpuHealth=NCCL_ON))
    reported(lab_raw(training={"image": IMAGE}, network={"linkGbps": 25}, gpuHealth=NCCL_ON),
             "gpuHealth.ncclCheck.enabled", "no such pair", "gpu-1: 2")
    reported(lab_pair(gpuHealth=NCCL_ON, gpu={"sharing": {"mode": "time-slicing", "replicas": 2}}),
             "gpuHealth.ncclCheck.enabled", "time-slicing")
    reported(lab_pair(gpuHealth={"enabled": False, **NCCL_ON}), "gpuHealth.ncclCheck.enabled", "which is off")


def test_nccl_check_left_unset_is_never_refused() -> None:
    accepted(dev())
    accepted(gke(gpuHealth={"enabled": True}))


# --- other keys -------------------------------------------------------------------------------------


def test_kube_context_with_the_kubeconfig_secret_is_refused() -> None:
    reported(dev(), "kubeContext", "does nothing with the kubeconfig secret", secrets={"kubeconfig"})
    accepted({"platform": "dev", "gpuNodes": ["a"]}, secrets={"kubeconfig"})


def test_lab_driver_keys_under_the_operator_are_refused() -> None:
    operator = {"stack": "operator"}
    reported(lab_raw(gpu=operator, nvidiaDriver={"version": "570.172.08-0ubuntu0.22.04.1"}),
             "nvidiaDriver.version", "driver container")
    reported(lab_raw(gpu=operator, nvidiaDriver={"branch": "550"}), "nvidiaDriver.branch", "driver container")
    accepted(lab_raw(gpu=operator, nvidiaDriver={"branch": "550", "preinstalled": True}))
    accepted(lab_raw(nvidiaDriver={"branch": "550"}))


def test_lab_export_path_without_provision_is_refused() -> None:
    reported(lab_raw(storage={"exportPath": "/srv/other"}), "storage.exportPath", "provision")
    accepted(lab_raw(storage={"exportPath": "/srv/other", "provision": True}))


def test_gke_master_cidr_of_a_public_cluster_is_refused() -> None:
    reported(gke(gke={"zone": "us-central1-a", "gpuPools": [A100], "privateNodes": {"masterCidr": "172.16.1.0/28"}}),
             "gke.privateNodes.masterCidr", "privateNodes.enabled false")


def test_gke_diagnostic_settings_are_refused() -> None:
    reported(gke(gpuHealth={"enabled": True, "diagnostic": {"level": 2}}), "gpuHealth.diagnostic", "known by name")
    accepted(gke(gpuHealth={"enabled": True, "diagnostic": {"enabled": False}}))


def test_gate_timeout_where_no_gate_runs_is_refused() -> None:
    reported(lab_raw(gpu={"gate": {"enabled": False, "timeoutMinutes": 60}}), "gpu.gate.timeoutMinutes",
             "gpu.gate.enabled false")
    no_nodes = {**A100, "autoscaling": {"minNodes": 0, "maxNodes": 2}}
    reported(gke(gke={"zone": "us-central1-a", "gpuPools": [no_nodes]}, gpu={"gate": {"timeoutMinutes": 60}}),
             "gpu.gate.timeoutMinutes", "minNodes is 0")


@pytest.mark.parametrize(("sharing", "key"), [
    ({"mode": "none", "migStrategy": "mixed"}, "gpu.sharing.migStrategy"),
    ({"mode": "time-slicing", "replicas": 2, "migProfile": "all-1g.10gb"}, "gpu.sharing.migProfile"),
])
def test_mig_settings_outside_mode_mig_are_refused(sharing: dict[str, Any], key: str) -> None:
    reported(lab_raw(gpu={"sharing": sharing}), key, "applies to mode mig only" if "Strategy" in key else "mode mig only")


@pytest.mark.parametrize("platform", ["lab", "dev", "gke"])
def test_project_defaults_are_never_refused(platform: str) -> None:
    """Every key at the default Pulumi.yaml hands every stack: nothing here refuses it."""
    defaults = {k: d["default"] for k, d in yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"].items()}
    base = {"lab": lab_raw(), "dev": {"platform": "dev", "gpuNodes": ["a"]}, "gke": gke()}[platform]
    accepted({**defaults, **base}, {"sshPrivateKey"} if platform == "lab" else {"kubeconfig"} if platform == "dev" else set())


def test_monitoring_settings_with_monitoring_off_are_refused() -> None:
    reported(lab_raw(monitoring={"enabled": False, "alerts": {"gpuTempCelsius": 90}}), "monitoring.alerts",
             "monitoring.enabled false")
    reported(lab_raw(monitoring={"enabled": False, "retention": "30d"}), "monitoring.retention", "remove it")
    accepted(lab_raw(monitoring={"enabled": False}))
    accepted(lab_raw(monitoring={"alerts": {"gpuTempCelsius": 90}}))


def test_rdma_link_fraction_without_the_acceptance_job_is_refused() -> None:
    from tests.conftest import SEED_002_ROCE

    network = {"linkGbps": 25, "rdma": True, "roce": {**SEED_002_ROCE, "minLinkFraction": 0.9}}
    reported(lab_raw(training={"image": IMAGE}, network=network), "network.roce.minLinkFraction", "acceptance.nccl")
