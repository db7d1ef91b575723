"""gpu.stack operator with sharing.mode mig: the API server accepts the ClusterPolicy, and the GPU
nodes carry the MIG layout in the label the MIG manager reads.

Upstream truth: the gpu-operator chart (upstream_dir/charts/gpu-operator-<version>) rendered with
our values, its ClusterPolicy validated against the chart's own CRD (crds/
nvidia.com_clusterpolicies.yaml), whose migManager.config.default admits only `all-disabled` or ""
and names the node label that selects a layout (nvidia.com/mig.config).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from components import gpu_stack, versions
from config.gpu import GpuConfig
from config.scheduling_contract import MIG_CONFIG_LABEL
from render import program
from render.program import Plan, Registration
from tests.monitoring_crd_schema import strict
from tests.stacks.test_stacks import dependency_graph, transitive

RELEASE = "kubernetes:helm.sh/v3:Release"
NODE_PATCH = "kubernetes:core/v1:NodePatch"
NODE_POOL = "gcp:container/nodePool:NodePool"
COMMAND = "command:remote:Command"

# Profiles of the MIG manager's default mig-parted config for the MIG GPUs GKE and the labs here run
# (A100 40/80 GB, H100 80 GB). The gpu-operator chart does not ship that config: the operator
# creates the `default-mig-parted-config` ConfigMap from its own assets (NVIDIA/gpu-operator v26.7.0,
# assets/state-mig-manager/0400_configmap.yaml, blob 90cdde09), and mig-manager v0.15.0 generates the
# same names from the hardware (NVIDIA/mig-parted pkg/mig/builder/builder.go: all-disabled,
# all-enabled, all-balanced, all-<profile>). A subset, for the profiles these tests use.
NVIDIA_DEFAULT_PROFILES = frozenset({
    "all-disabled", "all-enabled", "all-balanced",
    "all-1g.5gb", "all-2g.10gb", "all-3g.20gb", "all-4g.20gb", "all-7g.40gb",  # A100-40GB
    "all-1g.10gb", "all-1g.20gb", "all-2g.20gb", "all-3g.40gb", "all-4g.40gb", "all-7g.80gb",  # 80GB
})

MIG_CASES = [
    pytest.param({"mode": "mig", "migStrategy": "mixed", "migProfile": "all-1g.10gb"}, id="mixed-1g.10gb"),
    pytest.param({"mode": "mig", "migStrategy": "single", "migProfile": "all-balanced"}, id="single-balanced"),
    pytest.param({"mode": "mig", "migStrategy": "single", "migProfile": "all-3g.40gb"}, id="single-3g.40gb"),
]


def operator_gpu(sharing: dict[str, Any]) -> dict[str, Any]:
    return {"stack": "operator", "sharing": sharing}


@functools.cache
def _plan(stack: str, gpu_json: str, gke_json: str | None = None) -> Plan:
    values, secret_keys = program.stack_config(stack)
    values = {**values, "gpu-cluster:gpu": gpu_json}
    if gke_json is not None:
        values["gpu-cluster:gke"] = gke_json
    return program.run(stack, config=(values, secret_keys))


def plan_for(stack: str, sharing: dict[str, Any]) -> Plan:
    gke_json = None
    if stack == "gke":  # the operator needs Google's installer (or no) driver on every pool
        gke = json.loads(program.stack_config("gke")[0]["gpu-cluster:gke"])
        for pool in gke["gpuPools"]:
            pool["driver"] = "installer-ubuntu"
            if pool["accelerator"]["type"] == "nvidia-tesla-a100":  # an 80GB A100: every profile of MIG_CASES
                pool["machineType"], pool["accelerator"]["type"] = "a2-ultragpu-1g", "nvidia-a100-80gb"
        gke_json = json.dumps(gke, sort_keys=True)
    return _plan(stack, json.dumps(operator_gpu(sharing), sort_keys=True), gke_json)


# ------------------------------------------------------------------------------------------------
# upstream: the chart, its CRD


def cluster_policy_crd(upstream_dir: Path) -> dict[str, Any]:
    path = upstream_dir / "charts" / f"gpu-operator-{versions.GPU_OPERATOR_CHART_VERSION}" / "crds" / \
        "nvidia.com_clusterpolicies.yaml"
    return yaml.safe_load(path.read_text())


def cluster_policy_schema(upstream_dir: Path) -> dict[str, Any]:
    (version,) = [v for v in cluster_policy_crd(upstream_dir)["spec"]["versions"] if v.get("storage")]
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    return strict(schema)  # closed objects: a typo'd field fails too


def mig_config_label(upstream_dir: Path) -> str:
    """The node label the CRD documents for a node's MIG config (migManager.config.default)."""
    spec = cluster_policy_crd(upstream_dir)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    text = spec["properties"]["migManager"]["properties"]["config"]["properties"]["default"]["description"]
    match = re.search(r"node label (\S+)", text)
    assert match, text
    return match.group(1)


