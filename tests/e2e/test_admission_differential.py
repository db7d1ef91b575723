"""The check's admission model (render/cluster/admission.py, pod_security.py, pod_fields.py) held
to the real API server (issue 33, admission).

For each committed stack the check accepts, every object it collects (the program's own, every
Helm chart rendered, kustomize directories) is sent as a server-side dry run with strict field
validation, after the plan's CRDs (Established), Namespaces (with their Pod Security labels),
ServiceAccounts and PriorityClasses are made for real (e2e/dry_run.py). The pods of every workload
are dry-run too, as Pods: Pod Security admission judges Pods, not their controllers. Every refusal
fails the test, listed with the server's status and message. Then cases the check refuses: the
real server must refuse each too, naming the same field or reason. Last, the program's team
ValidatingAdmissionPolicy (its queue label, teams[].priority, no pod priorityClassName) on lab-ha's
team Namespaces: what the check's model refuses the server refuses with the same message, what it
admits the server admits.
"""

from __future__ import annotations

import copy
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.queues.team_admission import POLICY_NAME
from components.toolchain_versions import KUBERNETES_MINOR
from e2e import api, dry_run
from render import cluster, job_question, program
from render.cluster import kueue_objects, pod_fields, pod_security
from render.cluster import objects as cluster_objects
from render.cluster.admission import Admission
from render.cluster.objects import Obj
from render.cluster.workloads import Workload, workloads
from tests.conftest import stack_config_with
from tests.workloads.test_queues_docs_examples import _example

STACKS = ("lab", "lab-ha", "dev", "gke")  # every committed stack whose objects go to a Kubernetes API
SERVICE_ACCOUNT_TIMEOUT = 60
MADE_FOR_REAL = ("CustomResourceDefinition", "Namespace", "ServiceAccount", "PriorityClass")


def _pod_name(w: Workload) -> str:
    return re.sub(r"[^a-z0-9-]", "-", f"{w.kind}-{w.name}".lower())[:63].strip("-")


def _pod(w: Workload) -> dict[str, Any]:
    """A pod of the workload as its controller would create it (template metadata and spec)."""
    metadata = {k: v for k, v in (w.metadata or {}).items() if k in ("labels", "annotations")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**metadata, "name": _pod_name(w)},
            "spec": copy.deepcopy(w.spec)}


def _made_for_real(client: api.Client, objs: list[Obj], made: dry_run.Made) -> list[str]:
    """The CRDs, Namespaces, PriorityClasses and ServiceAccounts of the plan, created for real."""
    refused = dry_run.establish(client, [o.body for o in objs if o.kind == "CustomResourceDefinition"], made)
    for kind, url in (("Namespace", "/api/v1/namespaces"),
                      ("PriorityClass", "/apis/scheduling.k8s.io/v1/priorityclasses")):
        for o in [o for o in objs if o.kind == kind]:
            response = dry_run.create_or_replace(client, url, o.body, made)
            if not response.ok:
                refused.append(dry_run.refusal(o.ref, response))
    for o in [o for o in objs if o.kind == "Namespace"]:  # the ServiceAccount plugin refuses pods until it exists
        client.wait_for(f"ServiceAccount {o.name}/default", f"/api/v1/namespaces/{o.name}/serviceaccounts/default",
                        lambda body: True, SERVICE_ACCOUNT_TIMEOUT)
    for o in [o for o in objs if o.kind == "ServiceAccount"]:
        response = dry_run.create_or_replace(client, f"/api/v1/namespaces/{o.namespace or 'default'}/serviceaccounts",
                                             o.body, made)
        if not response.ok:
            refused.append(dry_run.refusal(o.ref, response))
    return refused


def _operator_service_account(client: api.Client, w: Workload, made: dry_run.Made) -> None:
    """The GPU Operator creates the ServiceAccounts of the pods it makes from its ClusterPolicy (the
    check does not look them up either, render/cluster/__init__.py): made here so that the
    ServiceAccount admission plugin judges the pod, not the operator's absence."""
    name = w.spec.get("serviceAccountName") or "default"
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    dry_run.create_or_replace(client, f"/api/v1/namespaces/{w.namespace}/serviceaccounts", body, made)


@pytest.fixture(scope="module")
def upstream() -> Any:
    return cluster.upstream_dir()


