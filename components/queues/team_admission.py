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

ValidatingAdmissionPolicy is admissionregistration.k8s.io/v1, GA (served by default) since
Kubernetes 1.30; every platform's kubernetesVersion is 1.31 or later (components/versions.py
KUBERNETES_SUPPORTED_MINORS, config/addons.py refuses others), and the whole-cluster check refuses a
kind the stack's minor does not serve.
"""

from __future__ import annotations

from typing import Any

from components.queues.objects import NAME_LABEL
from config.queues import QUEUE_LABEL

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


def team_namespace_labels(queue: str) -> dict[str, str]:
    """What a team's Namespace carries for the policy: the LocalQueue its Jobs must name."""
    return {LOCAL_QUEUE_NAMESPACE_LABEL: queue}


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
            "validations": [{"expression": QUEUE_EXPRESSION, "message": MESSAGE,
                             "messageExpression": MESSAGE_EXPRESSION, "reason": "Forbidden"}],
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