def render_cluster_policy(upstream_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
    import helm_python
    from helm_python import _native
    from helm_python.chart import _dumps

    chart_dir = upstream_dir / "charts" / f"gpu-operator-{versions.GPU_OPERATOR_CHART_VERSION}"
    options = {"name": "gpu-operator", "namespace": gpu_stack.OPERATOR_NAMESPACE,
               "kube_version": f"v{versions.KUBERNETES_DEFAULT}", "is_install": True}
    with helm_python.Chart.load(str(chart_dir)) as chart:
        rendered = json.loads(_native.call_string("helm_render", chart._raw(), _dumps(values), json.dumps(options)))
    (policy,) = [doc for text in rendered.values() for doc in yaml.safe_load_all(text)
                 if isinstance(doc, dict) and doc.get("kind") == "ClusterPolicy"]
    return policy


def operator_release(plan: Plan) -> Registration:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs.get("chart") == versions.GPU_OPERATOR_CHART]
    return release


# ------------------------------------------------------------------------------------------------
# the ClusterPolicy the API server gets


@pytest.mark.parametrize("sharing", [*MIG_CASES, pytest.param({"mode": "none"}, id="no-mig")])
@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_cluster_policy_is_valid_against_its_crd(upstream_dir: Path, stack: str, sharing: dict[str, Any]) -> None:
    values = operator_release(plan_for(stack, sharing)).inputs["values"]
    policy = render_cluster_policy(upstream_dir, values)
    jsonschema.validate(policy, cluster_policy_schema(upstream_dir), cls=jsonschema.Draft7Validator)
    assert policy["spec"]["migManager"]["enabled"] is (sharing["mode"] == "mig")


@pytest.mark.parametrize("driver_on_host", [True, False])
@pytest.mark.parametrize("sharing", MIG_CASES)
def test_gke_cluster_policy_is_valid_against_its_crd(upstream_dir: Path, sharing: dict[str, Any],
                                                    driver_on_host: bool) -> None:
    values = gpu_stack.operator_values(GpuConfig.model_validate(operator_gpu(sharing)), driver_on_host, gke=True)
    policy = render_cluster_policy(upstream_dir, values)
    jsonschema.validate(policy, cluster_policy_schema(upstream_dir), cls=jsonschema.Draft7Validator)


def test_the_crd_rejects_a_profile_as_the_default(upstream_dir: Path) -> None:
    """The breaker this file guards against, held to the real schema (the value the program once wrote)."""
    values = gpu_stack.operator_values(GpuConfig.model_validate(operator_gpu({"mode": "mig", "migProfile":
                                                                             "all-1g.10gb"})), False)
    values["migManager"]["config"] = {"default": "all-1g.10gb"}
    with pytest.raises(jsonschema.ValidationError, match="all-1g.10gb"):
        jsonschema.validate(render_cluster_policy(upstream_dir, values), cluster_policy_schema(upstream_dir),
                            cls=jsonschema.Draft7Validator)


# ------------------------------------------------------------------------------------------------
# the label on the GPU nodes


def mig_patches(plan: Plan, label: str) -> dict[str, Registration]:
    """node name -> the NodePatch that sets `label` on it."""
    return {r.inputs["metadata"]["name"]: r for r in plan.of_type(NODE_PATCH)
            if label in (r.inputs["metadata"].get("labels") or {})}


