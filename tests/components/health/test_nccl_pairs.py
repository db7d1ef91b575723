"""The NCCL pair check's Kubernetes side (components/gpu_health_pairs.py) in rendered stacks: which
pairs and rounds, every object valid for every supported minor, each pair's pods placed on exactly
its two nodes by the whole-cluster check, the rendezvous address Kubernetes would expand, rights
limited to the paired nodes, idle-only priority, and the config refusals."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import config
from components import gpu_health_pairs as pairs
from components import versions
from components.gpu_health import IDLE_PRIORITY_CLASS, TAINT_KEY, UNSCHEDULABLE_TAINT
from components.storage_contract import TRAINING_NAMESPACE
from render import cluster, program
from render.__main__ import kubernetes_objects
from tests import kubelet
from tests.conftest import ED25519, PROJECT_DIR, stack_config_with

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))
from gpuhealth import ncclpair  # noqa: E402
from gpuhealth import service as svc  # noqa: E402

LAB_HOSTS = yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())["config"]["gpu-cluster:hosts"]
# Two more one-GPU workers (a ring of four) and one with two GPUs (a group of its own: unpaired).
EXTRA = [{"name": f"gpu-{i}", "address": f"192.0.2.{10 + i}", "role": "worker", "gpus": 1, "sshUser": "ubuntu",
          "hostKey": ED25519} for i in (3, 4)]
BIG = {"name": "gpu-big", "address": "192.0.2.30", "role": "worker", "gpus": 2, "sshUser": "ubuntu", "hostKey": ED25519}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "lab": ("lab", {}),  # the committed stack: gpu-1 and gpu-2, one pair
    "lab-5": ("lab", {"hosts": [*LAB_HOSTS, *EXTRA, BIG]}),
    "lab-3": ("lab", {"hosts": [*LAB_HOSTS, EXTRA[0]]}),
    "lab-off": ("lab", {"gpuHealth": {"ncclCheck": {"enabled": False}}}),
    "lab-sliced": ("lab", {"gpu": {"sharing": {"mode": "time-slicing", "replicas": 2}}}),
    "dev": ("dev", {}),
    # two GPU nodes and a link rate, but dev knows no node's GPU count: no pair check (a guess could
    # be fewer GPUs than the node has, and the check would share the node with training pods)
    "dev-two": ("dev", {"gpuNodes": ["gpu-a", "gpu-b"], "gpuNodeGpus": None, "network": {"linkGbps": 100}}),
}


@functools.cache
def plan(case: str) -> program.Plan:
    stack, overrides = CASES[case]
    return program.run(stack, config=stack_config_with(stack, **overrides))


def objects(case: str) -> list[dict[str, Any]]:
    return kubernetes_objects(plan(case))


def cronjobs(case: str) -> list[dict[str, Any]]:
    return [o for o in objects(case) if o["kind"] == "CronJob" and o["metadata"]["name"].startswith(pairs.CHECK_PREFIX)]


def pair_of(cj: dict[str, Any]) -> tuple[str, str]:
    a, b = cj["metadata"]["annotations"]["gpu-cluster.io/nodes"].split(",")
    return a, b


def pod_spec(cj: dict[str, Any]) -> dict[str, Any]:
    return cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


# --- pairs and rounds, against what they must guarantee --------------------------------------------


@pytest.mark.parametrize("n", range(2, 10))
def test_rounds_cover_the_ring_once_without_a_node_twice_in_a_round(n: int) -> None:
    ring = [f"n{i}" for i in range(n)]
    rounds = pairs.rounds(ring)
    edges = [frozenset(p) for r in rounds for p in r]
    ring_edges = {frozenset((ring[i], ring[(i + 1) % n])) for i in range(n)}
    assert set(edges) == ring_edges and len(edges) == len(ring_edges)  # every pair of the ring, once
    for r in rounds:
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes)), r  # two checks of one round never share a node
    assert len(rounds) <= 3
    if n >= 3:  # every node meets two different peers: a failure can be pinned on it
        for node in ring:
            assert len({x for e in edges if node in e for x in e} - {node}) == 2


def test_nodes_pair_only_with_nodes_of_their_gpu_count() -> None:
    checks = pairs.plan_checks({"a": 8, "b": 8, "c": 8, "d": 4, "e": 4, "f": 2, "g": 0})
    assert {c.pair for c in checks} == {("a", "b"), ("b", "c"), ("c", "a"), ("d", "e")}
    assert {c.pair: c.gpus for c in checks}[("d", "e")] == 4
    assert len({c.name for c in checks}) == len(checks)


def test_the_names_are_the_ones_the_service_reads() -> None:
    assert pairs.CHECK_PREFIX == ncclpair.CHECK_PREFIX
    assert pairs.NCCL_TAINT_VALUE == svc.NCCL_FAIL_REASON
    for pair in (("gpu-1", "gpu-2"), ("a" * 60, "b.example.com")):
        assert pairs.check_name(pair) == ncclpair.check_name(pair)
    assert pairs.CHECK_LABEL == dict([ncclpair.POD_LABEL])
    assert (pairs.POD_CHECK, pairs.POD_NODES, pairs.POD_VALID_HOURS) == (
        ncclpair.POD_CHECK, ncclpair.POD_NODES, ncclpair.POD_VALID_HOURS)


# --- what is rendered -----------------------------------------------------------------------------


def test_committed_lab_has_one_pair_and_dev_none() -> None:
    (cj,) = cronjobs("lab")
    assert pair_of(cj) == ("gpu-1", "gpu-2") and cj["spec"]["schedule"] == "47 4 * * *"
    assert cronjobs("dev") == []  # no network.linkGbps on dev: off by default
    assert cronjobs("lab-off") == [] and cronjobs("lab-sliced") == [] and cronjobs("dev-two") == []
    assert plan("dev-two").outputs["gpuHealth"]["ncclPairCheck"].startswith("none: ")
    assert "nccl-pair-check" not in {o["metadata"]["name"] for o in objects("lab-off")}


def test_a_ring_of_four_in_two_rounds_and_the_odd_node_unpaired() -> None:
    found = {pair_of(cj): cj for cj in cronjobs("lab-5")}
    assert set(found) == {("gpu-1", "gpu-2"), ("gpu-2", "gpu-3"), ("gpu-3", "gpu-4"), ("gpu-4", "gpu-1")}
    schedules = {p: cj["spec"]["schedule"] for p, cj in found.items()}
    # rounds timeoutMinutes + 2 (32) apart: a round's Jobs start at most 60 s late and are past
    # their deadline when the next round starts
    assert schedules[("gpu-1", "gpu-2")] == schedules[("gpu-3", "gpu-4")] == "47 4 * * *"
    assert schedules[("gpu-2", "gpu-3")] == schedules[("gpu-4", "gpu-1")] == "19 5 * * *"
    for cj in found.values():
        deadline = cj["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]
        assert deadline == 30 * 60
        assert cj["spec"]["startingDeadlineSeconds"] + deadline < 32 * 60
        assert cj["spec"]["concurrencyPolicy"] == "Forbid"


def _params() -> list[tuple[str, int, str]]:
    out = []
    for case in ("lab", "lab-5"):
        objs = [o for o in objects(case) if o["metadata"]["name"].startswith(("nccl-pair", IDLE_PRIORITY_CLASS))]
        out += [(case, i, minor) for i in range(len(objs)) for minor in versions.KUBERNETES_SUPPORTED_MINORS]
    return out


@pytest.mark.parametrize(("case", "index", "minor"), _params())
def test_every_object_is_valid_for_every_supported_minor(case: str, index: int, minor: str) -> None:
    obj = [o for o in objects(case) if o["metadata"]["name"].startswith(("nccl-pair", IDLE_PRIORITY_CLASS))][index]
    assert kubernetes_validate.validate(obj, minor, strict=True) == minor


@pytest.mark.parametrize("case", ["lab", "lab-5", "lab-3"])
def test_each_pair_is_placed_on_exactly_its_two_nodes(case: str, upstream_dir: Path) -> None:
    p = plan(case)
    report = cluster.check(p, p.config, upstream_dir)
    assert report.ok, report.problems
    for cj in cronjobs(case):
        a, b = pair_of(cj)
        (line,) = [line for line in report.lines if f"CronJob {TRAINING_NAMESPACE}/{cj['metadata']['name']} " in line]
        assert line.endswith(f"2 pods → {a}, {b}") or line.endswith(f"2 pods → {b}, {a}"), line


def test_the_placement_check_sees_a_missing_priority_class(upstream_dir: Path) -> None:
    """The whole-cluster check refuses a pod naming a PriorityClass nothing creates (as the
    Priority admission plugin would): the placement test above is not green by default."""
    p = plan("lab")
    broken = program.Plan(stack=p.stack, resources=[r for r in p.resources if r.type != "kubernetes:scheduling.k8s.io/v1:PriorityClass"],
                          outputs=p.outputs, config=p.config)
    report = cluster.check(broken, broken.config, upstream_dir)
    assert not report.ok
    assert any(f"PriorityClass {IDLE_PRIORITY_CLASS} does not exist" in str(problem) for problem in report.problems)


def test_rank_zero_is_addressed_by_the_run_time_job_name() -> None:
    (cj,) = cronjobs("lab")
    name = cj["metadata"]["name"]
    job = f"{name}-29414820"  # a CronJob's Job: <cronjob>-<minutes since the epoch>
    spec = pod_spec(cj)
    (container,) = spec["containers"]
    env = kubelet.container_env(container, {f"metadata.labels['{pairs.JOB_NAME_LABEL}']": job})
    service = [o for o in objects("lab") if o["kind"] == "Service" and o["metadata"]["name"] == spec["subdomain"]]
    assert service and service[0]["spec"]["clusterIP"] == "None"
    # an Indexed Job's pod is <job>-<index>, under the subdomain: rank 0 resolves as this
    assert env["MASTER_ADDR"] == f"{job}-0.{spec['subdomain']}"
    assert len(f"{job}-1") <= 63  # a hostname
    template_labels = cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    assert service[0]["spec"]["selector"].items() <= template_labels.items()
    assert cj["spec"]["jobTemplate"]["spec"]["completionMode"] == "Indexed"
    assert cj["spec"]["jobTemplate"]["spec"]["completions"] == cj["spec"]["jobTemplate"]["spec"]["parallelism"] == 2


def test_the_pods_take_every_gpu_at_idle_priority_and_end_on_a_disruption() -> None:
    pc = [o for o in objects("lab") if o["kind"] == "PriorityClass" and o["metadata"]["name"] == IDLE_PRIORITY_CLASS]
    assert pc and pc[0]["value"] < 0 and pc[0]["preemptionPolicy"] == "Never" and not pc[0]["globalDefault"]
    (cj,) = cronjobs("lab")
    spec = pod_spec(cj)
    assert spec["priorityClassName"] == IDLE_PRIORITY_CLASS and spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1  # every GPU of a one-GPU node
    script = container["command"][2]
    assert "-m trainer.allreduce_bench" in script and "--link-gbps=25" in script.replace("--link-gbps 25", "--link-gbps=25")
    # re-checks a node the service took out for NCCL (tainted with that reason, not cordoned), and
    # no node cordoned by an administrator or out for another reason
    ours = [t for t in spec["tolerations"] if t.get("key") == TAINT_KEY]
    assert ours == [{"key": TAINT_KEY, "operator": "Equal", "value": svc.NCCL_FAIL_REASON, "effect": "NoSchedule"}]
    assert not [t for t in spec["tolerations"] if t.get("key") == UNSCHEDULABLE_TAINT or
                (t.get("operator") == "Exists" and not t.get("key"))]
    job = cj["spec"]["jobTemplate"]["spec"]
    # a disruption ends the run; nothing else does before both pods reached their own verdict
    assert job["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    assert job["backoffLimitPerIndex"] == 0 and job["maxFailedIndexes"] == job["completions"] == 2
    # the rendezvous waits as long as the Job may run: the peer may start later
    assert f"join_timeout={30 * 60},read_timeout={30 * 60}" in script
    assert not any(v.get("persistentVolumeClaim") for v in spec["volumes"])
    # the diagnostic's pods are idle-only too
    diag = [o for o in objects("lab") if o["kind"] == "CronJob" and o["metadata"]["name"] == "gpu-diag-gpu-1"]
    assert pod_spec(diag[0])["priorityClassName"] == IDLE_PRIORITY_CLASS


def test_the_pods_have_no_api_access_and_carry_what_the_service_reads() -> None:
    names = {o["metadata"]["name"] for o in objects("lab-5")}
    assert not {n for n in names if n.startswith("nccl-pair-check")}  # no account, no role of its own
    for cj in cronjobs("lab-5"):
        spec = pod_spec(cj)
        assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
        meta = cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
        assert meta["labels"][ncclpair.POD_LABEL[0]] == ncclpair.POD_LABEL[1]
        assert meta["annotations"][ncclpair.POD_CHECK] == cj["metadata"]["name"]
        assert meta["annotations"][ncclpair.POD_NODES] == ",".join(pair_of(cj))
        assert meta["annotations"][ncclpair.POD_VALID_HOURS] == "48"
        assert [c["name"] for c in spec["containers"]] == [ncclpair.CONTAINER]


def test_outputs_list_the_pairs_and_rounds() -> None:
    out = plan("lab-5").outputs["gpuHealth"]["ncclPairCheck"]
    assert out["schedule"] == ["47 4 * * *", "19 5 * * *"]
    assert sorted(out["pairs"].values()) == ["gpu-1,gpu-2", "gpu-2,gpu-3", "gpu-3,gpu-4", "gpu-4,gpu-1"]
    out3 = plan("lab-3").outputs["gpuHealth"]["ncclPairCheck"]
    assert out3["schedule"] == ["47 4 * * *", "19 5 * * *", "51 5 * * *"]


# --- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "key", "text"), [
    ({"network": {"linkGbps": ""}, "acceptance": {"nccl": False}, "gpuHealth": {"ncclCheck": {"enabled": True}}},
     "gpuHealth.ncclCheck.enabled", "network.linkGbps"),
    ({"gpuHealth": {"ncclCheck": {"schedule": "*/10 4 * * *"}}}, "gpuHealth.ncclCheck", "single numbers"),
    ({"gpuHealth": {"ncclCheck": {"schedule": "0 23 * * *"}}}, "gpuHealth.ncclCheck", "past midnight"),
    ({"gpuHealth": {"ncclCheck": {"timeoutMinutes": 2}}}, "gpuHealth.ncclCheck.timeoutMinutes", "5"),
])
def test_bad_config_is_refused_naming_the_key(overrides: dict[str, Any], key: str, text: str) -> None:
    values, secret_keys = stack_config_with("lab", **overrides)
    with pytest.raises(config.ConfigError) as err:
        program.run("lab", config=(values, secret_keys))
    message = str(err.value)
    assert key in message and text in message, message


def test_unset_follows_the_link_rate() -> None:
    values, secret_keys = stack_config_with("lab", network={"linkGbps": ""}, acceptance={"nccl": False})
    p = program.run("lab", config=(values, secret_keys))
    assert not [r for r in p.resources if r.name.startswith("nccl-pair-check")]
    assert p.outputs["gpuHealth"]["ncclPairCheck"].startswith("off: ")
