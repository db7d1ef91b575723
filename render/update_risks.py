"""What an update from an older config does to the cluster as a whole, beyond its resources' steps.

`python -m render <stack> --against OLD` compares resource by resource (render/update.py). Some
changes are dangerous, or refused, as a whole, and a step-by-step table hides that:

  refused   what `pulumi up` itself refuses before registering anything (stacks/lab.py reads the
            previous `up`'s stack output `deployed` and calls LabStack.change_problems, config/lab.py):
            a downgrade, a skipped minor, and without allowRebuild a change of podCidr,
            serviceCidr, controlPlaneEndpoint, or no deployed control plane staying (the first may
            go, issue 34; a removal of control planes is etcd's to refuse,
            config/control_planes.py). The same rule
            runs here, on the older side's `deployed` output and the new config: `REFUSED` lines,
            exit 2.
  loud      a change of the pod network (CNI), of the GPU software stack (gpu.stack) or of the
            shared volume's backend: each swaps what running pods stand on, which no step's
            delete script says; a change of GKE's datapath (gke.dataplane), which replaces the
            cluster; a control plane added or removed: etcd's membership changes, one member at a
            time, and a removal shrinks how many failures the cluster survives. `!!` lines, exit 4.

Each is read from both sides' plans (the `deployed`, `gpuStack` and `sharedClaim` outputs, the
CNI's Helm releases), so an older plan.json works as well as an older stack file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from components import versions
from config import ConfigError
from config.chart_source import pinned_chart_name
from config.control_planes import members_of
from config.lab import DeployedLab
from render import program
from render.update_inputs import Resource

# The Cni component's Helm releases (components/cni.py): the CRDs release rides along with calico.
_CNI_RELEASE = "gpucluster:k8s:Cni$kubernetes:helm.sh/v3:Release::"


@dataclass
class Side:
    """One side of an update: its plan entries (update_inputs.Resource) and stack outputs."""

    resources: list[Any]
    outputs: dict[str, Any] = field(default_factory=dict)
    config: Any = None  # the validated config it was rendered from; None for an older plan.json


def plan_side(plan: program.Plan) -> Side:
    return Side(Resource.from_plan(plan), dict(plan.outputs), plan.config)


def older_side(path: Path, stack: str) -> Side:
    """The older side: a plan.json as written, or a stack file rendered with today's program.

    Raises config.ConfigError for a bad older stack file, ValueError for a plan of another stack.
    """
    text = path.read_bytes().decode("utf-8", errors="replace")  # a stack file's bad bytes: its reader names the line
    if path.suffix == ".json" or text.lstrip().startswith("{"):
        data = json.loads(text)
        if data.get("stack") != stack:
            raise ValueError(f"{path} is a plan of stack {data.get('stack')!r}, not {stack!r}")
        outputs = data.get("outputs")
        return Side([Resource.from_entry(e) for e in data.get("resources") or []],
                    outputs if isinstance(outputs, dict) else {})
    return plan_side(program.run(stack, config=program.stack_config(stack, stack_file=path)))


def refusals(older: Side, new_config: Any) -> list[str]:
    """What `pulumi up` of `new_config` would refuse, given what the older side deployed: one line
    per key, named as `pulumi config` names it. Empty when either side does not say (not lab, or
    an older plan without the `deployed` output)."""
    record = older.outputs.get("deployed")
    check = getattr(new_config, "change_problems", None)
    if not isinstance(record, dict) or check is None:
        return []
    try:
        deployed = DeployedLab.model_validate(record)
    except ValidationError:
        return []
    return [ConfigError.refusal(key, message) for key, message in check(deployed)]  # as `up` would say it


def cni(side: Side) -> str:
    """The pod network a side installs ("flannel", "calico"), "" when it installs none."""
    names = sorted(
        str(r.inputs.get("name", r.name)) for r in side.resources
        if _CNI_RELEASE in r.urn
        and pinned_chart_name(str(r.inputs.get("chart", "")), str(r.inputs.get("version", ""))) != versions.CALICO_CRDS_CHART
    )
    return ", ".join(names)


def gke_datapath(side: Side) -> str:
    """The GKE cluster's datapath provider, "" when the side creates no GKE cluster. Unset is
    GKE's default, LEGACY_DATAPATH (pulumi-gcp's Cluster.datapath_provider)."""
    clusters = [r for r in side.resources if r.type == "gcp:container/cluster:Cluster"]
    return str(clusters[0].inputs.get("datapathProvider") or "LEGACY_DATAPATH") if clusters else ""


def _storage(side: Side) -> str:
    claim = side.outputs.get("sharedClaim")
    return str(claim.get("backend") or "") if isinstance(claim, dict) else ""


def control_planes(side: Side) -> list[str]:
    """The control planes ("name address") a lab side deploys, from its `deployed` output; [] when
    it does not say (not lab, or recorded by a version that did not list them)."""
    record = side.outputs.get("deployed")
    return members_of(str(record.get("controlPlanes") or "")) if isinstance(record, dict) else []


def _survives(n: int) -> str:
    return f"{n} control plane{'s' if n > 1 else ''} (etcd survives {(n - 1) // 2} down)"


def membership_changes(older: Side, newer: Side) -> list[str]:
    """The `!!` lines of control planes added or removed (etcd members)."""
    before, after = control_planes(older), control_planes(newer)
    if not before or not after or before == after:
        return []
    added, removed = [m for m in after if m not in before], [m for m in before if m not in after]
    lines = []
    if removed:
        lines.append(f"control planes removed (gpu-cluster:hosts): {', '.join(removed)}: drained, their etcd members "
                     f"removed one at a time from the first control plane, then kubeadm reset; "
                     f"{_survives(len(before))} -> {_survives(len(after))}")
    if added:
        lines.append(f"control planes added (gpu-cluster:hosts): {', '.join(added)}: each joins etcd as a new member, "
                     f"one after another (kubeadm join --control-plane); "
                     f"{_survives(len(before))} -> {_survives(len(after))}")
    return lines


def whole_cluster_changes(older: Side, newer: Side) -> list[str]:
    """The `!!` lines of changes that swap what running pods stand on, or the control planes."""
    lines = membership_changes(older, newer)
    before, after = cni(older), cni(newer)
    if before and after and before != after:
        lines.append(f"CNI {before} -> {after} (gpu-cluster:cni): the pod network under every running pod is replaced; "
                     f"{before}'s release is deleted and pods keep addresses of a network that is gone until they are "
                     "recreated (this program does not migrate a running cluster's CNI: components/cni.py)")
    before, after = str(older.outputs.get("gpuStack") or ""), str(newer.outputs.get("gpuStack") or "")
    if before and after and before != after:
        lines.append(f"GPU stack {before} -> {after} (gpu-cluster:gpu.stack): the GPU software under every GPU pod "
                     "is replaced (device plugin, GPU Feature Discovery, DCGM exporter; with the operator its driver "
                     "and container toolkit): GPUs are not advertised until the new stack is ready, and GPU pods "
                     "restart")
    before, after = gke_datapath(older), gke_datapath(newer)
    if before and after and before != after:
        lines.append(f"GKE datapath {before} -> {after} (gpu-cluster:gke.dataplane): GKE fixes it at cluster creation, "
                     "so the cluster is replaced: every node pool and everything running on it goes, and the "
                     "replacement needs gke.deletionProtection false first")
    before, after = _storage(older), _storage(newer)
    if before and after and before != after:
        lines.append(f"shared storage {before} -> {after} (gpu-cluster:storage): the training claim is bound to "
                     "another volume; what was written to the old one (data, caches, checkpoints) is not copied")
    return lines
