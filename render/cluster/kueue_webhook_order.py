"""Is every queued job created after Kueue's webhooks answer? The whole-cluster check's order rule
for Kueue (kueue_check.py calls it; a problem is exit 3, naming the job).

Kueue's chart registers mutating and validating webhooks for each integration (batch/v1 jobs,
kubeflow.org pytorchjobs, ...; templates/webhook/manifests.yaml) with failurePolicy Fail, served
by its controller's Deployment. A queued Job created before that Deployment is ready is refused
by the API server (no endpoint behind the webhook Service), so `pulumi up` fails; were the
webhook to ignore failures, the Job would start unsuspended and pass its queue by. The plan must
therefore create each queued Job (a Job or PyTorchJob with kueue.x-k8s.io/queue-name) after the
resource that registers the webhooks covering its CREATE in its namespace, directly or through
what it depends on (its dependencies and parents, as Pulumi orders them), and that resource, a
Helm Release, must wait for its workloads to be ready (not skipAwait).

A CronJob is not held to it: its Jobs are created at their schedule, by the controller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from render.cluster.kueue_objects import KueueWorld, QueuedWorkload
from render.cluster.network_policy import selector_matches
from render.cluster.objects import Obj

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# The API group and resource the API server asks a webhook about when the kind is created.
RESOURCES = {("batch/v1", "Job"): ("batch", "jobs"), ("kubeflow.org/v1", "PyTorchJob"): ("kubeflow.org", "pytorchjobs")}


def _covers(rule: Mapping[str, Any], group: str, resource: str) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    return has("apiGroups", group) and has("resources", resource) and (
        has("operations", "CREATE") or "*" in (rule.get("operations") or []))


def webhooks_for(objects: list[Obj], wl: QueuedWorkload, namespace_labels: Mapping[str, str]) -> list[tuple[Obj, str]]:
    """(configuration, webhook name) of every webhook the API server calls when `wl` is created."""
    key = RESOURCES.get((wl.obj.api_version, wl.obj.kind))
    if key is None:
        return []
    out = []
    for o in objects:
        if o.kind not in WEBHOOK_KINDS or not o.api_version.startswith("admissionregistration.k8s.io/"):
            continue
        for hook in o.body.get("webhooks") or []:
            selector = hook.get("namespaceSelector")
            if selector is not None and not selector_matches(selector, namespace_labels):
                continue
            if any(_covers(rule, *key) for rule in hook.get("rules") or []):
                out.append((o, f"{hook.get('name', '')}, failurePolicy {hook.get('failurePolicy', 'Fail')}"))
    return out


def _resource(urn: str) -> str:
    """'Release queues-kueue' of a URN."""
    type_, name = urn.rsplit("::", 2)[-2:]
    return f"{type_.rsplit('$', 1)[-1].rsplit(':', 1)[-1]} {name}"


def problems(world: KueueWorld, objects: list[Obj], ancestors: Callable[[str], set[str]],
             skips_await: Callable[[str], bool]) -> list[str]:
    """One line per queued job created before (or without waiting for) the webhooks of Kueue it meets."""
    out = []
    for wl in world.workloads:
        hooks = webhooks_for(objects, wl, world.labels_of(wl.namespace))
        if not hooks:
            continue  # no Kueue in the plan: kueue_admission says the job is never queued
        before = ancestors(wl.obj.source)
        for source in dict.fromkeys(o.source for o, _ in hooks):
            names = ", ".join(sorted({f"{o.kind} {o.name} ({name})" for o, name in hooks if o.source == source}))
            what = f"{wl.ref} ({wl.obj.origin}) is queued (LocalQueue {wl.namespace}/{wl.queue})"
            if source not in before:
                out.append(f"{what} but is not created after {_resource(source)} is ready, which registers "
                           f"Kueue's webhooks for it ({names}): the API server would refuse it while Kueue's "
                           "controller is not serving; make it depend on the Kueue release")
            elif skips_await(source):
                out.append(f"{what} after {_resource(source)}, but that release does not wait for Kueue's "
                           f"controller to be ready (skipAwait), so its webhooks ({names}) may not answer yet")
    return out