@pytest.mark.parametrize("stack", STACKS)
def test_the_api_server_admits_what_the_check_accepts(stack: str, client: api.Client, upstream: Any) -> None:
    plan = program.run(stack)
    report = cluster.check(plan, plan.config, upstream)
    assert report.ok, f"the check refuses the committed {stack} stack: {report.problems[:5]}"
    objs = cluster_objects.collect(plan, upstream, plan.config.kubernetes_version).objects
    made = dry_run.Made()
    try:
        refused = _made_for_real(client, objs, made)
        served = dry_run.discovered(client, {(o.api_version, o.kind) for o in objs})
        sent = 0
        for o in objs:
            if o.kind in MADE_FOR_REAL:
                continue
            collection = served.get((o.api_version, o.kind))
            if collection is None:
                refused.append(f"{o.ref} ({o.origin}): {o.api_version} {o.kind} is not served")
                continue
            response = dry_run.dry_run(client, collection, o.body, o.namespace)
            sent += 1
            if not response.ok:
                refused.append(dry_run.refusal(f"{o.ref} ({o.origin})", response))
        for w in workloads(objs):
            if w.via.startswith("ClusterPolicy"):
                _operator_service_account(client, w, made)
            response = dry_run.dry_run(client, served[("v1", "Pod")], _pod(w), w.namespace)
            sent += 1
            if not response.ok:
                refused.append(dry_run.refusal(f"a pod of {w.ref} ({w.via or w.obj.origin})", response))
    finally:
        left = made.remove(client)
    assert not refused, (f"{stack}: the check accepts, the API server refuses ({len(refused)} of {sent} "
                         "dry runs):\n  " + "\n  ".join(refused))
    assert not left, f"{stack}: still there {dry_run.DELETE_TIMEOUT} s after deletion: {left}"


# --- what the check refuses, the server refuses --------------------------------------------------

MINOR = KUBERNETES_MINOR  # the control plane's: the model judges as for a stack on it
CRD_GROUP = "differential.e2e.example.com"


def _model_schema(*objs: dict[str, Any]) -> list[str]:
    admission = Admission([Obj(b, "urn:test", "test", crd_dir=True) for b in objs], {}, MINOR)
    return [p.reason for p in admission.schema()]


def _message(response: api.Response) -> str:
    return str(response.body.get("message") if isinstance(response.body, dict) else response.body)


@pytest.fixture
def restricted(client: api.Client, namespace: str) -> str:
    client.must("PATCH", f"/api/v1/namespaces/{namespace}",
                {"metadata": {"labels": {pod_security.LEVEL_LABEL: "restricted"}}}, "application/merge-patch+json")
    return namespace


def test_a_pod_its_namespace_level_forbids_is_refused(client: api.Client, restricted: str) -> None:
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "privileged"},
           "spec": {"containers": [{"name": "main", "image": "registry.example.com/x:1",
                                    "securityContext": {"privileged": True}}]}}
    found = pod_security.violations(pod["spec"], pod["metadata"], "restricted")
    assert any("privileged" in v for v in found), found
    response = client.request("POST", f"/api/v1/namespaces/{restricted}/pods?{dry_run.DRY_RUN}", pod)
    assert response.status == 403, response.body
    assert 'violates PodSecurity "restricted' in _message(response) and "privileged" in _message(response)


def test_an_unknown_field_of_a_built_in_kind_is_refused(client: api.Client, namespace: str) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unknown", "namespace": namespace},
                  "data": {"a": "b"}, "spec": {"replicas": 1}}
    problems = _model_schema(config_map)
    assert any("'spec' was unexpected" in p for p in problems), problems
    response = client.request("POST", f"/api/v1/namespaces/{namespace}/configmaps?{dry_run.DRY_RUN}", config_map)
    # Strict field validation answers 400 BadRequest (a decoding error), not 422.
    assert response.status == 400, response.body
    assert 'unknown field "spec"' in _message(response)


@pytest.fixture(scope="module")
def crd(client: api.Client) -> Iterator[dict[str, Any]]:
    body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{CRD_GROUP}"},
            "spec": {"group": CRD_GROUP, "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "properties": {"spec": {"type": "object", "properties": {
                             "size": {"type": "integer", "minimum": 1},
                             "mode": {"type": "string", "enum": ["fast", "slow"]}}}}}}}]}}
    made = dry_run.Made()
    refused = dry_run.establish(client, [body], made)
    assert not refused, refused
    dry_run.discovered(client, {(f"{CRD_GROUP}/v1", "Widget")})
    yield body
    assert not made.remove(client)


