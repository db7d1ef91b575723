"""Every Job a team submits goes through its own LocalQueue: a ValidatingAdmissionPolicy and its
binding, as pure manifests (components/queues/__init__.py registers them).

Why: Kueue's manager leaves `manageJobsWithoutQueueName` off (the cluster's own add-ons run Jobs
Kueue must not hold), so a Job without the label `kueue.x-k8s.io/queue-name` is none of Kueue's
business and runs at once, outside every quota; and a team naming another team's (or the
program's) LocalQueue would spend that quota. The team's Role lets its group create batch/v1 Jobs
and kubeflow.org/v1 PyTorchJobs in its namespace: in the team namespaces, the API server refuses
to CREATE or UPDATE one whose label is missing or is not the namespace's own LocalQueue.

* Which queue is the namespace's: the label `gpu-cluster.io/local-queue` on the team's Namespace
  (team_namespace_labels), read in CEL through `namespaceObject`. The team's group has no right
  on Namespaces, so its members cannot relabel theirs. A namespace without the label refuses every
  Job (fails closed).
* Which namespaces: the binding selects them by `kubernetes.io/metadata.name` (the API server sets
  it, nobody can forge it), so neither the training namespace nor the add-ons' are touched.
* UPDATE too: otherwise a Job created with the label could have it removed or changed afterwards.
  Kueue's own updates of an admitted Job (unsuspend, nodeSelector, tolerations) keep the label, so
  they pass; status updates (the jobs/status subresource) are not matched.
* failurePolicy Fail: a CEL error refuses (e.g. labels absent), never admits.
* The CEL uses no optional types (`?.`, `orValue`): tests/components/queues/test_team_admission.py
  evaluates it with cel-python, offline.

The team's priority (queues.teams[].priority), in the same policy: Kueue takes a job's priority
from its label `kueue.x-k8s.io/priority-class` (a WorkloadPriorityClass), and only without it from
the first pod template's `priorityClassName` (a Kubernetes PriorityClass; Kueue 0.19.2
jobframework.ExtractPriority), else 0. So:
* the label, where present, must name a class the team may use: its own (PRIORITY_CLASS) or a
  lower one (training may use training and batch, batch only batch). The team's priority is the
  label `gpu-cluster.io/priority` on its Namespace (which its group cannot change); the policy maps
  it to the classes allowed. A job without the label runs at priority 0, below every class: allowed.
* no pod template may set `priorityClassName`: without the label Kueue would take the job's priority
  from it (system-node-critical outranks every team), and with it the scheduler would still let the
  pods preempt others' on a node. The program's own pods that use one run outside team namespaces.

ValidatingAdmissionPolicy is admissionregistration.k8s.io/v1, GA (served by default) since
Kubernetes 1.30; every platform's kubernetesVersion is 1.31 or later (components/versions.py
KUBERNETES_SUPPORTED_MINORS, config/addons.py refuses others), and the whole-cluster check refuses a
kind the stack's minor does not serve.
"""

from __future__ import annotations

from typing import Any

from components.queues.objects import NAME_LABEL, PRIORITY_CLASS, PRIORITY_CLASSES
from config.queues import PRIORITY_LABEL, QUEUE_LABEL, QueuePriority

POLICY_NAME = "gpu-cluster-team-queue"

# On a team's Namespace: the LocalQueue its Jobs must name.
LOCAL_QUEUE_NAMESPACE_LABEL = "gpu-cluster.io/local-queue"
API = "admissionregistration.k8s.io/v1"

# Both sides present and equal; `has()` on a map-valued field then `in` keeps it free of optionals.
QUEUE_EXPRESSION = (
    f"has(object.metadata.labels) && '{QUEUE_LABEL}' in object.metadata.labels && "
    f"has(namespaceObject.metadata.labels) && '{LOCAL_QUEUE_NAMESPACE_LABEL}' in namespaceObject.metadata.labels && "
    f"object.metadata.labels['{QUEUE_LABEL}'] == namespaceObject.metadata.labels['{LOCAL_QUEUE_NAMESPACE_LABEL}']"
)
MESSAGE = (f"a Job or PyTorchJob in a team namespace must carry the label {QUEUE_LABEL} naming the team's own "
           f"LocalQueue (kubectl get localqueues), so that Kueue admits it within the team's quota")
# The same, naming the queue; where it cannot be evaluated (the namespace has no label) MESSAGE is shown.
MESSAGE_EXPRESSION = (
    f"'a Job or PyTorchJob in namespace ' + namespaceObject.metadata.name + ' must carry the label {QUEUE_LABEL}: ' "
    f"+ namespaceObject.metadata.labels['{LOCAL_QUEUE_NAMESPACE_LABEL}'] + ' (its LocalQueue), so that Kueue admits "
    "it within the team quota'"
)
MATCHED_RESOURCES = (("batch", "v1", "jobs"), ("kubeflow.org", "v1", "pytorchjobs"))

