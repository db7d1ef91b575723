"""W&B Launch (components/training/wandb_launch.py) in a rendered stack: the API key never leaves
its Secrets, the launch-agent chart renders offline and comes up, its RBAC lets the agent run Jobs
in the training namespace only, and the queue config passes the wandb package's own checks and
Kubernetes' schema."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from wandb.sdk.launch.agent.config import AgentConfig
from wandb.sdk.launch.errors import LaunchError
from wandb.sdk.launch.utils import recursive_macro_sub, validate_kubernetes_resource_args

from components import versions
from components.storage_contract import CLAIM_NAME, MOUNTS, TRAINING_NAMESPACE
from components.training import wandb_launch
from components.training.wandb_launch import AGENT_NAMESPACE, API_KEY_SECRET, RELEASE_NAME
from config.scheduling_contract import CONTROL_PLANE_TOLERATION, GPU_RESOURCE, JOB_LABEL, gpu_tolerations
from render import cluster, program
from render.__main__ import write
from render.cluster.objects import Obj, collect

CANARY = "CANARY-WANDB-KEY-7e3f"
WANDB = {"enabled": True, "entity": "ml-team", "queue": "gpu-queue", "project": "llm", "maxJobs": 2}
AGENT_SA = f"wandb-launch-serviceaccount-{RELEASE_NAME}"


def wandb_config(stack: str) -> tuple[dict[str, str], list[str]]:
    """The committed stack with wandb enabled, the canary as the API key secret."""
    values, secret_keys = program.stack_config(stack, secret_value=CANARY)
    values["gpu-cluster:wandb"] = json.dumps(WANDB)
    values["gpu-cluster:wandbApiKey"] = CANARY
    return values, [*secret_keys, "gpu-cluster:wandbApiKey"]


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    return program.run("dev", config=wandb_config("dev"))


@pytest.fixture(scope="module")
def rendered(plan: program.Plan, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wandb") / "out"
    write(plan, out)
    return out


@pytest.fixture(scope="module")
def chart_objects(plan: program.Plan, upstream_dir: Path) -> list[Obj]:
    return collect(plan, upstream_dir, plan.config.kubernetes_version).objects


def release(plan: program.Plan) -> program.Registration:
    (r,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == RELEASE_NAME]
    return r


# --- the API key --------------------------------------------------------------------------------


def test_the_key_is_in_no_written_file_and_no_output(plan: program.Plan, rendered: Path) -> None:
    files = [p for p in rendered.rglob("*") if p.is_file()]
    assert (rendered / "helm" / f"{RELEASE_NAME}.yaml") in files
    assert [str(p) for p in files if CANARY.encode() in p.read_bytes()] == []
    assert CANARY not in json.dumps(plan.outputs)
    assert CANARY not in json.dumps([r.entry() for r in plan.resources])


def test_the_key_reaches_the_cluster_only_as_secret_secrets(plan: program.Plan) -> None:
    secrets = [r for r in plan.of_type("kubernetes:core/v1:Secret") if r.inputs["metadata"]["name"] == API_KEY_SECRET]
    assert sorted(r.inputs["metadata"]["namespace"] for r in secrets) == sorted([AGENT_NAMESPACE, TRAINING_NAMESPACE])
    for r in secrets:
        assert r.inputs["stringData"] == program.SECRET_MARKER
        assert r.inputs["type"] == "kubernetes.io/basic-auth"
    values = release(plan).inputs["values"]
    # The chart makes no Secret of its own and is never handed the key.
    assert values["agent"]["useExternalWandbSecret"] is True and values["agent"]["apiKey"] == ""


# --- the chart, rendered offline ----------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "lab", "gke"])
def test_the_stack_comes_up_with_the_agent(stack: str, upstream_dir: Path) -> None:
    plan = program.run(stack, config=wandb_config(stack))
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    (line,) = [line for line in report.lines if f"Deployment {AGENT_NAMESPACE}/" in line]
    assert f"release {RELEASE_NAME} ({versions.WANDB_LAUNCH_AGENT_CHART} {versions.WANDB_LAUNCH_AGENT_CHART_VERSION})" in line
    if stack == "lab":  # every lab node is tainted: the agent, an add-on, runs on the control plane
        assert "1 pod → cp-1" in line, line


def test_the_agent_pod(chart_objects: list[Obj]) -> None:
    (deployment,) = [o for o in chart_objects if o.kind == "Deployment" and o.namespace == AGENT_NAMESPACE]
    pod = deployment.body["spec"]["template"]["spec"]
    assert pod["tolerations"] == [CONTROL_PLANE_TOLERATION]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in pod["affinity"]["nodeAffinity"]
    (container,) = pod["containers"]
    assert container["image"] == versions.WANDB_LAUNCH_AGENT_IMAGE
    env = {e["name"]: e for e in container["env"]}
    assert env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": API_KEY_SECRET, "key": "password"}
    (config_map,) = [o for o in chart_objects if o.kind == "ConfigMap" and o.namespace == AGENT_NAMESPACE]
    agent = AgentConfig(**yaml.safe_load(config_map.body["data"]["launch-config.yaml"]))
    assert (agent.entity, agent.queues, agent.max_jobs, agent.builder and agent.builder.type.value) == (
        "ml-team", ["gpu-queue"], 2, "noop")
    (pdb,) = [o for o in chart_objects if o.kind == "PodDisruptionBudget" and o.namespace == AGENT_NAMESPACE]
    assert pdb.body["spec"]["minAvailable"] == 0  # a drain can move it


def job_grants(objects: list[Obj]) -> tuple[set[str], list[str]]:
    """(namespaces where the agent's ServiceAccount may create batch Jobs, cluster-wide bindings of it)."""
    def creates_jobs(rules: list[dict[str, Any]]) -> bool:
        return any(
            {"batch", "*"} & set(r.get("apiGroups", [])) and {"jobs", "*"} & set(r.get("resources", []))
            and {"create", "*"} & set(r.get("verbs", []))
            for r in rules
        )

    roles = {(o.kind, o.namespace if o.kind == "Role" else None, o.name): o.body.get("rules") or []
             for o in objects if o.kind in ("Role", "ClusterRole")}
    granted, cluster_wide = set(), []
    for o in objects:
        if o.kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == AGENT_SA
                   and s.get("namespace") == AGENT_NAMESPACE for s in o.body.get("subjects") or []):
            continue
        ref = o.body["roleRef"]
        rules = roles[(ref["kind"], o.namespace if ref["kind"] == "Role" else None, ref["name"])]
        if o.kind == "ClusterRoleBinding":
            cluster_wide.append(o.name)
        elif creates_jobs(rules):
            granted.add(str(o.namespace))
    return granted, cluster_wide