def test_label_key_is_the_one_the_crd_documents(upstream_dir: Path) -> None:
    assert MIG_CONFIG_LABEL == mig_config_label(upstream_dir) == "nvidia.com/mig.config"


@pytest.mark.parametrize("sharing", MIG_CASES)
def test_lab_gpu_nodes_carry_the_layout(upstream_dir: Path, sharing: dict[str, Any]) -> None:
    plan = plan_for("lab", sharing)
    label = mig_config_label(upstream_dir)
    hosts = json.loads(program.stack_config("lab")[0]["gpu-cluster:hosts"])
    gpu_hosts = {h["name"] for h in hosts if h.get("gpus", 0) > 0}
    patches = mig_patches(plan, label)
    assert set(patches) == gpu_hosts
    graph = dependency_graph(plan)
    for node, patch in patches.items():
        labels = patch.inputs["metadata"]["labels"]
        assert labels[label] == sharing["migProfile"] in NVIDIA_DEFAULT_PROFILES
        # The operator labels a MIG-capable node it finds unlabelled `all-disabled`: ours must win.
        assert patch.inputs["metadata"]["annotations"]["pulumi.com/patchForce"] == "true"
        # The Node object exists only once the host has joined.
        joined = [r for r in plan.of_type(COMMAND) if r.name == f"{node}-ready"]
        assert joined and {j.urn for j in joined} <= transitive(graph, patch.urn), node
    # The GPU-ready gate counts MIG slices: it waits for the layout too.
    (gate,) = plan.of_type("gpucluster:gpu:ReadyGate")
    assert {p.urn for p in patches.values()} <= transitive(graph, gate.urn)


@pytest.mark.parametrize("sharing", MIG_CASES)
def test_dev_gpu_nodes_carry_the_layout(upstream_dir: Path, sharing: dict[str, Any]) -> None:
    plan = plan_for("dev", sharing)
    gpu_nodes = set(json.loads(program.stack_config("dev")[0]["gpu-cluster:gpuNodes"]))
    patches = mig_patches(plan, mig_config_label(upstream_dir))
    assert set(patches) == gpu_nodes
    assert {p.inputs["metadata"]["labels"][MIG_CONFIG_LABEL] for p in patches.values()} == \
        {sharing["migProfile"]}


@pytest.mark.parametrize("sharing", MIG_CASES)
def test_gke_gpu_pools_carry_the_layout(upstream_dir: Path, sharing: dict[str, Any]) -> None:
    """GKE nodes come and go with the autoscaler: the pool's node labels carry the layout."""
    plan = plan_for("gke", sharing)
    label = mig_config_label(upstream_dir)
    pools = [r for r in plan.of_type(NODE_POOL) if r.inputs["name"] != "system"]
    assert pools
    for pool in pools:
        assert pool.inputs["nodeConfig"]["labels"][label] == sharing["migProfile"] in NVIDIA_DEFAULT_PROFILES
    assert not mig_patches(plan, label)


@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_no_layout_label_without_mig(upstream_dir: Path, stack: str) -> None:
    assert not mig_patches(plan_for(stack, {"mode": "none"}), mig_config_label(upstream_dir))
    assert not mig_patches(program.run(stack), mig_config_label(upstream_dir))  # device-plugin path


@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_training_asks_for_the_slice_type_under_mixed(stack: str) -> None:
    """Under the mixed strategy GPUs are advertised only by slice type: a pod asking for
    nvidia.com/gpu would never be scheduled (the whole-cluster check, run on this plan by
    tests/whole_cluster.py, places it against the advertised resources)."""
    plan = plan_for(stack, {"mode": "mig", "migStrategy": "mixed", "migProfile": "all-1g.10gb"})
    jobs = [r for r in plan.of_type("kubernetes:batch/v1:Job") if r.inputs["metadata"]["namespace"] == "training"]
    assert jobs
    for job in jobs:
        (container,) = job.inputs["spec"]["template"]["spec"]["containers"]
        assert set(container["resources"]["limits"]) == {"nvidia.com/mig-1g.10gb", "cpu", "memory"}
