"""gpu-cluster:queues: teams and quotas, refused naming the key (config/queues.py), on every platform:
a team's GPUs beyond the cluster's (lab: hosts[].gpus; gke: maxNodes x zones x GPUs of the pools
of one accelerator; dev: gpuNodeGpus), the teams together beyond it, a team without a group, a
namespace of the program's own, duplicates, bad quantities; and the flavors each platform gets."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import config
from components.gpu_health import NAMESPACE as GPU_HEALTH_NAMESPACE
from components.gpu_stack import GPU_NAMESPACE, OPERATOR_NAMESPACE
from components.monitoring import NAMESPACE as MONITORING_NAMESPACE
from components.queues.kueue import NAMESPACE as KUEUE_NAMESPACE
from components.ready_gate import GATE_NAMESPACE
from components.storage_contract import TRAINING_NAMESPACE
from components.training.wandb_launch import AGENT_NAMESPACE as WANDB_NAMESPACE
from config.queues import RESERVED_NAMESPACES, flavors
from render import program
from tests.config.refusals import accepted, reported
from tests.config.test_gke_config import A100, L4, gke_raw
from tests.conftest import lab_raw, stack_config_with


def team(name: str = "vision", **changes: Any) -> dict[str, Any]:
    return {"name": name, "namespace": f"team-{name}", "group": f"gpu-{name}", "gpus": 1, "cpu": "16",
            "memory": "64Gi", **changes}


def queues(*teams: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"enabled": True, "teams": [copy.deepcopy(t) for t in teams], **extra}


def dev_raw(**overrides: Any) -> dict[str, Any]:
    return {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["gpu-a", "gpu-b"], **overrides}


def test_off_by_default_and_two_teams_fit_the_lab():
    assert not accepted(lab_raw()).queues.enabled
    cfg = accepted(lab_raw(queues=queues(team("vision"), team("language"))))
    assert [t.namespace for t in cfg.queues.teams] == ["team-vision", "team-language"]
    assert cfg.queues.wait_for_pods_ready_timeout_minutes == 10


def test_a_team_quota_beyond_the_lab_hosts_gpus_is_refused():
    # lab_raw: one GPU host with 2 GPUs
    reported(lab_raw(queues=queues(team(gpus=3))), "queues.teams[0].gpus", "3 GPUs", "has 2", "hosts[].gpus")


def test_the_teams_nominal_gpus_together_beyond_the_cluster_are_refused():
    reported(lab_raw(queues=queues(team("a", gpus=2), team("b", gpus=1))), "queues.teams", "add up to 3",
             "borrowingLimitGpus")


def test_time_slicing_counts_each_gpu_as_its_replicas():
    gpu = {"sharing": {"mode": "time-slicing", "replicas": 4}}
    accepted(lab_raw(gpu=gpu, queues=queues(team(gpus=8))))
    reported(lab_raw(gpu=gpu, queues=queues(team(gpus=9))), "queues.teams[0].gpus", "has 8")


def test_gke_flavors_per_accelerator_and_their_quota():
    cfg = accepted({**gke_raw(), "queues": queues(team(gpus=4))})
    by_name = {f.name: f for f in flavors(cfg)}
    # L4: 4 nodes x 1 zone x 1 GPU; A100: 2 nodes x 2 zones x 1 GPU
    assert by_name["nvidia-l4"].gpus == 4 and by_name["nvidia-tesla-a100"].gpus == 4
    assert by_name["nvidia-l4"].node_labels == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    reported({**gke_raw(L4, A100), "queues": queues(team(gpus=5))}, "queues.teams[0].gpus", "nvidia-l4 has 4",
             "gke.gpuPools")


def test_dev_checks_against_gpu_node_gpus_only_when_every_count_is_known():
    accepted(dev_raw(queues=queues(team(gpus=64))))  # no count declared: nothing to hold it to
    reported(dev_raw(gpuNodeGpus={"gpu-a": 2, "gpu-b": 2}, queues=queues(team(gpus=5))),
             "queues.teams[0].gpus", "has 4", "gpuNodeGpus")
    (flavor,) = flavors(accepted(dev_raw(gpuNodeGpus={"gpu-a": 2, "gpu-b": 2})))
    assert flavor.gpus == 4 and flavor.node_labels == {"nvidia.com/gpu.present": "true"}


def test_a_team_without_a_group_is_refused():
    reported(lab_raw(queues=queues(team(group=None))), "queues.teams[0].group", "is required")
    reported(lab_raw(queues=queues(team(group=""))), "queues.teams[0].group", "is required")


@pytest.mark.parametrize("namespace", ["training", "kueue-system", "gpu-health", "monitoring", "kube-system",
                                       "default"])
def test_a_namespace_of_the_program_is_refused(namespace: str):
    reported(lab_raw(queues=queues(team(namespace=namespace))), "queues.teams[0].namespace", "program's own")


def test_every_namespace_the_program_creates_is_reserved():
    ours = {TRAINING_NAMESPACE, KUEUE_NAMESPACE, GPU_HEALTH_NAMESPACE, MONITORING_NAMESPACE, GPU_NAMESPACE,
            OPERATOR_NAMESPACE, GATE_NAMESPACE, WANDB_NAMESPACE}
    assert ours <= RESERVED_NAMESPACES


def test_duplicate_names_and_namespaces_are_refused():
    raw = lab_raw(queues=queues(team("a", gpus=0), team("a", gpus=0, namespace="other")))
    reported(raw, "queues.teams[1].name", "used by another team")
    raw = lab_raw(queues=queues(team("a", gpus=0), team("b", gpus=0, namespace="team-a")))
    reported(raw, "queues.teams[1].namespace", "used by another team")
    reported(lab_raw(queues=queues(team("gpu-cluster", gpus=0))), "queues.teams[0].name", "program's own queue")


@pytest.mark.parametrize(("key", "value"), [("cpu", "lots"), ("cpu", "0"), ("memory", "-1Gi"), ("memory", "1Gx")])
def test_bad_quantities_are_refused(key: str, value: str):
    reported(lab_raw(queues=queues(team(**{key: value}))), f"queues.teams[0].{key}")


def test_bad_names_and_teams_without_enabled_are_refused():
    reported(lab_raw(queues=queues(team(name="Vision"))), "queues.teams[0].name", "RFC 1123")
    reported(lab_raw(queues={"teams": [team()]}), "queues.teams", "queues.enabled is false")
    reported(lab_raw(queues=queues(team(), waitForPodsReadyTimeoutMinutes=0)),
             "queues.waitForPodsReadyTimeoutMinutes")


def test_the_program_refuses_before_registering_anything():
    """What `up` and `python -m render` turn into exit 2: a ConfigError before the first resource."""
    bad = {"enabled": True, "teams": [team(namespace="training")]}
    with pytest.raises(config.ConfigError) as err:
        program.run("lab-ha", config=stack_config_with("lab-ha", queues=bad))
    assert "gpu-cluster:queues.teams[0].namespace" in str(err.value)


@pytest.mark.parametrize("group", ["system:authenticated", "system:unauthenticated", "system:serviceaccounts",
                                   "system:serviceaccounts:training", "system:masters", "system:nodes", "system:"])
def test_a_kubernetes_system_group_is_refused(group: str):
    """Every signed-in user, anyone, every pod: binding such a group hands them the team's Jobs and quota."""
    for raw in (lab_raw(queues=queues(team(group=group))), dev_raw(queues=queues(team(group=group))),
                {**gke_raw(), "queues": queues(team(group=group))}):
        reported(raw, "queues.teams[0].group", "Kubernetes system group", "GPU quota", "wandb.teamQueues")