def test_the_agent_runs_jobs_in_the_training_namespace_only(chart_objects: list[Obj]) -> None:
    granted, cluster_wide = job_grants(chart_objects)
    assert cluster_wide == []
    # The chart always grants its own namespace too (its Role, and its ClusterRole bound there) ...
    assert granted == {TRAINING_NAMESPACE, AGENT_NAMESPACE}
    # ... where a quota admits no Job and no pod beside the agent's own.
    quotas = [o for o in chart_objects if o.kind == "ResourceQuota" and o.namespace == AGENT_NAMESPACE]
    assert [q.body["spec"]["hard"] for q in quotas] == [{"count/jobs.batch": "0", "pods": "1"}]
    fenced = {AGENT_NAMESPACE}
    assert granted - fenced == {TRAINING_NAMESPACE}


def test_the_grant_check_has_teeth(chart_objects: list[Obj]) -> None:
    """The chart's default additionalTargetNamespaces (default, wandb) would show up."""
    objects = copy.deepcopy(chart_objects)
    binding = next(o for o in objects if o.kind == "RoleBinding" and o.namespace == TRAINING_NAMESPACE)
    extra = copy.deepcopy(binding)
    extra.body["metadata"]["namespace"] = "default"
    assert job_grants([*objects, extra])[0] == {TRAINING_NAMESPACE, AGENT_NAMESPACE, "default"}


