"""Would a ValidatingAdmissionPolicy of the plan deny creating a Job or PyTorchJob? As the API
server decides it (k8s.io/apiserver plugin/policy/validating): every binding with the validation
action Deny whose policy matches the kind (its resourceRules, operation CREATE) and whose
namespaceSelector matches the job's Namespace (its labels, with kubernetes.io/metadata.name) runs
the policy's validations in order, its variables first, each CEL expression by cel-python (no
Kubernetes extension library: the program's policy uses none); an expression that errors denies
(failurePolicy Fail, and an error is a denial whatever the policy says). The server answers with the
first validation that denies, its messageExpression where it evaluates, else its message:
"ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>".

Used by the whole-cluster check for the plan's own jobs (admission.Admission.policies) and by
./plan --job (render/job_question.py) for the jobs a team would submit.
"""

from __future__ import annotations

from typing import Any

from render.cluster.network_policy import selector_matches
from render.cluster.objects import Obj

# What a ValidatingAdmissionPolicy's resourceRules name for each kind judged here.
RESOURCES = {"Job": ("batch", "jobs"), "PyTorchJob": ("kubeflow.org", "pytorchjobs")}


def _listed(values: list[str] | None, value: str) -> bool:
    return bool(values) and ("*" in values or value in values)  # type: ignore[operator]


def _rule_matches(policy: dict[str, Any], job: Obj) -> bool:
    group, resource = RESOURCES[job.kind]
    version = job.api_version.split("/")[-1]
    for rule in ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []:
        if (_listed(rule.get("apiGroups"), group) and _listed(rule.get("apiVersions"), version)
                and _listed(rule.get("resources"), resource) and _listed(rule.get("operations"), "CREATE")):
            return True
    return False


def _cel(expression: str, activation: dict[str, Any]) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate(activation)


def _first_denial(policy: dict[str, Any], activation: dict[str, Any]) -> str | None:
    """The message of the first validation of `policy` that denies, or None if all admit."""
    import celpy

    spec = policy.get("spec") or {}
    try:
        variables: dict[str, Any] = {}
        for v in spec.get("variables") or []:
            activation["variables"] = celpy.celtypes.MapType(
                {celpy.celtypes.StringType(k): val for k, val in variables.items()})
            variables[str(v["name"])] = _cel(str(v["expression"]), activation)
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): val for k, val in variables.items()})
    except (celpy.CELEvalError, celpy.CELParseError):
        pass  # a variable that errors fails the validations that read it, below
    for validation in spec.get("validations") or []:
        try:
            allowed = bool(_cel(str(validation["expression"]), activation))
        except (celpy.CELEvalError, celpy.CELParseError):
            allowed = False
        if allowed:
            continue
        try:
            return str(_cel(str(validation["messageExpression"]), activation))
        except (KeyError, celpy.CELEvalError, celpy.CELParseError):
            return str(validation.get("message") or f"failed expression: {validation['expression']}")
    return None


def refusals(objects: list[Obj], namespace_labels: dict[str, str], job: Obj) -> list[str]:
    """Why the plan's policies bound to the job's Namespace (its labels as the API server holds them)
    deny creating it: one line per denying binding."""
    if job.kind not in RESOURCES:
        return []
    import celpy

    namespace = job.namespace or "default"
    ns_object = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": namespace_labels}}
    policies = {o.name: o.body for o in objects if o.kind == "ValidatingAdmissionPolicy"}
    out = []
    for binding in (o for o in objects if o.kind == "ValidatingAdmissionPolicyBinding"):
        spec = binding.body.get("spec") or {}
        policy = policies.get(str(spec.get("policyName")))
        if policy is None or "Deny" not in (spec.get("validationActions") or []):
            continue
        if not selector_matches((spec.get("matchResources") or {}).get("namespaceSelector"), namespace_labels):
            continue
        if not _rule_matches(policy, job):
            continue
        activation: dict[str, Any] = {"object": celpy.json_to_cel(job.body), "namespaceObject": celpy.json_to_cel(ns_object)}
        message = _first_denial(policy, activation)
        if message is not None:
            name = str((policy.get("metadata") or {}).get("name"))
            out.append(f"ValidatingAdmissionPolicy '{name}' with binding '{binding.name}' denied request: {message}")
    return out
