"""summary.md: the plan of a stack in short, the answer first.

Order, as a reader asks: would it come up (the whole-cluster check's verdict and every problem),
the warnings (e.g. NetworkPolicies that the stack's pod network does not enforce), what an update from an older config would do (with --against: refusals and `!!` lines), then what
was planned (the picture, the nodes, the workloads on each node, the jobs, the team quotas, the host steps, the
releases, the objects, the outputs), and last the count of resources by type.

The picture of the planned cluster (render/cluster_picture.py) lands beside it as cluster.dot and,
with graphviz installed, cluster.svg.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.control_planes import failures_survived
from config.lab import LabStack
from render import cluster_picture, program, quota_table

if TYPE_CHECKING:
    from render.cluster import Report

CHECKED = "Kubernetes' schemas, CRDs, Pod Security and the scheduler's filters"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def verdict(report: Report | None) -> list[str]:
    """'Would it come up': yes or no, and every problem."""
    out = ["## Would it come up", ""]
    if report is None:
        return out + ["**not checked**: rendered with --no-check; `python -m render <stack>` runs the check."]
    out.append(f"**{'yes' if report.ok else 'no'}**: {report.objects} objects checked against {CHECKED} on "
               f"{_plural(len(report.nodes), 'modelled node')}.")
    if report.problems:
        out += ["", "### What would not come up", ""] + [f"- {p}" for p in report.problems]
    return out


def control_plane_spares(config: object) -> list[str]:
    """On lab: how many control planes may fail while the API and etcd stay up (each runs an etcd
    member; config/control_planes.py). Other platforms' control planes are not the stack's to count."""
    if not isinstance(config, LabStack):
        return []
    n = len(config.control_planes)
    spare = failures_survived(n)
    if spare == 0:
        return [f"**Control planes**: {_plural(n, 'control plane')}, none to spare: if "
                f"{'it' if n == 1 else 'one'} fails, the API and etcd are down until it is back "
                "(docs/operations/high-availability.md)."]
    return [f"**Control planes**: {spare} of the {n} control planes can fail while the API and etcd stay up "
            f"(etcd keeps a quorum of {n // 2 + 1} of its {n} members); {spare + 1} down stop them."]


def failure(stack: str, verdict_line: str, message: str) -> str:
    """summary.md of a run that planned nothing (exit 2 or 1, render/out_dir.leave_failure): the answer
    first, then the message as render printed it."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", message)), default=0))
    return (f"# Plan of stack `{stack}`\n\n## Would it come up\n\n{verdict_line}\n\n{fence}\n{message.rstrip()}\n"
            f"{fence}\n")


def planned_cluster(report: Report | None, picture: str) -> list[str]:
    """The picture, the nodes, the workloads on each node, the jobs: what the check placed."""
    if report is None:
        return []
    out = ["", "## The planned cluster", "", picture]
    out += ["", "### Nodes", ""] + [f"- {n}" for n in report.nodes]
    out += ["", "### Workloads per node", ""] + _per_node(report)
    lines = list(zip(report.placements, report.lines, strict=True))
    running = [line for p, line in lines if not p.workload.job]
    jobs = [line for p, line in lines if p.workload.job]
    out += ["", "### Workloads", ""] + [f"- {line}" for line in running]
    if jobs:
        out += ["", "### Jobs", "", "Jobs and CronJobs, each on what the workloads above leave free:", ""]
        out += [f"- {line}" for line in jobs]
    if report.queued:  # render/cluster/kueue_check.py
        out += ["", "### Queued in Kueue", "", "Each queued job alone, as Kueue would admit it:", ""]
        out += [f"- {line}" for line in report.queued]
    if report.notes:
        out += ["", "### Assumed", ""] + [f"- {n}" for n in report.notes]
    return out


def _per_node(report: Report) -> list[str]:
    out = []
    for box in cluster_picture.boxes(report):
        placed = [f"{r.ref}{f' ×{r.pods}' if r.pods != 1 else ''}" for r in [*box.services, *box.jobs]]
        out.append(f"- `{box.node.name}`: " + (", ".join(placed) or "nothing placed"))
    return out


def markdown(plan: program.Plan, report: Report | None, update_section: str, picture: str,
             steps: dict[str, dict[str, Any]], objects: list[dict[str, Any]], releases: list[Any],
             warnings: Sequence[str] = (), update_refused: bool = False) -> str:
    out = [f"# Plan of stack `{plan.stack}`", "", *verdict(report)]
    if spares := control_plane_spares(plan.config):
        out += ["", *spares]
    if update_refused:  # the cluster would come up, but `pulumi up` stops before this update (exit 2)
        out += ["", "**The update is refused**: `pulumi up` would stop before registering anything; the REFUSED "
                "lines under \"Update from\" say why (exit 2)."]
    if warnings:  # what would come up but not as the program means it (render/__main__.py)
        out += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    if update_section:
        out += ["", update_section.rstrip("\n")]
    out += planned_cluster(report, picture)
    out += quota_table.section(objects)  # with queues on: who may use and borrow what
    if steps:
        out += ["", "## Host steps", ""]
        for host in sorted(steps):
            out.append(f"- **{host}**: " + ", ".join(sorted(steps[host])))
    if releases:
        out += ["", "## Helm releases", ""]
        out += [f"- `{r.inputs.get('name')}`: chart `{r.inputs.get('chart')}` {r.inputs.get('version')} "
                f"in `{r.inputs.get('namespace')}`" for r in releases]
    if objects:
        out += ["", "## Kubernetes objects", ""]
        out += [f"- {o.get('kind')} `{o['metadata'].get('namespace', '-')}/{o['metadata']['name']}`" for o in objects]
    out += ["", "## Outputs", ""] + [f"- `{k}`: {json.dumps(v)}" for k, v in sorted(plan.outputs.items())]
    counts = Counter(r.type for r in plan.resources)
    out += ["", "## Resources by type", "", f"{len(plan.resources)} resources.", ""]
    out += ["| type | count |", "|---|---|"] + [f"| `{t}` | {n} |" for t, n in sorted(counts.items())]
    return "\n".join(out) + "\n"


def write(plan: program.Plan, out: Path, put: Callable[[Path, str], None], report: Report | None,
          update_section: str, steps: dict[str, dict[str, Any]], objects: list[dict[str, Any]],
          releases: list[Any], warnings: Sequence[str] = (), update_refused: bool = False) -> None:
    """summary.md, and with the check's report the picture: cluster.dot, cluster.svg (graphviz)."""
    picture = ""
    if report is not None:
        source = cluster_picture.dot_source(report, plan.config)
        put(out / "cluster.dot", source)
        try:
            put(out / "cluster.svg", cluster_picture.svg(source))
            picture = ("![The planned cluster: each node and what the check placed on it](cluster.svg)\n\n"
                       "[cluster.svg](cluster.svg), drawn by graphviz from [cluster.dot](cluster.dot).")
        except cluster_picture.PictureError as err:
            picture = (f"The picture of the planned cluster was not drawn: it needs graphviz: {err}. Its source is "
                       "[cluster.dot](cluster.dot) (`dot -Tsvg cluster.dot > cluster.svg`).")
    put(out / "summary.md", markdown(plan, report, update_section, picture, steps, objects, releases, warnings,
                                     update_refused))