# --- the queue config ---------------------------------------------------------------------------


def as_the_agent_submits(queue: dict[str, Any]) -> dict[str, Any]:
    """The Job the agent makes of the queue config (kubernetes_runner._inject_defaults, in short):
    macros filled, apiVersion and kind added, a generated name."""
    job = recursive_macro_sub(copy.deepcopy(queue), {"run_id": "abc123xy", "image_uri": "registry.example.com/x:1"})
    job = {"apiVersion": "batch/v1", "kind": "Job", **job}
    job["metadata"]["generateName"] = "launch-ml-team-llm-"
    return job


def test_the_queue_config_is_the_training_pod(plan: program.Plan, rendered: Path) -> None:
    queue = plan.outputs["wandbQueueConfig"]
    assert yaml.safe_load((rendered / "wandb" / "queue-config.yaml").read_text()) == queue
    assert json.loads((rendered / "wandb" / "queue-config.json").read_text()) == queue
    t = plan.config.training
    assert queue["metadata"]["namespace"] == TRAINING_NAMESPACE
    assert queue["spec"]["backoffLimit"] == 0
    pod = queue["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["tolerations"] == gpu_tolerations()
    (container,) = pod["containers"]
    assert container["image"] == t.image
    assert container["resources"] == {
        "requests": {"cpu": t.cpu_request, "memory": t.memory_request},
        "limits": {GPU_RESOURCE: t.gpus_per_node, "cpu": t.cpu_limit, "memory": t.memory_limit},
    }
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [CLAIM_NAME]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {path for _, path in MOUNTS.values()} | {"/dev/shm"} == mounts
    assert {"name": "XDG_CACHE_HOME", "value": MOUNTS["cache"][1]} in container["env"]
    assert queue["spec"]["template"]["metadata"]["labels"][JOB_LABEL] == "wandb-${run_id}"
    outputs = plan.outputs["wandbLaunch"]
    assert outputs["agentNamespace"] == AGENT_NAMESPACE and outputs["queue"] == "gpu-queue"
    assert outputs["submit"] == "wandb launch -d <image> -q gpu-queue -e ml-team -p llm"


def test_the_queue_config_passes_wandbs_own_check_and_kubernetes_strict(plan: program.Plan) -> None:
    queue = plan.outputs["wandbQueueConfig"]
    validate_kubernetes_resource_args(queue)  # what the agent runs on every item it takes
    job = as_the_agent_submits(queue)
    validate_kubernetes_resource_args(job)
    assert job["metadata"]["labels"][JOB_LABEL] == "wandb-abc123xy"
    for minor in versions.KUBERNETES_SUPPORTED_MINORS:
        assert kubernetes_validate.validate(job, minor, strict=True) == minor


def test_the_queue_checks_have_teeth(plan: program.Plan) -> None:
    """The training pod's own securityContext is what the agent refuses; a misplaced field fails
    Kubernetes' strict schema."""
    queue = copy.deepcopy(plan.outputs["wandbQueueConfig"])
    queue["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False}
    with pytest.raises(LaunchError, match="securityContext"):
        validate_kubernetes_resource_args(queue)
    job = as_the_agent_submits(plan.outputs["wandbQueueConfig"])
    job["spec"]["template"]["spec"]["backoffLimit"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.34", strict=True)


def test_runs_may_reach_wandb(plan: program.Plan) -> None:
    (policy,) = [r for r in plan.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
                 if r.inputs["metadata"]["name"] == wandb_launch.EGRESS_POLICY]
    labels = plan.outputs["wandbQueueConfig"]["spec"]["template"]["metadata"]["labels"]
    selector = policy.inputs["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert policy.inputs["spec"]["egress"][0]["ports"] == [{"protocol": "TCP", "port": 443}]