@pytest.mark.parametrize(("spec", "field", "server_says"), [
    ({"size": 0}, "spec.size", "should be greater than or equal to 1"),
    ({"mode": "medium"}, "spec.mode", 'Unsupported value: "medium"'),
    ({"colour": "red"}, "spec", 'unknown field "spec.colour"'),
])
def test_a_custom_resource_its_crd_schema_forbids_is_refused(
        client: api.Client, namespace: str, crd: dict[str, Any], spec: dict[str, Any], field: str,
        server_says: str) -> None:
    widget = {"apiVersion": f"{CRD_GROUP}/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": namespace},
              "spec": spec}
    problems = _model_schema(crd, widget)
    assert any(f"not valid against CRD {crd['metadata']['name']}: {field}:" in p for p in problems), problems
    response = client.request("POST", f"/apis/{CRD_GROUP}/v1/namespaces/{namespace}/widgets?{dry_run.DRY_RUN}", widget)
    assert response.status in (400, 422), response.body  # 400: unknown field (strict decoding); 422: invalid
    assert server_says in _message(response) and field.rpartition(".")[2] in _message(response)


def test_a_node_field_selector_with_two_values_is_refused(client: api.Client, namespace: str) -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1", "gpu-2"]}]}
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"fields-{uuid.uuid4().hex[:6]}"},
           "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
               "nodeSelectorTerms": [term]}}},
               "containers": [{"name": "main", "image": "registry.example.com/x:1"}]}}
    problems = pod_fields.node_field_selector_problems(pod["spec"])
    assert any("matchFields[0].values: must be only one value" in p for p in problems), problems
    response = client.request("POST", f"/api/v1/namespaces/{namespace}/pods?{dry_run.DRY_RUN}", pod)
    assert response.status == 422, response.body
    assert "matchFields[0].values" in _message(response) and "must be only one value" in _message(response)


def test_a_pod_naming_a_missing_priority_class_is_refused(client: api.Client, namespace: str) -> None:
    spec = {"priorityClassName": f"missing-{uuid.uuid4().hex[:6]}",
            "containers": [{"name": "main", "image": "registry.example.com/x:1"}]}
    deployment = Obj({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "p", "namespace": namespace},
                      "spec": {"template": {"spec": spec}}}, "urn:test", "test")
    w = Workload("Deployment", namespace, "p", deployment, spec, {}, 1)
    problems = Admission([deployment], {}, MINOR).references(w)
    assert any(f"PriorityClass {spec['priorityClassName']} does not exist" in p for p in problems), problems
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "priority"}, "spec": spec}
    response = client.request("POST", f"/api/v1/namespaces/{namespace}/pods?{dry_run.DRY_RUN}", pod)
    assert response.status == 403, response.body
    assert f"no PriorityClass with name {spec['priorityClassName']} was found" in _message(response)


# --- the team ValidatingAdmissionPolicy: what the check refuses and admits, the server does too ---

VAP = "/apis/admissionregistration.k8s.io/v1"
ENFORCED_TIMEOUT = 30  # seconds for a new binding to take effect (the policy informer's sync)
TRAINING_OPERATOR_CRD = "pytorchjobs.kubeflow.org"


@pytest.fixture(scope="module")
def team_policy(client: api.Client, upstream_dir: Path) -> Iterator[list[Obj]]:
    """lab-ha's two teams (vision: priority training, language: batch) with the training operator, so
    the PyTorchJob kind is served: the plan's own policy, binding and team Namespaces (with their
    labels) created for real; the objects the check collected, for its model."""
    plan = program.run("lab-ha", config=stack_config_with("lab-ha", training={"launcher": "pytorchjob"},
                                                          acceptance={"nccl": False}))
    objs = cluster_objects.collect(plan, upstream_dir, plan.config.kubernetes_version).objects
    made = dry_run.Made()
    try:
        crds = [o.body for o in objs if o.kind == "CustomResourceDefinition" and o.name == TRAINING_OPERATOR_CRD]
        assert crds and not dry_run.establish(client, crds, made)
        for o in objs:
            if o.kind == "Namespace" and o.name.startswith("team-"):
                response = dry_run.create_or_replace(client, "/api/v1/namespaces", o.body, made)
                client.must("PATCH", f"/api/v1/namespaces/{o.name}", {"metadata": {"labels": o.body["metadata"]["labels"]}},
                            "application/merge-patch+json")  # one left by another test gets the plan's labels
                assert response.ok, response.body
        for kind, resource in (("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
                               ("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings")):
            (body,) = [o.body for o in objs if o.kind == kind]
            client.request("DELETE", f"{VAP}/{resource}/{body['metadata']['name']}")  # another test's, if any
            assert dry_run.create_or_replace(client, f"{VAP}/{resource}", body, made).ok
        # type-checked against both kinds (the CRD is Established first): no expression refers to a
        # field the kind lacks
        policy = client.wait_for("the policy type-checked", f"{VAP}/validatingadmissionpolicies/{POLICY_NAME}",
                                 lambda p: "typeChecking" in (p.get("status") or {}), ENFORCED_TIMEOUT)
        assert policy["status"]["typeChecking"].get("expressionWarnings") is None, policy["status"]
        dry_run.discovered(client, {("kubeflow.org/v1", "PyTorchJob")})
        probe = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe"}, "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}
        for _ in range(ENFORCED_TIMEOUT * 2):  # bounded: until the unlabelled probe is refused
            if client.request("POST", f"/apis/batch/v1/namespaces/team-vision/jobs?{dry_run.DRY_RUN}", probe).status == 403:
                break
            time.sleep(0.5)
        yield objs
    finally:
        left = made.remove(client)
        assert not left, left