def test_a_group_that_only_looks_like_one_is_accepted():
    for group in ("gpu-vision", "systems:ml", "team:system:vision", "oidc:system-admins"):
        assert accepted(lab_raw(queues=queues(team(group=group)))).queues.teams[0].group == group


@pytest.mark.parametrize("namespace", ["gmp-system", "gmp-public", "gke-gmp-system", "gke-managed-system",
                                       "gke-managed-filestorecsi", "gke-managed-anything", "gke-connect",
                                       "config-management-system", "config-management-monitoring", "gke-mcs"])
def test_a_gke_managed_namespace_is_refused_on_gke(namespace: str):
    reported({**gke_raw(), "queues": queues(team(namespace=namespace))}, "queues.teams[0].namespace",
             "GKE's own namespaces", "config/gcp/managed_namespaces.py")


def test_gke_names_are_only_gke_s_own_on_gke():
    """A lab or dev cluster has no GKE components: the names are free there; on gke a near name is too."""
    accepted(lab_raw(queues=queues(team(namespace="gmp-system"))))
    accepted(dev_raw(queues=queues(team(namespace="gke-managed-x"))))
    accepted({**gke_raw(), "queues": queues(team(namespace="gke-managedx"))})
    accepted({**gke_raw(), "queues": queues(team(namespace="team-gmp-system"))})
