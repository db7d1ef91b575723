"""The GPU software stack (gpu.stack device-plugin | operator), GPU sharing and the GPU-ready gate.

Config errors name their key; switching `gpu-cluster:gpu` in a committed stack config switches the
whole plan (in-cluster components and lab node prep) with nothing else edited; every plan has one
GPU stack component and one gate Job, wired after the GPU stack and valid for Kubernetes 1.34.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from components import versions
from components.ready_gate import GATE_LABEL
from config import ConfigError
from render import program
from render.__main__ import kubernetes_objects
from render.program import Plan, Registration
from stacks import addons
from tests.conftest import lab_config

SOFTWARE_STACK = "gpucluster:gpu:SoftwareStack"
READY_GATE = "gpucluster:gpu:ReadyGate"
NODE_PREP = "gpucluster:lab:NodePrep"
COMMAND = "command:remote:Command"
RELEASE = "kubernetes:helm.sh/v3:Release"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"
JOB = "kubernetes:batch/v1:Job"
NAMESPACE = "kubernetes:core/v1:Namespace"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
PSA = "pod-security.kubernetes.io/enforce"


def gpu(stack: str = "device-plugin", sharing: dict | None = None, gate: dict | None = None) -> dict[str, Any]:
    return {
        "stack": stack,
        "sharing": sharing or {"mode": "none"},
        "gate": gate or {"enabled": True, "timeoutMinutes": 30},
    }


def _config(stack: str, gpu_json: str, extra: tuple[tuple[str, str], ...] = ()) -> tuple[dict[str, str], list[str]]:
    """The committed stack config with only `gpu-cluster:gpu` (and `extra` keys) replaced."""
    values, secret_keys = program.stack_config(stack)
    return {**values, "gpu-cluster:gpu": gpu_json, **dict(extra)}, secret_keys


@functools.cache
def _plan(stack: str, gpu_json: str, extra: tuple[tuple[str, str], ...] = ()) -> Plan:
    return program.run(stack, config=_config(stack, gpu_json, extra))


def plan_for(stack: str, gpu_cfg: dict[str, Any], **extra: Any) -> Plan:
    encoded = tuple(sorted((f"gpu-cluster:{k}", v if isinstance(v, str) else json.dumps(v)) for k, v in extra.items()))
    return _plan(stack, json.dumps(gpu_cfg, sort_keys=True), encoded)


PRE_INSTALLED = {"branch": "570", "preinstalled": True}


def releases(plan: Plan, chart: str) -> list[Registration]:
    return [r for r in plan.of_type(RELEASE) if r.inputs.get("chart") == chart]


def namespace(plan: Plan, name: str) -> Registration:
    (ns,) = [r for r in plan.of_type(NAMESPACE) if r.inputs["metadata"]["name"] == name]
    return ns


def device_plugin_daemonsets(plan: Plan) -> list[Registration]:
    return [r for r in plan.of_type(DAEMONSET) if r.inputs["metadata"]["name"] == "gpu-device-plugin"]


def operator_values(plan: Plan) -> dict[str, Any]:
    (release,) = releases(plan, versions.GPU_OPERATOR_CHART)
    return release.inputs["values"]


def gate_jobs(plan: Plan) -> list[Registration]:
    """Jobs of the GPU layer (the training layer's Jobs are children of TrainingJob components)."""
    gates = {r.urn for r in plan.of_type(READY_GATE)}
    return [r for r in plan.of_type(JOB) if r.parent in gates or "gpucluster:training:Job" not in r.urn]


def gate_job(plan: Plan) -> Registration:
    (job,) = gate_jobs(plan)
    return job


def children(plan: Plan, parent: Registration) -> list[Registration]:
    return [r for r in plan.resources if r.parent == parent.urn]


def descendants(plan: Plan, parent: Registration) -> list[Registration]:
    out = []
    for child in children(plan, parent):
        out += [child, *descendants(plan, child)]
    return out


def committed_gpu_hosts(stack: str = "lab") -> list[str]:
    values, _ = program.stack_config(stack)
    return [h["name"] for h in json.loads(values["gpu-cluster:hosts"]) if h.get("gpus", 0) > 0]


# ---------------------------------------------------------------------------------------------
# Config validation: every error names its key


@pytest.mark.parametrize(
    ("gpu_cfg", "key", "fragment"),
    [
        pytest.param(gpu("device-plugin", {"mode": "mig", "migProfile": "all-1g.10gb"}),
                     "gpu.sharing.migProfile", "the device-plugin path cannot partition GPUs; partition them with "
                     "nvidia-smi mig or use gpu.stack operator", id="device-plugin-cannot-partition"),
        pytest.param(gpu("device-plugin", {"mode": "mig", "migProfile": "all-balanced"}),
                     "gpu.sharing.migProfile", "nvidia-smi mig", id="device-plugin-cannot-balance"),
        pytest.param(gpu("device-plugin", {"mode": "mig", "migStrategy": "mixed"}),
                     "gpu.sharing.migStrategy", "gate", id="device-plugin-mixed-with-gate"),
        pytest.param(gpu("operator", {"mode": "mig", "migProfile": "all-disabled"}),
                     "gpu.sharing.migProfile", "profile", id="mig-all-disabled"),
        pytest.param(gpu("device-plugin", {"mode": "time-slicing", "replicas": 1}),
                     "gpu.sharing.replicas", "2 to 48", id="time-slicing-1-replica"),
        pytest.param(gpu("device-plugin", {"mode": "time-slicing", "replicas": 49}),
                     "gpu.sharing.replicas", "2 to 48", id="time-slicing-49-replicas"),
        pytest.param(gpu("device-plugin", {"mode": "none", "replicas": 4}),
                     "gpu.sharing.replicas", "time-slicing", id="replicas-without-time-slicing"),
        pytest.param(gpu("operator", {"mode": "mig", "migProfile": "1g.10gb"}),
                     "gpu.sharing.migProfile", "all-", id="bad-mig-profile"),
        pytest.param(gpu("gpu-operator"), "gpu.stack", "'device-plugin'", id="unknown-stack"),
        pytest.param(gpu("operator", {"mode": "mig", "migStrategy": "mixed", "migProfile": "all-balanced"}),
                     "gpu.sharing.migProfile", "mixed", id="mixed-balanced-with-gate"),
        pytest.param(gpu(gate={"enabled": True, "timeoutMinutes": 4}),
                     "gpu.gate.timeoutMinutes", "5", id="gate-timeout-too-short"),
        pytest.param(gpu(gate={"enabled": True, "timeoutMinutes": 241}),
                     "gpu.gate.timeoutMinutes", "240", id="gate-timeout-too-long"),
    ],
)
def test_bad_gpu_config_names_its_key(gpu_cfg: dict[str, Any], key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        lab_config(gpu=gpu_cfg)
    problems = dict(exc.value.problems)
    assert key in problems, f"expected an error on {key}, got {exc.value.problems}"
    assert fragment in problems[key]
    assert f"gpu-cluster:{key}" in str(exc.value)


def test_unknown_stack_lists_allowed_values() -> None:
    with pytest.raises(ConfigError) as exc:
        lab_config(gpu=gpu("gpu-operator"))
    message = dict(exc.value.problems)["gpu.stack"]
    assert "device-plugin" in message and "operator" in message and "gpu-operator" in message


def test_mixed_balanced_is_fine_without_gate() -> None:
    cfg = lab_config(gpu=gpu("operator", {"mode": "mig", "migStrategy": "mixed", "migProfile": "all-balanced"},
                             {"enabled": False}))
    assert cfg.gpu.sharing.mig_profile == "all-balanced"


@pytest.mark.parametrize(
    "gpu_cfg",
    [
        gpu("device-plugin", {"mode": "time-slicing", "replicas": 2}),
        gpu("device-plugin", {"mode": "time-slicing", "replicas": 48}),
        gpu("operator", {"mode": "mig", "migStrategy": "single", "migProfile": "all-balanced"}),
        gpu("operator", {"mode": "mig", "migStrategy": "mixed", "migProfile": "all-1g.10gb"}),
        # device-plugin: GPUs partitioned by the admin, advertised by strategy
        gpu("device-plugin", {"mode": "mig", "migStrategy": "single"}),
        gpu("device-plugin", {"mode": "mig", "migStrategy": "mixed"}, {"enabled": False}),
        gpu(gate={"enabled": True, "timeoutMinutes": 5}),
        gpu(gate={"enabled": True, "timeoutMinutes": 240}),
    ],
)
def test_valid_gpu_configs_parse(gpu_cfg: dict[str, Any]) -> None:
    parsed = lab_config(gpu=gpu_cfg).gpu.model_dump(by_alias=True, mode="json")
    # What the stack file said is what the model holds (defaults fill the rest).
    assert parsed["stack"] == gpu_cfg.get("stack", "device-plugin")
    for key, value in gpu_cfg.get("sharing", {}).items():
        assert parsed["sharing"][key] == value
    for key, value in gpu_cfg.get("gate", {}).items():
        assert parsed["gate"][key] == value


def test_config_properties() -> None:
    assert lab_config().gpu_node_count == 1  # conftest's lab: one GPU host (with 2 GPUs)
    assert lab_config().host_installs_driver
    assert not lab_config(gpu=gpu("operator")).host_installs_driver
    assert not lab_config(nvidiaDriver=PRE_INSTALLED).host_installs_driver


# ---------------------------------------------------------------------------------------------
# Switching gpu.stack switches the plan, with nothing else edited

STACKS = ["lab", "dev"]
PATHS = ["device-plugin", "operator"]


@pytest.mark.parametrize("stack", STACKS)
def test_device_plugin_path(stack: str) -> None:
    plan = plan_for(stack, gpu("device-plugin"))
    assert len(device_plugin_daemonsets(plan)) == 1
    (gfd,) = releases(plan, versions.NVIDIA_DEVICE_PLUGIN_CHART)
    (dcgm,) = releases(plan, versions.DCGM_EXPORTER_CHART)
    assert gfd.inputs["namespace"] == dcgm.inputs["namespace"] == "gpu-system"
    assert gfd.inputs["values"]["gfd"]["enabled"] is True
    assert gfd.inputs["values"]["devicePlugin"]["enabled"] is False
    # The committed stacks deploy monitoring (its CRDs first): the exporter's ServiceMonitor is on.
    # With monitoring.enabled false it is off: tests/components/monitoring/test_monitoring_component.py.
    assert dcgm.inputs["values"]["serviceMonitor"]["enabled"] is True
    assert dcgm.inputs["values"]["kubernetes"]["enablePodLabels"] is True
    assert not releases(plan, versions.GPU_OPERATOR_CHART)
    assert namespace(plan, "gpu-system").inputs["metadata"]["labels"][PSA] == "privileged"
    assert plan.outputs["gpuStack"] == "device-plugin"


@pytest.mark.parametrize("stack", STACKS)
def test_operator_path(stack: str) -> None:
    plan = plan_for(stack, gpu("operator"))
    (operator,) = releases(plan, versions.GPU_OPERATOR_CHART)
    assert operator.inputs["namespace"] == "gpu-operator"
    assert operator.inputs["version"] == versions.GPU_OPERATOR_CHART_VERSION
    assert namespace(plan, "gpu-operator").inputs["metadata"]["labels"][PSA] == "privileged"
    assert not device_plugin_daemonsets(plan)
    assert not releases(plan, versions.NVIDIA_DEVICE_PLUGIN_CHART)
    assert not releases(plan, versions.DCGM_EXPORTER_CHART)
    assert not [r for r in plan.of_type(NAMESPACE) if r.inputs["metadata"]["name"] == "gpu-system"]
    assert plan.outputs["gpuStack"] == "operator"

    values = operator_values(plan)
    assert values["dcgmExporter"]["enablePodLabels"] is True
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is True  # monitoring is on in the committed stacks
    assert values["gfd"]["enabled"] is True
    assert values["toolkit"]["enabled"] is True
    assert values["devicePlugin"]["enabled"] is True
    assert "config" not in values["devicePlugin"]
    assert values["migManager"]["enabled"] is False


@pytest.mark.parametrize(
    ("stack", "extra", "driver_enabled"),
    [
        pytest.param("lab", {}, True, id="lab"),
        pytest.param("lab", {"nvidiaDriver": PRE_INSTALLED}, False, id="lab-preinstalled"),
        pytest.param("dev", {}, False, id="dev"),
    ],
)
def test_operator_installs_driver_only_where_hosts_have_none(stack: str, extra: dict, driver_enabled: bool) -> None:
    assert operator_values(plan_for(stack, gpu("operator"), **extra))["driver"]["enabled"] is driver_enabled


@pytest.mark.parametrize(("strategy", "profile"), [("single", "all-balanced"), ("mixed", "all-1g.10gb")])
def test_operator_mig_values(strategy: str, profile: str) -> None:
    values = operator_values(plan_for("lab", gpu("operator", {"mode": "mig", "migStrategy": strategy,
                                                              "migProfile": profile})))
    assert values["migManager"]["enabled"] is True
    assert values["mig"]["strategy"] == strategy
    # The profile is not the ClusterPolicy default (its CRD admits only all-disabled or ""): the GPU
    # nodes carry it as nvidia.com/mig.config (tests/components/test_mig_layout.py validates both upstream).
    assert values["migManager"]["config"]["default"] == "all-disabled"
    assert profile not in json.dumps(values)


def test_operator_time_slicing_values() -> None:
    values = operator_values(plan_for("lab", gpu("operator", {"mode": "time-slicing", "replicas": 4})))
    config = values["devicePlugin"]["config"]
    assert config["create"] is True
    assert config["name"]
    assert config["default"] in config["data"]
    assert "replicas: 4" in config["data"][config["default"]]
    assert values["migManager"]["enabled"] is False


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stack", STACKS)
def test_one_gpu_stack_and_one_gate_per_plan(stack: str, path: str) -> None:
    plan = plan_for(stack, gpu(path))
    assert len(plan.of_type(SOFTWARE_STACK)) == 1
    assert len(plan.of_type(READY_GATE)) == 1
    assert len(gate_jobs(plan)) == 1


# ---------------------------------------------------------------------------------------------
# Lab node prep follows the path


def _gpu_host_steps(plan: Plan) -> dict[str, dict[str, Registration]]:
    gpu_hosts = set(committed_gpu_hosts())
    out: dict[str, dict[str, Registration]] = {}
    for prep in plan.of_type(NODE_PREP):
        if prep.name in gpu_hosts:
            out[prep.name] = {r.name.removeprefix(f"{prep.name}-"): r
                              for r in children(plan, prep) if r.type == COMMAND}
    assert set(out) == gpu_hosts
    return out


def test_lab_device_plugin_path_prepares_driver_and_toolkit() -> None:
    for name, steps in _gpu_host_steps(plan_for("lab", gpu("device-plugin"))).items():
        assert {"nvidia-driver", "driver-ready", "nvidia-toolkit", "containerd"} <= set(steps), name
        assert "nvidia-ctk" in steps["containerd"].inputs["create"]


@pytest.mark.parametrize(("extra", "driver_ready"), [({}, False), ({"nvidiaDriver": PRE_INSTALLED}, True)])
def test_lab_operator_path_leaves_driver_and_toolkit_to_operator(extra: dict, driver_ready: bool) -> None:
    for name, steps in _gpu_host_steps(plan_for("lab", gpu("operator"), **extra)).items():
        assert "nvidia-driver" not in steps and "nvidia-toolkit" not in steps, name
        assert ("driver-ready" in steps) is driver_ready, name
        assert "nvidia-ctk" not in steps["containerd"].inputs["create"]


# ---------------------------------------------------------------------------------------------
# The GPU-ready gate


def _expected_gpu_nodes(stack: str) -> int:
    if stack == "lab":
        return len(committed_gpu_hosts())
    return len(json.loads(program.stack_config("dev")[0]["gpu-cluster:gpuNodes"]))


def test_committed_lab_has_two_gpu_hosts() -> None:
    assert _expected_gpu_nodes("lab") == 2


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stack", STACKS)
def test_gate_job(stack: str, path: str) -> None:
    plan = plan_for(stack, gpu(path, gate={"enabled": True, "timeoutMinutes": 45}))
    spec = gate_job(plan).inputs["spec"]
    n = _expected_gpu_nodes(stack)
    assert spec["completions"] == spec["parallelism"] == n
    assert spec["activeDeadlineSeconds"] == 45 * 60

    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["labels"] == GATE_LABEL
    assert pod["restartPolicy"] == "OnFailure"
    (anti,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == GATE_LABEL
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert keys == {"nvidia.com/gpu.present", "cloud.google.com/gke-accelerator"}

    (container,) = pod["containers"]
    assert container["image"] == versions.CUDA_VECTORADD_IMAGE
    command = " ".join(container["command"])
    assert "nvidia-smi -L" in command and "vectorAdd" in command
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]

    out = plan.outputs["gpuReadyGate"]
    assert isinstance(out, dict)
    assert out["job"] == "gpu-cluster-system/gpu-ready"
    assert out["gpuNodes"] == n


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stack", STACKS)
def test_gate_waits_for_gpu_stack(stack: str, path: str) -> None:
    plan = plan_for(stack, gpu(path))
    (gpu_stack,) = plan.of_type(SOFTWARE_STACK)
    (gate,) = plan.of_type(READY_GATE)
    gpu_urns = {gpu_stack.urn, *(r.urn for r in descendants(plan, gpu_stack))}
    deps = set(gate.dependencies) | set(gate_job(plan).dependencies)
    assert deps & gpu_urns, f"the gate does not depend on the GPU stack: {sorted(deps)}"
    # It waits for the stack's workloads themselves (the SDK expands a component into its custom
    # resources), not only for the component.
    workload_types = {RELEASE, DAEMONSET}
    assert {r.urn for r in descendants(plan, gpu_stack) if r.type in workload_types} <= set(gate.dependencies)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stack", STACKS)
def test_gate_objects_are_valid_and_restricted(stack: str, path: str) -> None:
    plan = plan_for(stack, gpu(path))
    (gate,) = plan.of_type(READY_GATE)
    objects = kubernetes_objects(Plan(stack=plan.stack, resources=descendants(plan, gate)))
    assert {o["kind"] for o in objects} == {"Namespace", "Job"}
    for obj in objects:
        assert kubernetes_validate.validate(obj, "1.34", strict=True) == "1.34"
    assert namespace(plan, "gpu-cluster-system").inputs["metadata"]["labels"][PSA] == "restricted"


def test_gate_asks_for_a_mig_slice_under_mixed() -> None:
    mig = {"mode": "mig", "migStrategy": "mixed", "migProfile": "all-1g.10gb"}
    assert addons.gpu_resource(lab_config(gpu=gpu("operator", mig))) == "nvidia.com/mig-1g.10gb"
    assert addons.gpu_resource(lab_config(gpu=gpu("operator", {**mig, "migStrategy": "single"}))) == "nvidia.com/gpu"
    assert addons.gpu_resource(lab_config()) == "nvidia.com/gpu"
    limits = gate_job(plan_for("lab", gpu("operator", mig))).inputs["spec"]["template"]["spec"]["containers"][0][
        "resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == 1
    assert "nvidia.com/gpu" not in limits


class _TimeoutsMonitor(program.RecordingMonitor):
    """Also keeps each registration's customTimeouts (RecordingMonitor records inputs only)."""

    timeouts: dict[str, Any] = {}

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        type(self).timeouts[f"{request.type}::{request.name}"] = request.customTimeouts
        return super().RegisterResource(request)


@pytest.mark.parametrize("minutes", [5, 45])
def test_gate_job_custom_timeouts(monkeypatch: pytest.MonkeyPatch, minutes: int) -> None:
    monkeypatch.setattr(program, "RecordingMonitor", _TimeoutsMonitor)
    monkeypatch.setattr(_TimeoutsMonitor, "timeouts", {})
    program.run("lab", config=_config("lab", json.dumps(gpu(gate={"enabled": True, "timeoutMinutes": minutes}))))
    timeouts = _TimeoutsMonitor.timeouts[f"{JOB}::gpu-ready"]
    assert timeouts.create == f"{minutes}m"


@pytest.mark.parametrize("stack", STACKS)
def test_gate_disabled(stack: str) -> None:
    plan = plan_for(stack, gpu(gate={"enabled": False, "timeoutMinutes": 30}))
    assert not gate_jobs(plan)
    assert not plan.of_type(READY_GATE)
    assert isinstance(plan.outputs["gpuReadyGate"], str)
    assert "skipped" in plan.outputs["gpuReadyGate"]
    assert len(plan.of_type(SOFTWARE_STACK)) == 1


@pytest.mark.parametrize("path", PATHS)
def test_no_gpu_nodes_no_gate(path: str) -> None:
    # No GPU node: training (enabled in the committed file) would be rejected, so it is off here.
    plan = plan_for("dev", gpu(path), gpuNodes=[], gpuNodeGpus={}, training={"enabled": False})
    assert not plan.of_type(JOB)
    assert "skipped" in plan.outputs["gpuReadyGate"]
    assert len(plan.of_type(SOFTWARE_STACK)) == 1


# ---------------------------------------------------------------------------------------------
# Time-slicing on the device-plugin path


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("replicas", [2, 4])
def test_time_slicing_config_map(stack: str, replicas: int) -> None:
    plan = plan_for(stack, gpu("device-plugin", {"mode": "time-slicing", "replicas": replicas}))
    (cm,) = [r for r in plan.of_type(CONFIGMAP) if r.inputs["metadata"]["name"] == "gpu-device-plugin-config"]
    assert cm.inputs["metadata"]["namespace"] == "gpu-system"
    config = yaml.safe_load(cm.inputs["data"]["config.yaml"])
    assert config["sharing"]["timeSlicing"]["resources"][0] == {"name": "nvidia.com/gpu", "replicas": replicas}

    (ds,) = device_plugin_daemonsets(plan)
    pod = ds.inputs["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == "gpu-device-plugin-config"
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CONFIG_FILE"] == f"{mount['mountPath']}/config.yaml"

    for obj in kubernetes_objects(Plan(stack=plan.stack, resources=[cm, ds])):
        assert kubernetes_validate.validate(obj, "1.34", strict=True) == "1.34"
    # The DaemonSet waits for its config.
    assert cm.urn in ds.dependencies


@pytest.mark.parametrize("stack", STACKS)
def test_no_time_slicing_no_config_map(stack: str) -> None:
    plan = plan_for(stack, gpu("device-plugin"))
    assert not [r for r in plan.of_type(CONFIGMAP) if r.inputs["metadata"]["name"] == "gpu-device-plugin-config"]
    (ds,) = device_plugin_daemonsets(plan)
    assert "env" not in ds.inputs["spec"]["template"]["spec"]["containers"][0]



# ---------------------------------------------------------------------------------------------
# MIG on the device-plugin path: GPUs the admin partitioned, advertised by strategy


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(("strategy", "gate"), [("single", True), ("mixed", False)])
def test_device_plugin_mig_strategy(stack: str, strategy: str, gate: bool) -> None:
    plan = plan_for(stack, gpu("device-plugin", {"mode": "mig", "migStrategy": strategy},
                               {"enabled": gate, "timeoutMinutes": 30}))
    (cm,) = [r for r in plan.of_type(CONFIGMAP) if r.inputs["metadata"]["name"] == "gpu-device-plugin-config"]
    config = yaml.safe_load(cm.inputs["data"]["config.yaml"])
    assert config == {"version": "v1", "flags": {"migStrategy": strategy}}  # no time-slicing section

    (ds,) = device_plugin_daemonsets(plan)
    pod = ds.inputs["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CONFIG_FILE"].endswith("/config.yaml")
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert sc["allowPrivilegeEscalation"] is False and not sc.get("privileged")
    assert cm.urn in ds.dependencies
    for obj in kubernetes_objects(Plan(stack=plan.stack, resources=[cm, ds])):
        assert kubernetes_validate.validate(obj, "1.34", strict=True) == "1.34"

    (gfd,) = releases(plan, versions.NVIDIA_DEVICE_PLUGIN_CHART)
    assert gfd.inputs["values"]["migStrategy"] == strategy
    assert not releases(plan, versions.GPU_OPERATOR_CHART)


def test_gfd_mig_strategy_is_the_charts_top_level_key(upstream_dir) -> None:
    """GFD reads MIG_STRATEGY from the chart's top-level `migStrategy` (null: unset)."""
    from components.gpu_stack import gfd_values

    upstream = yaml.safe_load((upstream_dir / "nvidia-device-plugin" / "values.yaml").read_text())
    assert "migStrategy" in upstream and upstream["migStrategy"] is None
    assert gfd_values(mig_strategy="mixed")["migStrategy"] == "mixed"
    assert "migStrategy" not in gfd_values()


def test_plugin_config() -> None:
    from components.device_plugin import plugin_config

    assert yaml.safe_load(plugin_config(4)) == {
        "version": "v1", "flags": {"migStrategy": "none"},
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    assert yaml.safe_load(plugin_config(mig_strategy="single")) == {"version": "v1", "flags": {"migStrategy": "single"}}
    with pytest.raises(ValueError, match="mig_strategy"):
        plugin_config(mig_strategy="all-1g.10gb")


# ---------------------------------------------------------------------------------------------
# Where the charts' pods run, and the node label on DCGM metrics


def _terms(affinity: dict[str, Any]) -> list[dict[str, Any]]:
    return affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


@pytest.mark.parametrize("stack", STACKS)
def test_dcgm_exporter_runs_on_gpu_nodes_only(stack: str, upstream_dir) -> None:
    from config.scheduling_contract import GPU_NODE_SELECTOR_TERMS

    upstream = yaml.safe_load((upstream_dir / "dcgm-exporter" / "values.yaml").read_text())
    assert upstream["affinity"] == {}  # the chart itself would schedule everywhere
    (dcgm,) = releases(plan_for(stack, gpu("device-plugin")), versions.DCGM_EXPORTER_CHART)
    terms = _terms(dcgm.inputs["values"]["affinity"])
    assert terms == GPU_NODE_SELECTOR_TERMS
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert keys == {"nvidia.com/gpu.present", "cloud.google.com/gke-accelerator"}


def test_gfd_keeps_the_charts_gpu_only_affinity(upstream_dir) -> None:
    """The nvidia-device-plugin chart's default affinity (used by its GFD DaemonSet too) already
    admits only NVIDIA nodes; this program does not override it."""
    upstream = yaml.safe_load((upstream_dir / "nvidia-device-plugin" / "values.yaml").read_text())
    keys = {e["key"] for t in _terms(upstream["affinity"]) for e in t["matchExpressions"]}
    assert keys == {"feature.node.kubernetes.io/pci-10de.present", "feature.node.kubernetes.io/cpu-model.vendor_id",
                    "nvidia.com/gpu.present"}
    (gfd,) = releases(plan_for("lab", gpu("device-plugin")), versions.NVIDIA_DEVICE_PLUGIN_CHART)
    assert "affinity" not in gfd.inputs["values"] and "nodeSelector" not in gfd.inputs["values"]


NODE_RELABELING = [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}]


@pytest.mark.parametrize("stack", STACKS)
def test_both_dcgm_service_monitors_label_the_node(stack: str, upstream_dir) -> None:
    (dcgm,) = releases(plan_for(stack, gpu("device-plugin")), versions.DCGM_EXPORTER_CHART)
    assert dcgm.inputs["values"]["serviceMonitor"]["relabelings"] == NODE_RELABELING
    assert operator_values(plan_for(stack, gpu("operator")))["dcgmExporter"]["serviceMonitor"][
        "relabelings"] == NODE_RELABELING
    # both keys exist upstream (as empty lists)
    dcgm_up = yaml.safe_load((upstream_dir / "dcgm-exporter" / "values.yaml").read_text())
    op_up = yaml.safe_load((upstream_dir / "gpu-operator" / "values.yaml").read_text())
    assert dcgm_up["serviceMonitor"]["relabelings"] == [] == op_up["dcgmExporter"]["serviceMonitor"]["relabelings"]