def _team_job(kind: str, namespace: str, queue: str | None, priority_class: str | None = None,
              pod_priority: str | None = None) -> dict[str, Any]:
    job = copy.deepcopy(_example(kind))
    job["metadata"].update(name=f"{kind.lower()}-{uuid.uuid4().hex[:6]}", namespace=namespace, labels={
        **({"kueue.x-k8s.io/queue-name": queue} if queue else {}),
        **({"kueue.x-k8s.io/priority-class": priority_class} if priority_class else {})})
    if pod_priority:
        templates = ([job["spec"]["template"]] if kind == "Job"
                     else [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()])
        templates[-1]["spec"]["priorityClassName"] = pod_priority
    return job


REFUSED_CASES = {
    # the queue label
    "no queue label": ("Job", "team-vision", None, None, None),
    "another team's queue": ("Job", "team-vision", "language", None, None),
    "the program's queue": ("PyTorchJob", "team-language", "gpu-cluster", None, None),
    # teams[].priority (language is batch)
    "a class above the team's": ("Job", "team-language", "language", "gpu-cluster-training", None),
    "a class above the team's, PyTorchJob": ("PyTorchJob", "team-language", "language", "gpu-cluster-training", None),
    "a class no team has": ("Job", "team-vision", "vision", "urgent", None),
    "a pod priorityClassName": ("Job", "team-vision", "vision", "gpu-cluster-training", "system-node-critical"),
    "a pod priorityClassName, PyTorchJob": ("PyTorchJob", "team-language", "language", None, "gpu-cluster-idle-check"),
}
ADMITTED_CASES = {
    "the docs' Job": ("Job", "team-vision", "vision", "gpu-cluster-training", None),
    "the docs' PyTorchJob": ("PyTorchJob", "team-vision", "vision", None, None),
    "a lower class": ("Job", "team-vision", "vision", "gpu-cluster-batch", None),
    "the team's own class": ("PyTorchJob", "team-language", "language", "gpu-cluster-batch", None),
    "no class (priority 0)": ("Job", "team-language", "language", None, None),
}
POLICY_CASES = {**REFUSED_CASES, **ADMITTED_CASES}


@pytest.mark.parametrize("case", POLICY_CASES)
def test_the_team_policy_refuses_and_admits_what_the_check_does(client: api.Client, team_policy: list[Obj],
                                                                case: str) -> None:
    """The check (Admission.policies, on the plan's jobs) and ./plan --job (job_question.policy_refusals)
    against the real API server's dry run of the same job: refused by both with the same message, or
    admitted by both."""
    job = Obj(_team_job(*POLICY_CASES[case]), "urn:test", "test")
    check = [p.reason.removesuffix(" (test)") for p in Admission([*team_policy, job], {}, MINOR).policies()]
    assert check == job_question.policy_refusals(team_policy, kueue_objects.read(team_policy), job)
    assert bool(check) == (case in REFUSED_CASES), (case, check)
    group_version = "batch/v1" if job.kind == "Job" else "kubeflow.org/v1"
    resource = "jobs" if job.kind == "Job" else "pytorchjobs"
    response = client.request("POST", f"/apis/{group_version}/namespaces/{job.namespace}/{resource}?{dry_run.DRY_RUN}",
                              job.body)
    if check:
        assert response.status == 403, (case, response.body)
        (reason,) = check
        assert reason in _message(response), (case, reason, _message(response))
    else:
        assert response.ok, (case, response.status, _message(response))