# On a team's Namespace: its queues.teams[].priority, which the policy maps to the classes it may use.
PRIORITY_NAMESPACE_LABEL = "gpu-cluster.io/priority"


def allowed_classes(priority: QueuePriority) -> list[str]:
    """The WorkloadPriorityClasses a team of `priority` may name: its own and every lower one."""
    own = PRIORITY_CLASSES[PRIORITY_CLASS[priority]]
    return [name for name, value in PRIORITY_CLASSES.items() if value <= own]


def _cel_map(values: dict[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': {v}" for k, v in values.items()) + "}"


_ALLOWED = _cel_map({p.value: "[" + ", ".join(f"'{c}'" for c in allowed_classes(p)) + "]" for p in QueuePriority})
_ALLOWED_TEXT = _cel_map({p.value: "'" + ", ".join(allowed_classes(p)) + "'" for p in QueuePriority})
_NAMED = f"object.metadata.labels['{PRIORITY_LABEL}']"
_TEAM_PRIORITY = f"namespaceObject.metadata.labels['{PRIORITY_NAMESPACE_LABEL}']"
# No label: priority 0, allowed. A label with the namespace's priority unknown errors: denied (fails closed).
PRIORITY_EXPRESSION = (f"!has(object.metadata.labels) || !('{PRIORITY_LABEL}' in object.metadata.labels) || "
                       f"{_NAMED} in {_ALLOWED}[{_TEAM_PRIORITY}]")
PRIORITY_MESSAGE = (f"a Job or PyTorchJob in a team namespace may name in {PRIORITY_LABEL} only a priority class its "
                    "team may use (queues.teams[].priority: " + "; ".join(
                        f"{p.value}: {', '.join(allowed_classes(p))}" for p in QueuePriority) + ")")
PRIORITY_MESSAGE_EXPRESSION = (
    f"'the priority class ' + {_NAMED} + ' ({PRIORITY_LABEL}) is not one the team of namespace ' + "
    f"namespaceObject.metadata.name + ' may use: ' + {_ALLOWED_TEXT}[{_TEAM_PRIORITY}] + ' (its priority is ' + "
    f"{_TEAM_PRIORITY} + ')'"
)


def _no_pod_priority(template: str) -> str:
    return f"!has({template}) || !has({template}.spec) || !has({template}.spec.priorityClassName)"


# dyn(): the API server type-checks every expression against each matched kind (a Job has no
# pytorchReplicaSpecs, a PyTorchJob no template); dyn leaves the field checks to the object's own fields.
_REPLICAS = "dyn(object).spec.pytorchReplicaSpecs"
POD_PRIORITY_EXPRESSION = (
    f"({_no_pod_priority('dyn(object).spec.template')}) && "
    f"(!has({_REPLICAS}) || {_REPLICAS}.all(r, {_no_pod_priority(f'{_REPLICAS}[r].template')}))"
)
POD_PRIORITY_MESSAGE = (f"a Job or PyTorchJob in a team namespace may not set priorityClassName on its pods: Kueue "
                        f"would take the job's priority from that PriorityClass; name a priority class the team "
                        f"may use in the label {PRIORITY_LABEL} instead")


def team_namespace_labels(queue: str, priority: QueuePriority) -> dict[str, str]:
    """What a team's Namespace carries for the policy: the LocalQueue its Jobs must name, its priority."""
    return {LOCAL_QUEUE_NAMESPACE_LABEL: queue, PRIORITY_NAMESPACE_LABEL: priority.value}


def queue_policy() -> dict[str, Any]:
    return {
        "apiVersion": API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [group], "apiVersions": [version], "resources": [resource],
                 "operations": ["CREATE", "UPDATE"]}
                for group, version, resource in MATCHED_RESOURCES
            ]},
            "validations": [
                {"expression": QUEUE_EXPRESSION, "message": MESSAGE, "messageExpression": MESSAGE_EXPRESSION,
                 "reason": "Forbidden"},
                {"expression": PRIORITY_EXPRESSION, "message": PRIORITY_MESSAGE,
                 "messageExpression": PRIORITY_MESSAGE_EXPRESSION, "reason": "Forbidden"},
                {"expression": POD_PRIORITY_EXPRESSION, "message": POD_PRIORITY_MESSAGE, "reason": "Forbidden"},
            ],
        },
    }


def queue_policy_binding(namespaces: list[str]) -> dict[str, Any]:
    """The policy in the team namespaces only, refusing (Deny) what it does not admit."""
    return {
        "apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchExpressions": [
                {"key": NAME_LABEL, "operator": "In", "values": sorted(namespaces)}]}},
        },
    }
