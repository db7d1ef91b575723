"""The GPU health service's Kubernetes side (components/gpu_health.py) in rendered stacks: every
object valid for every supported minor (custom resources against their CRDs), its RBAC exactly the
least set, its pods restricted and placed, the stacks that turn it on coming up whole, and the
diagnostic's recorder writing the node annotations the service reads."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from components import gpu_health, gpu_health_diag, versions
from components.gpu_health import DIAG_NAME, NAME, NAMESPACE, SERVICE_RULES, TAINT_KEY
from components.gpu_health_access import DEFAULT_DENY, WEBHOOK_TOKEN_SECRET
from components.scheduling_contract import CONTROL_PLANE_TOLERATION, GPU_TOLERATION
from render import cluster, program
from render.__main__ import kubernetes_objects
from tests.conftest import PROJECT_DIR
from tests.monitoring_crd_schema import is_custom_resource, validate_custom_resource

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))
from gpuhealth import service as svc  # noqa: E402

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"


def _with(stack: str, **overrides: Any) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config(stack)
    return {**values, **{f"gpu-cluster:{k}": json.dumps(v) for k, v in overrides.items()}}, secret_keys


CASES: dict[str, tuple[str, Any]] = {
    "lab": ("lab", None),  # the committed stacks: on by default
    "dev": ("dev", None),
    "dev-dry-run": ("dev", lambda: _with("dev", gpuHealth={"dryRun": True, "maxNodesOut": 3, "maxPercentOut": 50})),
    "gke-on": ("gke", lambda: _with("gke", gpuHealth={"enabled": True})),
}


@functools.cache
def plan(case: str) -> program.Plan:
    stack, override = CASES[case]
    return program.run(stack, config=override() if override else program.stack_config(stack))


def health_objects(case: str) -> list[dict[str, Any]]:
    objs = [o for o in kubernetes_objects(plan(case))
            if o["metadata"].get("namespace") == NAMESPACE or o["metadata"]["name"] in (NAMESPACE, NAME, DIAG_NAME)]
    # A secret map is masked whole in the plan (its keys are checked in test_gpu_health_access.py).
    return [{**o, **{k: {} for k in ("data", "stringData") if o.get(k) == program.SECRET_MARKER}} for o in objs]


def find(case: str, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in health_objects(case) if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def kinds(case: str) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in health_objects(case)}


# --- what is rendered -----------------------------------------------------------------------------


def test_lab_renders_the_service_and_a_diagnostic_per_gpu_node() -> None:
    assert kinds("lab") == {
        ("Namespace", NAMESPACE), ("ServiceAccount", NAME), ("ClusterRole", NAME), ("ClusterRoleBinding", NAME),
        ("Deployment", NAME), ("Service", NAME), ("ServiceMonitor", NAME),
        ("Secret", WEBHOOK_TOKEN_SECRET), ("NetworkPolicy", DEFAULT_DENY), ("NetworkPolicy", "gpu-health-from-monitoring"),
        ("ServiceAccount", DIAG_NAME), ("ClusterRole", DIAG_NAME), ("ClusterRoleBinding", DIAG_NAME),
        ("ConfigMap", "gpu-diag-record"),
        ("CronJob", "gpu-diag-gpu-1"), ("CronJob", "gpu-diag-gpu-2"),
        ("CronJob", "gpu-diag-l2-gpu-1"), ("CronJob", "gpu-diag-l2-gpu-2"),
    }
    ns = find("lab", "Namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_gke_on_has_the_service_but_no_diagnostic() -> None:
    # gke's GPU nodes come and go with the autoscaler: none is known by name.
    assert not [k for k in kinds("gke-on") if k[0] == "CronJob" or k[1] == DIAG_NAME]
    assert ("Deployment", NAME) in kinds("gke-on")


def test_gke_default_has_none_of_it() -> None:
    gke = program.run("gke", config=program.stack_config("gke"))
    assert not [r for r in gke.resources if r.name.startswith("gpu-health")]
    assert "gpuHealth" not in gke.outputs


def _object_params() -> list[Any]:
    return [pytest.param(case, i, minor, id=f"{case}-{o['kind']}-{o['metadata']['name']}-{minor}")
            for case in CASES for i, o in enumerate(health_objects(case))
            for minor in versions.KUBERNETES_SUPPORTED_MINORS]


@pytest.mark.parametrize(("case", "index", "minor"), _object_params())
def test_every_object_is_valid_for_every_supported_minor(case: str, index: int, minor: str, upstream_dir: Path) -> None:
    obj = health_objects(case)[index]
    if is_custom_resource(obj):
        validate_custom_resource(obj, upstream_dir)
        return
    used = kubernetes_validate.validate(obj, minor, strict=True)
    assert used == minor


def test_the_strict_validation_has_teeth() -> None:
    deployment = json.loads(json.dumps(find("lab", "Deployment", NAME)))
    deployment["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.34", strict=True)


# --- RBAC: exactly the least set -----------------------------------------------------------------

# (apiGroup, resource, verb) the service's contract needs, and nothing else.
SERVICE_GRANTS = {
    ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"), ("", "nodes", "patch"),
    ("", "pods", "list"),
    ("", "pods/eviction", "create"),
    ("", "events", "create"),
}


def grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def role_problems(role: dict[str, Any]) -> list[str]:
    problems = []
    for rule in role["rules"]:
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            if "*" in (rule.get(key) or []):
                problems.append(f"wildcard in {key}: {rule}")
        if rule.get("nonResourceURLs"):
            problems.append(f"non-resource URLs: {rule}")
    for _group, resource, verb in grants(role):
        if resource.split("/")[0] in ("secrets", "configmaps", "serviceaccounts", "roles", "rolebindings",
                                      "clusterroles", "clusterrolebindings"):
            problems.append(f"{verb} {resource}")
        if resource == "pods" and verb in ("delete", "deletecollection", "create", "update", "patch"):
            problems.append(f"{verb} pods (only the Eviction API may remove a pod)")
        if verb in ("escalate", "bind", "impersonate"):
            problems.append(f"{verb} {resource}")
    return problems


@pytest.mark.parametrize("case", list(CASES))
def test_the_service_role_is_exactly_the_least_set(case: str) -> None:
    role = find(case, "ClusterRole", NAME)
    assert grants(role) == SERVICE_GRANTS
    assert role_problems(role) == []
    assert not any(rule.get("resourceNames") for rule in role["rules"])
    binding = find(case, "ClusterRoleBinding", NAME)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    # Nothing else in the plan grants the service's or the diagnostic's ServiceAccount anything.
    for o in kubernetes_objects(plan(case)):
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding") and o["metadata"]["name"] not in (NAME, DIAG_NAME):
            assert not [s for s in o.get("subjects") or [] if s.get("namespace") == NAMESPACE], o


@pytest.mark.parametrize("case", ["lab", "dev"])
def test_the_diagnostic_may_annotate_only_the_gpu_nodes(case: str) -> None:
    role = find(case, "ClusterRole", DIAG_NAME)
    (rule,) = role["rules"]
    assert rule["apiGroups"] == [""] and rule["resources"] == ["nodes"] and sorted(rule["verbs"]) == ["get", "patch"]
    assert rule["resourceNames"] == sorted(plan(case).config.gpu_nodes if case == "dev"
                                           else [h.name for h in plan(case).config.hosts if h.is_gpu])
    assert role_problems(role) == []
    binding = find(case, "ClusterRoleBinding", DIAG_NAME)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": DIAG_NAME, "namespace": NAMESPACE}]


def test_the_rbac_checks_have_teeth() -> None:
    role = json.loads(json.dumps(find("lab", "ClusterRole", NAME)))
    for extra in ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
                  {"apiGroups": ["*"], "resources": ["nodes"], "verbs": ["get"]}):
        broken = {**role, "rules": [*role["rules"], extra]}
        assert role_problems(broken), extra
    assert grants({**role, "rules": [*role["rules"], {"apiGroups": ["apps"], "resources": ["deployments"],
                                                       "verbs": ["get"]}]}) != SERVICE_GRANTS
    assert tuple(SERVICE_RULES) == tuple(role["rules"])


# --- the service's pod ----------------------------------------------------------------------------


def _pod(case: str) -> dict[str, Any]:
    return find(case, "Deployment", NAME)["spec"]["template"]["spec"]


TOKEN_AND_STALENESS = ["--stale-reconciles", "4", "--webhook-token-file", "/etc/gpu-health/webhook-token/token"]


@pytest.mark.parametrize(("case", "expected"), [
    # pair window: three rounds of timeoutMinutes (30) + 2
    ("lab", ["--max-nodes-out", "1", "--max-percent-out", "25", "--reconcile-seconds", "60",
             *TOKEN_AND_STALENESS, "--diag-namespace", "gpu-health", "--pair-namespace", "training", "--pair-window-minutes", "96"]),
    ("dev-dry-run", ["--dry-run", "--max-nodes-out", "3", "--max-percent-out", "50", "--reconcile-seconds", "60",
                     *TOKEN_AND_STALENESS, "--diag-namespace", "gpu-health", "--pair-namespace", "training", "--pair-window-minutes", "96"]),
])
def test_the_service_command(case: str, expected: list[str]) -> None:
    (container,) = _pod(case)["containers"]
    assert container["command"] == ["python", "-m", "gpuhealth", "--port", "8080", *expected]
    assert container["image"] == IMAGE
    assert find(case, "Deployment", NAME)["spec"]["replicas"] == 1


def test_the_service_pod_is_locked_down_and_an_addon() -> None:
    pod = _pod("lab")
    assert pod["serviceAccountName"] == NAME
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert pod["tolerations"] == [CONTROL_PLANE_TOLERATION]  # never a GPU node's taint: not on the nodes it acts on
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"


def test_the_service_and_its_monitor_select_the_pod() -> None:
    labels = find("lab", "Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    svc = find("lab", "Service", NAME)
    assert svc["spec"]["selector"].items() <= labels.items()
    assert gpu_health.WEBHOOK_URL == f"http://{NAME}.{NAMESPACE}.svc:{int(svc['spec']['ports'][0]['port'])}/webhook"
    monitor = find("lab", "ServiceMonitor", NAME)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]


# --- the diagnostic -------------------------------------------------------------------------------


def test_the_diagnostic_pod_takes_every_gpu_of_its_node() -> None:
    cfg = plan("lab").config
    for host in (h for h in cfg.hosts if h.is_gpu):
        cron = find("lab", "CronJob", f"gpu-diag-{host.name}")
        assert cron["spec"]["schedule"] == cfg.gpu_health.diagnostic.schedule and cron["spec"]["suspend"] is False
        pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (diag,) = pod["initContainers"]
        assert diag["image"] == versions.DCGM_IMAGE
        assert diag["resources"]["limits"]["nvidia.com/gpu"] == host.gpus
        assert "dcgmi diag -r 1 -j" in diag["command"][-1]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [host.name]}]}]
        assert GPU_TOLERATION in pod["tolerations"]
        # It runs on a node the service took out: cordoned, and tainted with any effect.
        assert {"key": TAINT_KEY, "operator": "Exists"} in pod["tolerations"]
        assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        # ... and the service's drain of that node leaves it be (gpuhealth.service.DIAG_POD_LABEL)
        key, value = svc.DIAG_POD_LABEL
        assert cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"][key] == value
        assert cron["metadata"]["namespace"] == NAMESPACE
        (record,) = pod["containers"]
        assert record["image"] == IMAGE and "--level" in record["command"]
        on_demand = find("lab", "CronJob", f"gpu-diag-l2-{host.name}")
        assert on_demand["spec"]["suspend"] is True
        l2 = on_demand["spec"]["jobTemplate"]["spec"]["template"]["spec"]["initContainers"][0]
        assert "dcgmi diag -r 2 -j" in l2["command"][-1]


def test_the_recorder_script_in_the_configmap_is_the_tested_one() -> None:
    cm = find("lab", "ConfigMap", "gpu-diag-record")
    assert cm["data"]["record.py"] == Path(gpu_health_diag.__file__).read_text()


def test_long_node_names_keep_cronjob_names_short_and_apart() -> None:
    a, b = "x" * 60 + ".example.com", "x" * 60 + ".example.org"
    names = {gpu_health._short("gpu-diag-l2", n) for n in (a, b)}
    assert len(names) == 2 and all(len(n) <= 52 for n in names)


# --- the whole cluster ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["lab", "dev", "gke-on"])
def test_the_stack_comes_up_with_it(case: str, upstream_dir: Path) -> None:
    p = plan(case)
    report = cluster.check(p, p.config, upstream_dir)
    assert report.ok, report.problems
    (line,) = [line for line in report.lines if f"Deployment {NAMESPACE}/{NAME} " in line]
    if case == "lab":  # an add-on: on the control plane, off the GPU nodes it may take out
        assert "1 pod → cp-1" in line, line
        assert [line for line in report.lines if f"CronJob {NAMESPACE}/gpu-diag-gpu-1 " in line and "→ gpu-1" in line]


def test_outputs_name_the_service_and_hold_no_secret() -> None:
    out = plan("lab").outputs["gpuHealth"]
    assert out["dryRun"] is False and out["circuitBreaker"] == {"maxNodesOut": 1, "maxPercentOut": 25}
    assert out["alertWebhook"] == gpu_health.WEBHOOK_URL
    assert out["diagnostic"]["nodes"] == ["gpu-1", "gpu-2"]
    assert program.SECRET_MARKER not in json.dumps(out)


# --- the recorder, against an API server stand-in on loopback -------------------------------------


class _Api(BaseHTTPRequestHandler):
    patches: list[tuple[str, str, str, dict[str, Any]]] = []

    def do_PATCH(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).patches.append((self.path, self.headers["Content-Type"], self.headers["Authorization"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[tuple[str, list[tuple[str, str, str, dict[str, Any]]]]]:
    _Api.patches = []
    server = HTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Api.patches
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _record(tmp_path: Path, api_url: str, rc: str | None, report: Any = None, level: int = 1) -> int:
    results = tmp_path / "results"
    results.mkdir()
    if rc is not None:
        (results / "rc").write_text(rc + "\n")
    if report is not None:
        (results / "diag.json").write_text(json.dumps(report))
    token = tmp_path / "token"
    token.write_text("test-token\n")
    return gpu_health_diag.main(["--results", str(results), "--level", str(level), "--valid-hours", "48",
                                 "--node", "gpu-1", "--api", api_url, "--token-file", str(token)])


FAILING = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
    {"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Fail", "info": "Row remap failure"}]}]}]}}
PASSING = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
    {"name": "Denylist", "results": [{"status": "Pass"}]}]}]}}


def test_a_passing_diagnostic_is_written_to_the_node(tmp_path: Path, api: tuple[str, list[Any]]) -> None:
    url, patches = api
    assert _record(tmp_path, url, "0", PASSING) == 0
    ((path, content_type, auth, body),) = patches
    assert (path, content_type, auth) == ("/api/v1/nodes/gpu-1", "application/merge-patch+json", "Bearer test-token")
    marks = body["metadata"]["annotations"]
    assert set(marks) == {"gpu-cluster.io/diag-level1", "gpu-cluster.io/diag-level1-time",
                          "gpu-cluster.io/diag-level1-expires"}
    assert marks["gpu-cluster.io/diag-level1"] == "pass"
    assert marks["gpu-cluster.io/diag-level1-expires"] > marks["gpu-cluster.io/diag-level1-time"]


def test_a_failing_test_is_a_fail_and_level_2_writes_both_levels(tmp_path: Path, api: tuple[str, list[Any]]) -> None:
    url, patches = api
    assert _record(tmp_path, url, "226", FAILING, level=2) == 0
    marks = patches[0][3]["metadata"]["annotations"]
    assert marks["gpu-cluster.io/diag-level1"] == marks["gpu-cluster.io/diag-level2"] == "fail"


@pytest.mark.parametrize(("rc", "report"), [(None, None), ("hostengine", None), ("1", None), ("1", PASSING)],
                         ids=["no-run", "no-hostengine", "no-report", "error-without-failing-test"])
def test_no_verdict_leaves_the_node_alone(tmp_path: Path, api: tuple[str, list[Any]], rc: str | None,
                                          report: Any) -> None:
    url, patches = api
    assert _record(tmp_path, url, rc, report) == 2
    assert patches == []


# --- both containers of the diagnostic pod, with stand-ins for NVIDIA's tools ----------------------


def _stand_ins(bin_dir: Path, hostengine_rc: int, dcgmi_rc: int, report: Any) -> None:
    bin_dir.mkdir()
    (bin_dir / "nv-hostengine").write_text(f"#!/bin/sh\necho \"$@\" >> {bin_dir}/hostengine.calls\nexit {hostengine_rc}\n")
    (bin_dir / "report.json").write_text(json.dumps(report))
    (bin_dir / "dcgmi").write_text(f"#!/bin/sh\necho \"$@\" > {bin_dir}/dcgmi.args\ncat {bin_dir}/report.json\n"
                                   f"exit {dcgmi_rc}\n")
    for tool in ("nv-hostengine", "dcgmi"):
        (bin_dir / tool).chmod(0o755)


@pytest.mark.parametrize(("hostengine_rc", "dcgmi_rc", "report", "written"), [
    (0, 0, PASSING, "pass"),
    (0, 226, FAILING, "fail"),
    (1, 0, PASSING, None),  # no hostengine: no verdict, the node is left alone
], ids=["pass", "fail", "no-hostengine"])
def test_the_diagnostic_pod_end_to_end(tmp_path: Path, api: tuple[str, list[Any]], hostengine_rc: int,
                                       dcgmi_rc: int, report: Any, written: str | None) -> None:
    url, patches = api
    bin_dir, results = tmp_path / "bin", tmp_path / "results"
    results.mkdir()
    _stand_ins(bin_dir, hostengine_rc, dcgmi_rc, report)
    command = gpu_health.diag_command(1, str(results))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr  # the DCGM container always succeeds: the recorder runs
    token = tmp_path / "token"
    token.write_text("t")
    rc = gpu_health_diag.main(["--results", str(results), "--level", "1", "--valid-hours", "48",
                               "--node", "gpu-1", "--api", url, "--token-file", str(token)])
    if written is None:
        assert (rc, patches) == (2, [])
        return
    assert rc == 0
    assert (bin_dir / "dcgmi.args").read_text().split() == ["diag", "-r", "1", "-j"]
    assert patches[0][3]["metadata"]["annotations"]["gpu-cluster.io/diag-level1"] == written
    calls = (bin_dir / "hostengine.calls").read_text().splitlines()
    assert calls[-1].startswith("--term")  # the pod's hostengine is stopped again


def test_no_diagnostic_under_mig_or_when_turned_off() -> None:
    # DCGM's diagnostic does not run on MIG-partitioned GPUs; the service itself still runs.
    for override in ({"gpu": {"stack": "device-plugin", "sharing": {"mode": "mig"}}},
                     {"gpuHealth": {"diagnostic": {"enabled": False}}}):
        p = program.run("dev", config=_with("dev", **override))
        names = {r.inputs.get("metadata", {}).get("name") for r in p.resources if r.type.startswith("kubernetes:")}
        assert NAME in names and not {n for n in names if n and n.startswith(DIAG_NAME)}, override
        assert p.outputs["gpuHealth"]["diagnostic"].startswith("none")


def test_the_route_posts_where_the_service_listens_and_the_service_accepts_its_flags() -> None:
    """The Deployment's command and the Alertmanager webhook against the gpuhealth package itself."""
    import sys

    workloads = str(Path(__file__).resolve().parents[3] / "workloads")
    if workloads not in sys.path:
        sys.path.insert(0, workloads)
    from gpuhealth import web  # the service the image runs

    # the path Alertmanager posts to is one the service's handler accepts
    assert gpu_health.WEBHOOK_PATH in web.WEBHOOK_PATHS and gpu_health.WEBHOOK_URL.endswith(gpu_health.WEBHOOK_PATH)
    plan = program.run("lab")
    (deploy,) = [o for o in kubernetes_objects(plan) if o["kind"] == "Deployment" and o["metadata"]["name"] == NAME]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    command = container["command"] + container.get("args", [])
    module = command.index("gpuhealth")
    from gpuhealth.__main__ import parse_args  # the service's own argument parser accepts the rendered flags

    parse_args(command[module + 1:])
