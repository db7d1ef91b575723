"""The whole-cluster check ("would it come up", render/cluster/): every committed stack comes up,
and each kind of deploy-time breaker is found, named with its workload, node and reason.

Breakers are made by changing one thing in a real plan (the objects then go through the real
upstream charts and Kubernetes' schemas), so each test shows the check sees what the cluster would.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from render import __main__ as render_main
from render import cluster, program
from render.cluster import nodes as node_model
from render.cluster import pod_security, scheduling
from render.program import Plan

RELEASE = "kubernetes:helm.sh/v3:Release"
JOB = "kubernetes:batch/v1:Job"


@pytest.fixture(autouse=True)
def _upstream_env(upstream_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_CLUSTER_UPSTREAM", str(upstream_dir))


def _config(stack: str, **overrides: Any) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config(stack)
    values.update({f"gpu-cluster:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in overrides.items()})
    return values, secret_keys


def _plan(stack: str, **overrides: Any) -> Plan:
    return program.run(stack, config=_config(stack, **overrides) if overrides else None)


def _check(plan: Plan, upstream_dir: Path) -> cluster.Report:
    return cluster.check(plan, plan.config, upstream_dir)


def _release(plan: Plan, chart: str) -> program.Registration:
    (r,) = [r for r in plan.of_type(RELEASE) if r.inputs.get("chart") == chart]
    return r


def _one(plan: Plan, type_: str, name: str) -> program.Registration:
    (r,) = [r for r in plan.of_type(type_) if r.inputs["metadata"]["name"] == name]
    return r


def _strip(value: Any, key: str) -> Any:
    """`value` without any `key` entry, at any depth."""
    if isinstance(value, dict):
        return {k: _strip(v, key) for k, v in value.items() if k != key}
    if isinstance(value, list):
        return [_strip(v, key) for v in value]
    return value


# --- every committed stack comes up ----------------------------------------------------------------

@pytest.mark.parametrize("stack", ["lab", "dev", "gke"])
def test_committed_stack_comes_up(stack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = render_main.main([stack, "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    summary = (tmp_path / "summary.md").read_text()
    assert "## Would it come up" in summary and "**yes**" in summary
    assert "✗" not in summary


@pytest.mark.parametrize(
    "stack,overrides",
    [
        ("lab", {"cni": "flannel"}),
        ("lab", {"gpu": {"stack": "operator", "sharing": {"mode": "none"}}}),
        ("lab", {"gpu": {"stack": "device-plugin", "sharing": {"mode": "time-slicing", "replicas": 4}}}),
        ("lab", {"training": {"enabled": True, "launcher": "pytorchjob", "image": "registry.example.com/t:1",
                              "nodes": 2, "gpusPerNode": 1},
                 "acceptance": {"nccl": False}}),
        ("dev", {"gpu": {"stack": "operator", "sharing": {"mode": "none"}}}),
    ],
    ids=["lab-flannel", "lab-operator", "lab-time-slicing", "lab-pytorchjob", "dev-operator"],
)
def test_variants_come_up(stack: str, overrides: dict[str, Any], upstream_dir: Path) -> None:
    report = _check(_plan(stack, **overrides), upstream_dir)
    assert report.ok, "\n".join(report.problems)


# --- what it finds ------------------------------------------------------------------------------

def test_untolerated_taints_are_named_per_node(upstream_dir: Path) -> None:
    """kube-prometheus-stack without the control-plane toleration: nothing on lab takes Grafana."""
    plan = _plan("lab")
    release = _release(plan, "kube-prometheus-stack")
    release.inputs = {**release.inputs, "values": _strip(release.inputs["values"], "tolerations")}
    report = _check(plan, upstream_dir)
    grafana = [p for p in report.problems if p.startswith("Deployment monitoring/monitoring-grafana")]
    assert grafana, report.problems
    assert "cp-1: untolerated taint node-role.kubernetes.io/control-plane:NoSchedule" in grafana[0]
    assert "gpu-1, gpu-2: untolerated taint nvidia.com/gpu=present:NoSchedule" in grafana[0]
    # The admission webhook's hook Jobs are found too (they run before the release's own objects).
    assert any("Job monitoring/monitoring-kube-prometheus-admission-create" in p for p in report.problems)


def test_a_cr_without_its_crd_is_refused(upstream_dir: Path) -> None:
    """cni: calico without the separate CRD chart (tigera-operator ships none since 3.32)."""
    plan = _plan("lab", cni="calico")
    crds = [r for r in plan.of_type(RELEASE) if r.inputs.get("chart") != "tigera-operator"
            and "calico" in str(r.inputs.get("chart"))]
    assert crds, "the calico CRDs come from their own release"
    plan.resources = [r for r in plan.resources if r not in crds]
    report = _check(plan, upstream_dir)
    assert any("no CRD for operator.tigera.io/v1 Installation" in p for p in report.problems), report.problems


def test_a_cr_must_wait_for_its_crd(upstream_dir: Path) -> None:
    plan = _plan("lab")
    (rule,) = plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    release = _release(plan, "kube-prometheus-stack")
    rule.dependencies = [d for d in rule.dependencies if d != release.urn]
    rule.parent = ""
    report = _check(plan, upstream_dir)
    assert any(p.startswith("PrometheusRule monitoring/") and "is not installed before it" in p
               for p in report.problems), report.problems


def test_cluster_policy_is_held_to_its_crd(upstream_dir: Path) -> None:
    """The MIG value the program once wrote: the ClusterPolicy CRD allows only all-disabled or ''."""
    plan = _plan("lab", gpu={"stack": "operator", "sharing": {"mode": "none"}})
    release = _release(plan, "gpu-operator")
    values = copy.deepcopy(release.inputs["values"])
    values.setdefault("migManager", {})["config"] = {"default": "all-1g.10gb"}
    release.inputs = {**release.inputs, "values": values}
    report = _check(plan, upstream_dir)
    assert any(p.startswith("ClusterPolicy ") and "migManager.config.default" in p for p in report.problems), \
        report.problems


def test_gpu_demand_beyond_the_gpus_of_the_plan(upstream_dir: Path) -> None:
    plan = _plan("lab")
    job = _one(plan, JOB, "train")
    job.inputs["spec"] = {**job.inputs["spec"], "parallelism": 3, "completions": 3}
    report = _check(plan, upstream_dir)
    (problem,) = [p for p in report.problems if p.startswith("Job training/train ")]
    assert "only 2 of 3 pods can be placed" in problem
    assert "no nvidia.com/gpu on the node" in problem or "insufficient nvidia.com/gpu" in problem


def test_gpu_daemonset_must_reach_every_gpu_node(upstream_dir: Path) -> None:
    """A GPU on the control plane: the device plugin without the control-plane toleration misses it."""
    hosts = json.loads(program.stack_config("lab")[0]["gpu-cluster:hosts"])
    hosts[0]["gpus"] = 1
    plan = _plan("lab", hosts=hosts)
    assert _check(plan, upstream_dir).ok
    ds = _one(plan, "kubernetes:apps/v1:DaemonSet", "gpu-device-plugin")
    ds.inputs = _strip(ds.inputs, "tolerations")
    report = _check(plan, upstream_dir)
    assert any(p.startswith("DaemonSet gpu-system/gpu-device-plugin") and "misses GPU nodes" in p and "cp-1" in p
               for p in report.problems), report.problems


def test_pod_security_of_the_namespace_is_enforced(upstream_dir: Path) -> None:
    plan = _plan("lab")
    job = _one(plan, JOB, "train")
    pod = job.inputs["spec"]["template"]["spec"]
    pod["containers"][0]["securityContext"] = {"privileged": True}
    report = _check(plan, upstream_dir)
    assert any(p.startswith("Job training/train ") and "Pod Security" in p and "privileged" in p
               for p in report.problems), report.problems


def test_missing_references_and_namespaces(upstream_dir: Path) -> None:
    plan = _plan("lab")
    job = _one(plan, JOB, "train")
    pod = job.inputs["spec"]["template"]["spec"]
    pod["volumes"] = [*pod.get("volumes", []), {"name": "x", "secret": {"secretName": "no-such-secret"}}]
    pod["serviceAccountName"] = "no-such-account"
    gate = _one(plan, JOB, "gpu-ready")
    gate.inputs["metadata"] = {**gate.inputs["metadata"], "namespace": "no-such-namespace"}
    report = _check(plan, upstream_dir)
    text = "\n".join(report.problems)
    assert "Secret training/no-such-secret does not exist" in text
    assert "ServiceAccount training/no-such-account does not exist" in text
    assert "namespace no-such-namespace is created by nothing in the plan" in text


def test_schema_is_strict(upstream_dir: Path) -> None:
    plan = _plan("lab")
    job = _one(plan, JOB, "train")
    job.inputs["spec"] = {**job.inputs["spec"], "backoffLimitPerIndexx": 1}
    report = _check(plan, upstream_dir)
    assert any(p.startswith("Job training/train: not valid for Kubernetes 1.34") and "backoffLimitPerIndexx" in p
               for p in report.problems), report.problems


def test_render_exits_3_naming_workload_node_and_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    real = program.run

    def broken(stack: str, *args: Any, **kwargs: Any) -> Plan:
        plan = real(stack, *args, **kwargs)
        release = _release(plan, "kube-prometheus-stack")
        release.inputs = {**release.inputs, "values": _strip(release.inputs["values"], "tolerations")}
        return plan

    monkeypatch.setattr(program, "run", broken)
    assert render_main.main(["lab", "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "Deployment monitoring/monitoring-grafana" in err and "cp-1: untolerated taint" in err
    assert "**no**" in (tmp_path / "summary.md").read_text()


def test_render_fails_without_the_upstream_charts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPU_CLUSTER_UPSTREAM", str(tmp_path / "nowhere"))
    assert render_main.main(["dev", "--out", str(tmp_path / "out")]) == 1
    assert "upstream charts" in capsys.readouterr().err
    assert render_main.main(["dev", "--out", str(tmp_path / "out"), "--no-check"]) == 0


def test_renderer_never_writes_outside_out(tmp_path: Path) -> None:
    put = render_main._Writer(tmp_path / "out")
    with pytest.raises(ValueError, match="outside"):
        put(tmp_path / "out" / ".." / "escaped", "x")
    assert render_main._safe("../../etc/passwd") == "_.._etc_passwd"
    assert "/" not in render_main._safe("a/b") and render_main._safe("..") == "_"


# --- the rules, one by one (Kubernetes' own semantics) -------------------------------------------

def _node(**kw: Any) -> node_model.Node:
    return node_model.Node(name=kw.pop("name", "n1"), group="g", labels=kw.pop("labels", {}),
                           taints=kw.pop("taints", []), **kw)


@pytest.mark.parametrize(
    "toleration,taint,ok",
    [
        ({"operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, True),
        ({"key": "a", "operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoExecute"}, True),
        ({"key": "a", "value": "b"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, True),  # operator Equal
        ({"key": "a", "value": "c"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, False),
        ({"key": "a", "operator": "Exists", "effect": "NoExecute"}, {"key": "a", "value": "", "effect": "NoSchedule"}, False),
        ({"key": "b", "operator": "Exists"}, {"key": "a", "value": "", "effect": "NoSchedule"}, False),
        ({"value": "x"}, {"key": "a", "value": "x", "effect": "NoSchedule"}, False),  # empty key needs Exists
    ],
)
def test_toleration_semantics(toleration: dict, taint: dict, ok: bool) -> None:
    assert scheduling.tolerates([toleration], taint) is ok


def test_prefer_no_schedule_does_not_block() -> None:
    node = _node(taints=[{"key": "a", "value": "", "effect": "PreferNoSchedule"}])
    assert scheduling.taint_reasons({}, node, daemon=False) == []


@pytest.mark.parametrize(
    "expr,ok",
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "missing", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "gpus", "operator": "Gt", "values": ["3"]}, True),
        ({"key": "gpus", "operator": "Lt", "values": ["3"]}, False),
    ],
)
def test_node_affinity_operators(expr: dict, ok: bool) -> None:
    node = _node(labels={"zone": "a", "gpus": "4"})
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}}
    assert (scheduling.selector_reasons(spec, node) == []) is ok


def test_requests_take_limits_and_init_containers() -> None:
    spec = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 2, "memory": "1Gi"}}},
                           {"resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}
    assert scheduling.pod_requests(spec) == {"nvidia.com/gpu": 2.0, "memory": 1024.0**3, "cpu": 2.0}


@pytest.mark.parametrize(
    "spec,level,rejected",
    [
        ({"containers": [{"name": "c", "securityContext": {"privileged": True}}]}, "baseline", True),
        ({"hostNetwork": True, "containers": [{"name": "c"}]}, "baseline", True),
        ({"volumes": [{"name": "v", "hostPath": {"path": "/etc"}}], "containers": [{"name": "c"}]}, "baseline", True),
        ({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}, "baseline", True),
        ({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}]}, "baseline", True),
        ({"containers": [{"name": "c"}]}, "baseline", False),
        ({"containers": [{"name": "c"}]}, "restricted", True),
        ({"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
          "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False,
                                                           "capabilities": {"drop": ["ALL"]}}}]}, "restricted", False),
        ({"containers": [{"name": "c", "securityContext": {"privileged": True}}]}, "privileged", False),
    ],
)
def test_pod_security_levels(spec: dict, level: str, rejected: bool) -> None:
    assert bool(pod_security.violations(spec, {}, level)) is rejected


def test_gke_allocatable_follows_gke_reservations() -> None:
    # GKE's reservation table applied to a 4 vCPU / 16 GiB node: 0.08 CPU and 2.6 GiB (+100 MiB eviction).
    cpu, memory = node_model.gke_allocatable(4, 16.0)
    assert round(cpu, 2) == 3.92
    assert round(memory / 1024**3, 1) == 13.3
