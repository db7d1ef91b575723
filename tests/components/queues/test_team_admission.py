"""A team's Jobs go through its own LocalQueue (components/queues/team_admission.py): the
ValidatingAdmissionPolicy and binding the committed HA example (two teams, W&B on) registers, with
their CEL evaluated for real by cel-python (the API server's CEL, less Kubernetes' extension
libraries, which the policy does not use), the binding's namespace selector matched as the API
server matches it, the objects validated strictly by the whole-cluster check, and their order."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest

from components import versions
from components.queues import objects, team_admission
from config.queues import PRIORITY_LABEL, PROGRAM_QUEUE, QUEUE_LABEL, QueuePriority
from render import program
from render.cluster import admission, kueue_check
from tests.components.queues.test_wandb_team_key import wandb_team_config
from tests.components.training.test_wandb_launch import as_the_agent_submits
from tests.workloads.test_queues_docs_examples import _example, _team

POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
TEAMS = {"vision": "team-vision", "language": "team-language"}


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    return program.run("lab-ha", config=wandb_team_config("lab-ha", ["vision", "language"]))


def _one(plan: program.Plan, type_: str) -> program.Registration:
    (found,) = plan.of_type(type_)
    return found


def _namespace(plan: program.Plan, name: str) -> dict[str, Any]:
    """The team's Namespace as the API server holds it (it adds kubernetes.io/metadata.name)."""
    (ns,) = [r for r in plan.of_type("kubernetes:core/v1:Namespace") if r.inputs["metadata"]["name"] == name]
    body = copy.deepcopy({"metadata": ns.inputs["metadata"]})
    body["metadata"].setdefault("labels", {})[objects.NAME_LABEL] = name
    return body


def _bound(binding: dict[str, Any], namespace: dict[str, Any]) -> bool:
    """The binding's namespaceSelector (matchExpressions only: what it uses), as the API server matches it."""
    labels = namespace["metadata"].get("labels", {})
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    assert set(selector) == {"matchExpressions"}
    for e in selector["matchExpressions"]:
        assert e["operator"] == "In"
        if labels.get(e["key"]) not in e["values"]:
            return False
    return True


def _admits(policy: dict[str, Any], job: dict[str, Any], namespace: dict[str, Any]) -> tuple[bool, str]:
    """Every validation of the policy, evaluated by cel-python; an error denies (failurePolicy Fail).
    Returns whether it admits and the message a refused member sees."""
    assert policy["spec"]["failurePolicy"] == "Fail"
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(job), "namespaceObject": celpy.json_to_cel(namespace)}
    for v in policy["spec"]["validations"]:
        try:
            ok = bool(env.program(env.compile(v["expression"])).evaluate(activation))
        except celpy.CELEvalError:
            ok = False
        if not ok:
            try:
                message = str(env.program(env.compile(v["messageExpression"])).evaluate(activation))
            except (KeyError, celpy.CELEvalError):  # none, or it errors: the static message
                message = v["message"]
            return False, message
    return True, ""


def _job(namespace: str, queue: str | None) -> dict[str, Any]:
    labels = {} if queue is None else {QUEUE_LABEL: queue}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": namespace, **({"labels": labels} if labels else {})},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                             "containers": [{"name": "c", "image": "busybox"}]}}}}


def test_a_team_job_is_admitted_only_on_its_own_local_queue(plan: program.Plan) -> None:
    policy = _one(plan, POLICY).inputs
    for team, ns_name in TEAMS.items():
        ns = _namespace(plan, ns_name)
        others = [t for t in TEAMS if t != team]
        assert _admits(policy, _job(ns_name, team), ns) == (True, "")
        for queue in (None, *others, PROGRAM_QUEUE):
            admitted, message = _admits(policy, _job(ns_name, queue), ns)
            assert not admitted, f"a Job on {queue!r} in {ns_name} would run outside the team's quota"
            assert f"{QUEUE_LABEL}: {team} " in message and ns_name in message
        # labels present but without the queue's
        other_label = _job(ns_name, None)
        other_label["metadata"]["labels"] = {"app": "x"}
        assert not _admits(policy, other_label, ns)[0]


