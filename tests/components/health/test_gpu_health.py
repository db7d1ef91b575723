"""The GPU health service's Kubernetes side (components/gpu_health.py) in rendered stacks: every
object valid for every supported minor (custom resources against their CRDs), its RBAC exactly the
least set, its pods restricted and placed, the stacks that turn it on coming up whole, and the
diagnostic in test_gpu_health_diagnostic.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from components import gpu_health, versions
from components.gpu_health import DIAG_NAME, NAME, NAMESPACE, SERVICE_RULES
from components.gpu_health_access import DEFAULT_DENY, WEBHOOK_TOKEN_SECRET
from config.scheduling_contract import CONTROL_PLANE_TOLERATION
from render import cluster, program
from render.__main__ import kubernetes_objects
from tests.components.health.rendered_health import CASES, IMAGE, find, health_objects, kinds, plan
from tests.monitoring_crd_schema import is_custom_resource, validate_custom_resource

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


def test_the_route_posts_where_the_service_listens_and_the_service_accepts_its_flags() -> None:
    """The Deployment's command and the Alertmanager webhook against the gpuhealth package itself."""

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
