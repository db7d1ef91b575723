"""components/queues: Kueue's objects against the CRDs of the pinned chart (rendered offline, as the
whole-cluster check renders it), the teams' objects against Kubernetes' schemas, the chart rendered
with the program's values (integrations, waitForPodsReady, webhooks limited to the managed
namespaces, metrics), and Kueue's count of a pod's requests."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from components import versions
from components.queues import kueue, objects
from components.queues.requests import job_requests, pod_requests
from config.queues import Flavor, QueuePriority, QueuesConfig, Team
from config.scheduling_contract import CONTROL_PLANE_KEY
from render.cluster.admission import builtin_validator, strict_schema
from render.cluster.objects import chart_dir, parse_documents, render_chart

FLAVORS = (Flavor("nvidia-l4", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, 4, "gke.gpuPools"),
           Flavor("nvidia-tesla-a100", {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}, 2, "gke.gpuPools"))
TEAM = Team(name="vision", namespace="team-vision", group="gpu-vision", gpus=3, cpu="16", memory="64Gi",
            borrowing_limit_gpus=1, priority=QueuePriority.TRAINING)
QUEUES = QueuesConfig(enabled=True, teams=(TEAM,))


def _render(upstream_dir: Path, metrics: bool = True) -> list[dict[str, Any]]:
    path = chart_dir(upstream_dir, versions.KUEUE_CHART, versions.KUEUE_CHART_VERSION)
    rendered, _ = render_chart(path, kueue.kueue_values(7, ["training", "team-vision"], metrics),
                               kueue.RELEASE_NAME, kueue.NAMESPACE, "1.34.2")
    return [d for text in rendered.values() for d in parse_documents(text)]


@pytest.fixture(scope="module")
def chart(upstream_dir: Path) -> list[dict[str, Any]]:
    return _render(upstream_dir)


def _crd_validator(chart: list[dict[str, Any]], body: dict[str, Any]) -> jsonschema.Draft7Validator:
    group, version = body["apiVersion"].split("/")
    for crd in (d for d in chart if d["kind"] == "CustomResourceDefinition"):
        spec = crd["spec"]
        if spec["group"] == group and spec["names"]["kind"] == body["kind"]:
            (served,) = [v for v in spec["versions"] if v["name"] == version and v["served"]]
            schema = json.loads(json.dumps(served["schema"]["openAPIV3Schema"]))
            schema["properties"]["metadata"] = {"type": "object"}
            return jsonschema.Draft7Validator(strict_schema(schema))
    raise AssertionError(f"the chart has no CRD serving {body['apiVersion']} {body['kind']}")


def _kueue_objects() -> list[dict[str, Any]]:
    need = {"nvidia.com/gpu": Decimal(2), "cpu": Decimal("8.5"), "memory": Decimal(32 * 2**30)}
    return [
        *(objects.resource_flavor(f) for f in FLAVORS),
        objects.team_cluster_queue(QUEUES, TEAM, "nvidia.com/gpu", FLAVORS),
        objects.program_cluster_queue(QUEUES, "training", "nvidia.com/gpu", FLAVORS, need),
        objects.local_queue("vision", "team-vision"),
        *objects.priority_classes(),
    ]


@pytest.mark.parametrize("index", range(len(_kueue_objects())))
def test_kueue_objects_are_valid_against_the_pinned_charts_crds(chart, index: int):
    body = _kueue_objects()[index]
    errors = [e.message for e in _crd_validator(chart, body).iter_errors(body)]
    assert not errors, (body["kind"], errors)


def test_the_crd_validation_catches_a_wrong_field(chart):
    body = objects.team_cluster_queue(QUEUES, TEAM, "nvidia.com/gpu", FLAVORS)
    body["spec"]["cohort"] = body["spec"].pop("cohortName")  # v1beta1's name, gone in v1beta2
    assert list(_crd_validator(chart, body).iter_errors(body))


def test_a_team_queue_caps_each_flavor_and_only_admits_its_namespace():
    spec = objects.team_cluster_queue(QUEUES, TEAM, "nvidia.com/gpu", FLAVORS)["spec"]
    assert spec["cohortName"] == "gpu-cluster"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-vision"}}
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    gpus = {f["name"]: f["resources"][0] for f in group["flavors"]}
    assert gpus["nvidia-l4"] == {"name": "nvidia.com/gpu", "nominalQuota": "3", "borrowingLimit": "1"}
    assert gpus["nvidia-tesla-a100"]["nominalQuota"] == "2"  # the flavor has two


def test_the_program_queue_takes_what_the_teams_leave_and_borrows_the_rest():
    need = {"nvidia.com/gpu": Decimal(2), "cpu": Decimal("8.5"), "memory": Decimal(32 * 2**30)}
    program = objects.program_cluster_queue(QUEUES, "training", "nvidia.com/gpu", FLAVORS, need)
    team = objects.team_cluster_queue(QUEUES, TEAM, "nvidia.com/gpu", FLAVORS)
    for i, flavor in enumerate(FLAVORS):
        ours = program["spec"]["resourceGroups"][0]["flavors"][i]["resources"]
        theirs = team["spec"]["resourceGroups"][0]["flavors"][i]["resources"]
        assert "borrowingLimit" not in ours[0]  # borrows the rest of its job from unused quota
        # the cohort holds exactly the GPUs the flavor has (l4: 3 + 1; a100: 2 + 0)
        assert int(ours[0]["nominalQuota"]) + int(theirs[0]["nominalQuota"]) == flavor.gpus
        assert ours[1:] == [{"name": "cpu", "nominalQuota": "8500m"}, {"name": "memory", "nominalQuota": "32Gi"}]
    unknown = (Flavor("gpu", {"nvidia.com/gpu.present": "true"}, None, "gpuNodeGpus"),)
    spec = objects.program_cluster_queue(QUEUES, "training", "nvidia.com/gpu", unknown, need)["spec"]
    assert spec["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "2"


def test_team_namespace_objects_are_valid_kubernetes_objects():
    bodies = [*objects.team_network_policies("team-vision"), objects.team_role("team-vision"),
              objects.team_role_binding("team-vision", "gpu-vision")]
    for body in bodies:
        validator = builtin_validator(body["apiVersion"], body["kind"], "1.34")
        errors = [e.message for e in validator.iter_errors(body)]
        assert not errors, (body["kind"], errors)
        assert body["metadata"]["namespace"] == "team-vision"


def test_the_team_role_lets_its_group_submit_jobs_and_read_workloads_only():
    rules = {(r["apiGroups"][0], res): set(r["verbs"]) for r in objects.team_role("team-vision")["rules"]
             for res in r["resources"]}
    submit = {"create", "get", "list", "watch", "delete"}
    assert rules[("batch", "jobs")] == submit and rules[("kubeflow.org", "pytorchjobs")] == submit
    assert rules[("kueue.x-k8s.io", "workloads")] == {"get", "list", "watch"}
    assert all(not verbs & {"create", "update", "patch", "delete"} for (group, _), verbs in rules.items()
               if group not in ("batch", "kubeflow.org"))
    binding = objects.team_role_binding("team-vision", "gpu-vision")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": objects.TEAM_ROLE}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gpu-vision"}]


def test_team_policies_deny_by_default_and_allow_dns_and_the_namespace_itself():
    by_name = {p["metadata"]["name"]: p["spec"] for p in objects.team_network_policies("team-vision")}
    assert by_name["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert by_name["allow-dns"]["egress"][0]["ports"]
    assert by_name["same-namespace"]["ingress"] == [{"from": [{"podSelector": {}}]}]


def _manager_config(chart: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = [d for d in chart if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("manager-config")]
    return yaml.safe_load(cm["data"]["controller_manager_config.yaml"])


def test_the_manager_runs_the_programs_integrations_and_all_or_nothing_admission(chart):
    cfg = _manager_config(chart)
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert cfg["integrations"]["frameworks"] == ["batch/job", "kubeflow.org/pytorchjob"]
    ready = cfg["waitForPodsReady"]
    assert ready["timeout"] == "7m" and ready["blockAdmission"] is False  # queues.blockAdmission (test_block_admission.py)
    assert ready["requeuingStrategy"]["backoffBaseSeconds"] > 0
    assert cfg["resources"]["excludeResourcePrefixes"] == ["rdma/"]
    assert not cfg.get("manageJobsWithoutQueueName")


def test_the_manager_exports_quota_metrics_the_dashboard_reads(chart, upstream_dir: Path):
    """Kueue exports kueue_cluster_queue_resource_usage / _nominal_quota (the "GPU quota used" panel)
    only with metrics.enableClusterQueueResources; the pinned chart's default config leaves it out."""
    assert _manager_config(chart)["metrics"] == {"bindAddress": ":8443", "enableClusterQueueResources": True}
    values = (chart_dir(upstream_dir, versions.KUEUE_CHART, versions.KUEUE_CHART_VERSION) / "values.yaml").read_text()
    default = yaml.safe_load(yaml.safe_load(values)["managerConfig"]["controllerManagerConfigYaml"])
    assert "enableClusterQueueResources" not in default["metrics"]
    # The chart names the field only in a comment (its example), the key Kueue's ControllerMetrics reads.
    assert "# enableClusterQueueResources: true" in values