def test_kueues_own_update_of_an_admitted_job_is_admitted(plan: program.Plan) -> None:
    """Kueue unsuspends an admitted Job and adds its flavor's nodeSelector and tolerations: the
    label stays, so the UPDATE passes. Removing the label afterwards does not."""
    policy = _one(plan, POLICY).inputs
    ns = _namespace(plan, "team-vision")
    admitted = _job("team-vision", "vision")
    admitted["spec"]["suspend"] = False
    admitted["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    admitted["spec"]["template"]["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert _admits(policy, admitted, ns)[0]
    assert {"CREATE", "UPDATE"} <= {op for r in policy["spec"]["matchConstraints"]["resourceRules"]
                                    for op in r["operations"]}
    relabelled = copy.deepcopy(admitted)
    relabelled["metadata"]["labels"][QUEUE_LABEL] = "language"
    assert not _admits(policy, relabelled, ns)[0]


def test_a_namespace_without_its_queue_label_refuses_every_job(plan: program.Plan) -> None:
    """Fails closed: the namespace label missing, the policy admits nothing (and shows its static message)."""
    policy = _one(plan, POLICY).inputs
    bare = {"metadata": {"name": "team-vision", "labels": {objects.NAME_LABEL: "team-vision"}}}
    admitted, message = _admits(policy, _job("team-vision", "vision"), bare)
    assert not admitted and message == team_admission.MESSAGE


def test_the_wandb_runs_and_the_documented_examples_of_a_team_are_admitted(plan: program.Plan) -> None:
    policy = _one(plan, POLICY).inputs
    for team, ns_name in TEAMS.items():
        run = as_the_agent_submits(plan.outputs["wandbTeamQueues"][team]["config"])
        assert _admits(policy, run, _namespace(plan, ns_name))[0]
    team = _team()
    ns = {"metadata": {"name": team.namespace, "labels": {objects.NAME_LABEL: team.namespace,
                                                          **team_admission.team_namespace_labels(team.name, team.priority)}}}
    for kind in ("Job", "PyTorchJob"):
        assert _admits(policy, _example(kind), ns)[0], kind


def test_the_binding_denies_in_the_team_namespaces_only(plan: program.Plan) -> None:
    binding = _one(plan, BINDING).inputs
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["policyName"] == _one(plan, POLICY).inputs["metadata"]["name"]
    namespaces = [r.inputs["metadata"]["name"] for r in plan.of_type("kubernetes:core/v1:Namespace")]
    bound = {n for n in namespaces if _bound(binding, _namespace(plan, n))}
    assert bound == set(TEAMS.values())


def test_the_policy_covers_every_kind_the_team_role_lets_a_member_create() -> None:
    """A kind added to the team's Role without the policy would be a way around Kueue again."""
    rules = team_admission.queue_policy()["spec"]["matchConstraints"]["resourceRules"]
    matched = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    creatable = {(g, r) for rule in objects.team_role("team-x")["rules"] if "create" in rule["verbs"]
                 for g in rule["apiGroups"] for r in rule["resources"]}
    assert creatable and creatable <= matched


def test_no_team_submits_before_the_policy_is_bound(plan: program.Plan) -> None:
    created_after = kueue_check.created_after(plan)[0]
    binding, policy = _one(plan, BINDING), _one(plan, POLICY)
    assert policy.urn in created_after(binding.urn)
    role_bindings = [r for r in plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
                     if r.inputs["metadata"]["namespace"] in TEAMS.values()]
    assert len(role_bindings) == len(TEAMS)
    for rb in role_bindings:
        assert binding.urn in created_after(rb.urn), rb.name
    # The W&B agent submits into the team namespaces: its release waits for the binding too.
    (agent,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("name") == "wandb-launch"]
    assert binding.urn in created_after(agent.urn)


def test_every_supported_kubernetes_minor_serves_the_policy() -> None:
    """GA in 1.30; config/addons.py allows only these minors on every platform."""
    for minor in versions.KUBERNETES_SUPPORTED_MINORS:
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            assert admission.builtin_served(team_admission.API, kind, minor), (kind, minor)


def test_the_whole_cluster_check_validates_the_policy_strictly(plan: program.Plan, upstream_dir) -> None:
    from render import cluster
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    broken = copy.deepcopy(plan)
    (policy,) = broken.of_type(POLICY)
    policy.inputs["spec"]["validations"][0]["severity"] = "high"  # no such field
    problems = cluster.check(broken, broken.config, upstream_dir).problems
    assert any("ValidatingAdmissionPolicy" in str(p) or team_admission.POLICY_NAME in str(p) for p in problems), problems


# --- teams[].priority: the priority class a team may name, and no pod priorityClassName ---

def _with_priority(job: dict[str, Any], priority_class: str) -> dict[str, Any]:
    out = copy.deepcopy(job)
    out["metadata"].setdefault("labels", {})[PRIORITY_LABEL] = priority_class
    return out


def test_a_team_names_only_its_own_priority_class_or_a_lower_one(plan: program.Plan) -> None:
    """lab-ha's vision is training, language batch (the default): vision may name both classes,
    language only batch; a class the plan lacks is refused too (it is no team's)."""
    policy = _one(plan, POLICY).inputs
    allowed = {"vision": {"gpu-cluster-training", "gpu-cluster-batch"}, "language": {"gpu-cluster-batch"}}
    for team, ns_name in TEAMS.items():
        ns = _namespace(plan, ns_name)
        assert _admits(policy, _job(ns_name, team), ns)[0]  # no class: priority 0, below both
        for priority_class in ("gpu-cluster-training", "gpu-cluster-batch", "urgent"):
            admitted, message = _admits(policy, _with_priority(_job(ns_name, team), priority_class), ns)
            assert admitted == (priority_class in allowed[team]), (team, priority_class)
            if not admitted:
                assert message.startswith(f"the priority class {priority_class} ({PRIORITY_LABEL}) is not one the team "
                                          f"of namespace {ns_name} may use: gpu-cluster-batch (its priority is batch)"
                                          if team == "language" else f"the priority class {priority_class}"), message
    # a namespace whose priority is unknown refuses every class (fails closed) with the static message
    bare = _namespace(plan, "team-language")
    del bare["metadata"]["labels"][team_admission.PRIORITY_NAMESPACE_LABEL]
    admitted, message = _admits(policy, _with_priority(_job("team-language", "language"), "gpu-cluster-batch"), bare)
    assert not admitted and message == team_admission.PRIORITY_MESSAGE


def test_allowed_classes_follow_the_classes_values() -> None:
    assert team_admission.allowed_classes(QueuePriority.TRAINING) == ["gpu-cluster-training", "gpu-cluster-batch"]
    assert team_admission.allowed_classes(QueuePriority.BATCH) == ["gpu-cluster-batch"]


@pytest.mark.parametrize("kind", ["Job", "PyTorchJob"])
def test_a_pod_priority_class_name_is_refused(plan: program.Plan, kind: str) -> None:
    """Without the label Kueue takes the job's priority from the pods' PriorityClass (system-node-critical
    outranks every team); with it the scheduler would still rank the pods by it."""
    policy = _one(plan, POLICY).inputs
    team = _team()
    ns = {"metadata": {"name": team.namespace, "labels": {objects.NAME_LABEL: team.namespace,
                                                          **team_admission.team_namespace_labels(team.name, team.priority)}}}
    job = copy.deepcopy(_example(kind))
    templates = ([job["spec"]["template"]] if kind == "Job"
                 else [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()])
    templates[-1]["spec"]["priorityClassName"] = "system-node-critical"
    assert _admits(policy, job, ns) == (False, team_admission.POD_PRIORITY_MESSAGE)


def test_the_whole_cluster_check_refuses_a_plan_job_the_team_policy_denies(plan: program.Plan, upstream_dir) -> None:
    """The check's admission model (render/cluster/admission.py, Admission.policies) runs the plan's
    policies on the plan's own jobs: one in team-language naming the training class is a problem,
    with the API server's words; the same job naming batch is not."""
    from render import cluster
    from render.cluster.objects import Obj

    checked = cluster.check(plan, plan.config, upstream_dir).checked
    job = _with_priority(_job("team-language", "language"), "gpu-cluster-training")
    model = admission.Admission([*checked, Obj(job, "urn:test", "test")], {}, plan.config.kubernetes_minor)
    (problem,) = list(model.policies())
    assert problem.subject == "Job team-language/train"
    assert problem.reason.startswith("ValidatingAdmissionPolicy 'gpu-cluster-team-queue' with binding "
                                     "'gpu-cluster-team-queue' denied request: the priority class gpu-cluster-training")
    allowed = Obj(_with_priority(job, "gpu-cluster-batch"), "urn:test", "test")
    assert not list(admission.Admission([*checked, allowed], {}, plan.config.kubernetes_minor).policies())
