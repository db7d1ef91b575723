"""What an update does to the teams' queues (gpu-cluster:queues): the `!!` lines of a team's
namespace deleted or replaced, and of Kueue uninstalled.

Deleting a Namespace deletes everything in it (Kubernetes' namespace lifecycle: the namespace
controller removes every object before the Namespace goes): the team's Jobs and PyTorchJobs,
running or queued, their pods, its Secrets and its `shared-data` claim. A team's Namespace is the
one that carries the admission policy's label (components/queues/team_admission.py); it goes when
the team leaves `queues.teams`, when its namespace is renamed (a replace) and with
`queues.enabled: false`. Kueue's chart (0.19.2, components/versions.py) ships its CRDs as
templates, so uninstalling the release deletes them, and every ClusterQueue, LocalQueue and
Workload with them; a Job Kueue holds suspended stays suspended, with nothing left to start it.

The safe way, per team: stop its LocalQueue (Kueue's LocalQueue spec.stopPolicy: Hold admits
nothing new and lets what runs finish; HoldAndDrain also evicts), wait until no workload is
admitted, copy out what is needed, then remove the team.
"""

from __future__ import annotations

from typing import Any

from components import versions
from components.queues.team_admission import LOCAL_QUEUE_NAMESPACE_LABEL
from config.chart_source import chart_name, pinned_chart_name

_NAMESPACE = "kubernetes:core/v1:Namespace"
_RELEASE = "kubernetes:helm.sh/v3:Release"


def _team_namespace(resource: Any) -> tuple[str, str] | None:
    """(team queue, namespace) of a team's Namespace, None for any other resource."""
    if resource is None or resource.type != _NAMESPACE:
        return None
    metadata = resource.inputs.get("metadata") or {}
    queue = (metadata.get("labels") or {}).get(LOCAL_QUEUE_NAMESPACE_LABEL)
    return (str(queue), str(metadata.get("name", resource.name))) if queue else None


def _key(new_config: Any) -> str:
    queues = getattr(new_config, "queues", None)
    enabled = getattr(queues, "enabled", True)
    return "gpu-cluster:queues.enabled false" if not enabled else "gpu-cluster:queues.teams"


def safe_way(queue: str, namespace: str) -> str:
    stop = '{"spec":{"stopPolicy":"Hold"}}'
    return (f"kubectl -n {namespace} patch localqueue {queue} --type merge -p '{stop}' (Kueue admits nothing "
            f"new; what runs finishes), wait until `kubectl -n {namespace} get workloads` shows none admitted, "
            "copy out what is needed, then remove the team")


def losses(steps: list[Any], new_config: Any) -> list[str]:
    """The `!!` lines of the update's steps (update.Step) that delete a team's namespace or Kueue."""
    lines = []
    for step in steps:
        action = str(step.action)
        if action not in ("delete", "replace"):
            continue
        team = _team_namespace(step.old)
        if team is not None:
            queue, namespace = team
            how = "deleted" if action == "delete" else "replaced (deleted, then made anew)"
            lines.append(f"team {queue}'s namespace {namespace} is {how} ({_key(new_config)}): every Job, "
                         "PyTorchJob and pod in it, running or queued, its Secrets and its shared-data claim (where "
                         f"it has one) go with it. The safe way: drain the team's queue first: {safe_way(queue, namespace)}")
        elif (action == "delete" and step.old.type == _RELEASE
              and pinned_chart_name(str(step.old.inputs.get("chart", "")), str(step.old.inputs.get("version", "")))
              == chart_name(versions.KUEUE_CHART)):
            lines.append(f"Kueue is uninstalled ({_key(new_config)}): its chart's CRDs go with the release, and "
                         "every ClusterQueue, LocalQueue and Workload with them; a Job waiting in a queue stays "
                         "suspended with nothing to start it. Drain every queue first (kubectl get workloads -A "
                         "shows none admitted or pending)")
    return lines