def test_the_chart_renders_the_pinned_image_on_a_control_plane_toleration(chart):
    (deploy,) = [d for d in chart if d["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    (manager,) = [c for c in pod["containers"] if c["name"] == "manager"]
    assert manager["image"] == f"{versions.KUEUE_IMAGE_REPOSITORY}:{versions.KUEUE_IMAGE_TAG}"
    assert manager["imagePullPolicy"] == "IfNotPresent"
    assert any(t["key"] == CONTROL_PLANE_KEY for t in pod["tolerations"])


def test_job_webhooks_act_only_in_the_managed_namespaces(chart):
    (mutating,) = [d for d in chart if d["kind"] == "MutatingWebhookConfiguration"]
    (job_hook,) = [w for w in mutating["webhooks"] if w["name"] == "mjob.kb.io"]
    expr = job_hook["namespaceSelector"]["matchExpressions"][0]
    assert expr["operator"] == "In" and expr["values"] == ["team-vision", "training"]


def test_metrics_come_with_monitoring_only(chart, upstream_dir: Path):
    assert [d for d in chart if d["kind"] == "ServiceMonitor"]
    assert not [d for d in _render(upstream_dir, metrics=False) if d["kind"] == "ServiceMonitor"]


def test_pod_requests_count_sidecars_and_the_largest_init_container():
    spec = {
        "initContainers": [
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "setup", "resources": {"requests": {"cpu": "6", "memory": "1Gi"}}},
        ],
        "containers": [
            {"name": "main", "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                                           "limits": {"nvidia.com/gpu": 1, "rdma/roce": 1, "memory": "32Gi"}}},
        ],
    }
    got = pod_requests(spec)
    # the init container with the sidecar beside it (6.1 cores) outweighs the main one with it (4.1)
    assert got["cpu"] == Decimal("6.1") and got["memory"] == 16 * 2**30 and got["nvidia.com/gpu"] == 1
    assert job_requests(2, spec, ("rdma/",)) == {"cpu": Decimal("12.2"), "memory": 32 * 2**30, "nvidia.com/gpu": 2}
