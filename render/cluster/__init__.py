"""Would it come up? The whole-cluster check of an offline plan.

`check(plan, cfg, upstream)` takes every object the cluster would receive (objects.py: the
program's own, every Helm release rendered with its pinned upstream chart, kustomize
directories expanded), asks what the API server would say of each (admission.py, pod_security.py)
and where each pod would run on the nodes the stack will have (nodes.py, workloads.py,
scheduling.py). The verdict is a Report (report.py): one line per workload, and the problems that
would keep `pulumi up` from finishing. `python -m render` writes it to summary.md (render/summary.py) and
exits 3 on a problem.

Upstream data comes from one folder: $GPU_CLUSTER_UPSTREAM, else ../shared/upstream beside the
project (its charts/ holds the pinned, unmodified charts).
"""

from __future__ import annotations

import os
from pathlib import Path

from config import DevStack, GkeStack, LabStack, StackConfig
from render import program
from render.cluster import gpudirect_check, kueue_admitted_pods, kueue_check, pod_fields
from render.cluster import nodes as node_model
from render.cluster.admission import Admission, plan_dependencies
from render.cluster.objects import CheckSetupError, collect
from render.cluster.report import Report
from render.cluster.scheduling import Placement, expand, schedule
from render.cluster.workloads import workloads

__all__ = ["CheckSetupError", "Report", "check", "upstream_dir"]


def upstream_dir(project_dir: Path = program.PROJECT_DIR) -> Path:
    path = Path(os.environ.get("GPU_CLUSTER_UPSTREAM") or project_dir.parent / "shared" / "upstream")
    if not (path / "charts").is_dir():
        raise CheckSetupError(
            f"the pinned upstream charts are not at {path}/charts: set GPU_CLUSTER_UPSTREAM to the "
            "upstream folder (../shared/upstream), or pass --no-check"
        )
    return path


def _names(names: list[str], most: int = 4) -> str:
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[:most])} and {len(names) - most} more"


def _why(p: Placement) -> str:
    """Node reasons grouped: 'gpu-1, gpu-2: untolerated taint ...'."""
    grouped: dict[str, list[str]] = {}
    for node, reasons in p.reasons.items():
        grouped.setdefault("; ".join(reasons), []).append(node)
    return " | ".join(f"{_names(nodes)}: {reason}" for reason, nodes in grouped.items())


def _node_line(n: node_model.Node) -> str:
    taints = ", ".join(f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}" for t in n.taints) or "none"
    size = []
    if n.gpus:
        size.append(f"{n.gpus if n.gpus_known else '>=1'} GPU")
    if n.cpu is not None:
        size.append(f"{n.cpu:.2f} CPU")
    if n.memory is not None:
        size.append(f"{n.memory / 1024**3:.1f}Gi")
    count = f" ×{n.max_count} max ({n.min_count} at `up`)" if n.max_count != 1 or n.min_count != 1 else ""
    return f"`{n.name}` ({n.group}){count}: {', '.join(size) or 'size not declared'}; taints: {taints}"


def check(plan: program.Plan, cfg: StackConfig, upstream: Path) -> Report:
    report = Report(plan.stack)
    collected = collect(plan, upstream, cfg.kubernetes_version)
    report.objects = len(collected.objects)
    report.checked, report.minor = collected.objects, cfg.kubernetes_minor
    gke = isinstance(cfg, GkeStack)
    admission = Admission(collected.objects, plan_dependencies(plan), cfg.kubernetes_minor,
                          platform_crds=gpudirect_check.gke_crds() if gke else [])
    for problem in [*admission.schema(), *admission.namespaces_exist(), *admission.policies()]:
        report.problems.append(f"{problem.subject}: {problem.reason}")

    plan_inputs: dict[str, list[dict]] = {}
    for r in plan.resources:
        plan_inputs.setdefault(r.type, []).append(r.inputs)
    modelled = node_model.model(cfg, plan_inputs, collected.node_patches)
    report.nodes = [_node_line(n) for n in modelled]
    report.modelled = modelled
    nodes = expand(modelled)
    gpu_nodes = {n.name for n in nodes if n.is_gpu}
    if isinstance(cfg, LabStack):
        report.notes.append("lab hosts declare no CPU or memory: only GPUs are counted against requests")
    if isinstance(cfg, DevStack):
        report.notes.append("dev nodes declare no size: each listed GPU node has the GPUs gpuNodeGpus gives it (at "
                            "least one where it gives none), CPU and memory unchecked; a cluster with no GPU node "
                            "listed is modelled as one untainted node")
    if isinstance(cfg, GkeStack):
        report.notes.append("gke: each pool scales between its minimum and maximum; pods may land on nodes the "
                            "autoscaler adds; GKE's own device plugin runs on GPU nodes without "
                            "gke-no-default-nvidia-gpu-device-plugin=true")

    loads = workloads(collected.objects)
    placements = schedule(cfg, nodes, loads, gke=isinstance(cfg, GkeStack))
    placements = kueue_admitted_pods.as_admitted(collected.objects, nodes, placements)  # queued jobs as Kueue starts them
    report.placements = placements
    report.scheduled = nodes
    for p in placements:
        w = p.workload
        origin = w.via or w.obj.origin
        if w.obj.hook:  # delete and upgrade hooks too: a hook that cannot run blocks destroy or update
            origin += f", hook {w.obj.hook}"
        subject = f"{w.ref} ({origin})"
        problems = admission.pod_security(w) + pod_fields.node_field_selector_problems(w.spec)
        if not w.via.startswith("ClusterPolicy"):  # the operator creates its own ServiceAccounts
            problems += admission.references(w)
        if w.daemon:
            missing = [n for n in p.eligible if n not in p.nodes]
            gpu_only = bool(p.eligible) and set(p.eligible) <= gpu_nodes
            if not p.eligible:
                line = f"{subject}: matches no node"
                if w.device_plugin and gpu_nodes:
                    problems.append("matches no node, and it is the device plugin of the GPU nodes")
            elif missing:
                line = f"{subject}: on {_names(p.nodes) or 'no node'}; not on {_names(missing)}: {_why(p)}"
                if gpu_only or not p.nodes or any(n in gpu_nodes for n in missing):
                    problems.append(f"misses {'GPU node' if any(n in gpu_nodes for n in missing) else 'node'}s "
                                    f"{_names(missing)}: {_why_only(p, missing)}")
            else:
                line = f"{subject}: on {len(p.nodes)} node{'s' if len(p.nodes) != 1 else ''} ({_names(p.nodes)})"
        else:
            if p.ok:
                line = f"{subject}: {p.placed} pod{'s' if p.placed != 1 else ''} → {_names(sorted(set(p.nodes)))}"
            else:
                line = f"{subject}: {p.placed} of {w.pods} pods can be placed; {_why(p)}"
                if w.runs_on_install:
                    problems.append(f"only {p.placed} of {w.pods} pods can be placed: {_why(p)}")
        if problems:
            line = f"✗ {line}"
            report.problems += [f"{subject}: {reason}" for reason in problems]
        report.lines.append(line)
    kueue_check.judge(report, collected.objects, nodes, placements, plan)  # would Kueue admit each queued job
    # multi-node jobs on GPU-NIC machines without their GPUDirect network (gke)
    report.problems += gpudirect_check.problems(cfg, plan_inputs, placements, {n.name: n.group for n in nodes})
    return report


def _why_only(p: Placement, names: list[str]) -> str:
    return _why(Placement(p.workload, reasons={n: p.reasons.get(n, []) for n in names}))
