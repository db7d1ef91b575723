"""The picture of the planned cluster: one box per node the whole-cluster check modelled (a lab
host, a gke node pool's shape, a dev node) listing what the check placed on it, as a graphviz
.dot source and the SVG `dot -Tsvg` draws from it.

The boxes come from the check's own data (Report.modelled, Report.placements), so the picture
shows what the check decided, not a second opinion. A gke pool is one box: its pods are counted
over all the nodes it may scale to. A lab behind kube-vip frames its control planes with the VIP.
Each row gives the count first, then the name: the SVG is drawn by a viewer in its own font, and
a name wider there than dot measured it must not run over the count
(tests/render/test_cluster_picture_layout.py holds that against the font's own widths).

`python -m render.cluster_picture lab docs/images/cluster-lab.svg` redraws the picture the docs
show (tests/render/test_summary_picture.py fails when it is stale).
"""

from __future__ import annotations

import html
import math
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from config.lab import LabStack
from render import cluster, program
from render.cluster.scheduling import Placement, expand, pod_requests

if TYPE_CHECKING:
    from render.cluster import Report
    from render.cluster.nodes import Node

ROW = 4  # boxes per row: a 128-worker lab stays a tall picture, not a 129-box-wide line
# Room after each name, per character of the longest: dot measures text with the fonts of the machine
# that draws, a viewer shows it in its own (DejaVu Sans runs about 10% wider than Helvetica's metrics).
SLACK_PER_CHARACTER = 0.6  # points at fontsize 10
DOT_SECONDS = 120  # dot on a few hundred boxes takes seconds; a hung dot must not hang render
# The install lines README's "The two commands" and docs/commands.md give too (tests/test_docs_graphviz.py).
GRAPHVIZ_INSTALL = ("apt-get install graphviz", "brew install graphviz")
GRAPHVIZ_HINT = (f"install graphviz (Debian, Ubuntu: {GRAPHVIZ_INSTALL[0]}; macOS: {GRAPHVIZ_INSTALL[1]}) "
                 "and render again")


class PictureError(Exception):
    """The SVG could not be drawn (graphviz missing or failing); render goes on without it."""


@dataclass
class Row:
    """One workload on one box: its pods there, and the GPUs each pod asks for."""

    ref: str
    pods: int
    gpus_each: float
    failed: bool  # its line in summary.md starts with ✗
    per_node: bool = False  # a DaemonSet on a gke pool's shape: one pod on each of its nodes


@dataclass
class Box:
    node: Node
    services: list[Row] = field(default_factory=list)  # DaemonSets and long-running pods
    jobs: list[Row] = field(default_factory=list)  # Jobs and CronJobs, run one after another
    job_gpus: dict[int, float] = field(default_factory=dict)  # job object -> GPUs its pods ask here


def _gpus(p: Placement) -> float:
    """GPUs (whole or MIG slices) one pod of the workload asks for."""
    return sum(v for k, v in pod_requests(p.workload.spec).items() if k.startswith("nvidia.com/"))


def boxes(report: Report) -> list[Box]:
    """One box per modelled node, with every placed workload of report.placements on it."""
    by_name = {n.name: n for n in report.modelled}
    shape_of = {clone.name: shape.name for shape in report.modelled for clone in expand([shape])}
    out = {n.name: Box(n) for n in report.modelled}
    for p, line in zip(report.placements, report.lines, strict=True):
        pods: dict[str, int] = defaultdict(int)
        for node in p.nodes:
            pods[shape_of.get(node, node)] += 1
        for shape, count in pods.items():
            if shape not in by_name:
                continue
            box = out[shape]
            per_node = p.workload.daemon and box.node.max_count != 1
            row = Row(p.workload.ref, 1 if per_node else count, _gpus(p), line.startswith("✗"), per_node)
            if p.workload.job or not p.workload.runs_on_install:
                box.jobs.append(row)
                key = id(p.workload.obj)  # a PyTorchJob's Master and Worker pods run together
                box.job_gpus[key] = box.job_gpus.get(key, 0.0) + row.gpus_each * count
            else:
                box.services.append(row)
    return list(out.values())


def unplaced(report: Report) -> list[str]:
    """Workloads the check could not place in full, each with what it placed."""
    out = []
    for p in report.placements:
        if p.ok:
            continue
        w = p.workload
        if w.daemon:
            missing = [n for n in p.eligible if n not in p.nodes]
            out.append(f"{w.ref}: not on {len(missing)} of {len(p.eligible)} nodes")
        else:
            out.append(f"{w.ref}: {p.placed} of {w.pods} pods")
    return out


def _count(v: float) -> str:
    return "any number of" if math.isinf(v) else f"{v:g}"


def _node_title(n: Node) -> list[str]:
    title = [f"{n.name} ({n.group})"]
    if n.max_count != 1 or n.min_count != 1:
        title.append(f"{n.min_count} to {n.max_count} nodes of this shape")
    size = []
    if n.gpus:
        size.append(f"{n.gpus if n.gpus_known else '≥1'} GPU")
    if n.cpu is not None:
        size.append(f"{n.cpu:.2f} CPU")
    if n.memory is not None:
        size.append(f"{n.memory / 1024**3:.1f}Gi")
    title.append(", ".join(size) or "size not declared")
    if n.taints:
        title.append("taints: " + ", ".join(f"{t['key']}:{t['effect']}" for t in n.taints))
    return title


def _row_html(row: Row, slack: int) -> str:
    """The count first, then the name: a name drawn wider than dot measured it runs into the slack
    column at the box's right edge, never over the count (a viewer's font is not dot's)."""
    what = f"{row.pods} pod{'s' if row.pods != 1 else ''}" + (" per node" if row.per_node else "")
    if row.gpus_each:
        what += f" × {_count(row.gpus_each)} GPU"
    colour = ' COLOR="#b00020"' if row.failed else ""
    mark = "✗ " if row.failed else ""
    return (f'<TR><TD ALIGN="RIGHT">{html.escape(what)}</TD>'
            f'<TD ALIGN="LEFT"><FONT{colour}>{html.escape(mark + row.ref)}</FONT></TD><TD WIDTH="{slack}"></TD></TR>')


def _box_html(box: Box) -> str:
    n = box.node
    head_colour = "#d7ecd9" if n.is_gpu else "#e3e6ea"
    title = "<BR/>".join(f"<B>{html.escape(t)}</B>" if i == 0 else html.escape(t)
                         for i, t in enumerate(_node_title(n)))
    slack = math.ceil(SLACK_PER_CHARACTER * max((len(r.ref) + 2 for r in box.services + box.jobs), default=0))
    rows = [f'<TR><TD COLSPAN="3" BGCOLOR="{head_colour}">{title}</TD></TR>']
    service_gpus = sum(r.gpus_each * r.pods for r in box.services)
    job_gpus = max(box.job_gpus.values(), default=0.0)
    if service_gpus or job_gpus:
        rows.append(f'<TR><TD COLSPAN="3">GPUs asked: {html.escape(_count(service_gpus))} by services, '
                    f'up to {html.escape(_count(job_gpus))} by one job</TD></TR>')
    elif n.is_gpu:
        rows.append('<TR><TD COLSPAN="3">no GPU asked</TD></TR>')
    if box.services:
        rows.append('<TR><TD COLSPAN="3" ALIGN="LEFT"><I>runs</I></TD></TR>')
        rows += [_row_html(r, slack) for r in box.services]
    if box.jobs:
        rows.append('<TR><TD COLSPAN="3" ALIGN="LEFT"><I>jobs, one after another</I></TD></TR>')
        rows += [_row_html(r, slack) for r in box.jobs]
    if not box.services and not box.jobs:
        rows.append('<TR><TD COLSPAN="3"><I>nothing placed</I></TD></TR>')
    return '<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="3">' + "".join(rows) + "</TABLE>>"


@dataclass(frozen=True)
class ControlPlaneGroup:
    """A lab's control planes behind kube-vip's virtual IP: drawn as one group with the VIP."""

    endpoint: str  # "<VIP>:6443", as every node and the kubeconfig reach the API
    members: tuple[str, ...]  # the control planes' host names, in the stack file's order


def control_plane_group(config: object) -> ControlPlaneGroup | None:
    """The group on a lab with kubeVip (one control plane too: the API is still reached at the VIP);
    None without a VIP, where the API is one control plane's own address (or a load balancer the
    stack does not draw) and a group would say nothing a box does not."""
    if not isinstance(config, LabStack) or config.kube_vip is None:
        return None
    return ControlPlaneGroup(config.kube_vip.endpoint, tuple(h.name for h in config.control_planes))


VIP_NODE = "kube-vip VIP"  # a space: no host name (a DNS label) can take this id


def _rank_lines(rows: list[list[str]], indent: str) -> list[str]:
    """Each row side by side, in order (a rank=same inside a cluster, or dot pulls its nodes out)."""
    return [f"{indent}{{rank=same; " + " -> ".join(_id(n) for n in row) + ";}" for row in rows]


def _group_lines(group: ControlPlaneGroup, rows: list[list[str]]) -> list[str]:
    """The cluster subgraph: the VIP above the rows of control planes, in one frame."""
    line = "kube-vip: held by one control plane at a time"
    side = f'<TD WIDTH="{math.ceil(SLACK_PER_CHARACTER * len(line) / 2)}"></TD>'  # centred: half each side
    vip = (f'<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="3" BGCOLOR="#e3e6ea"><TR>{side}'
           f'<TD><B>VIP {html.escape(group.endpoint)}</B><BR/>{line}</TD>{side}</TR></TABLE>>')
    return (["  subgraph cluster_control_plane {",
             f"    label={_id(f'control plane: VIP {group.endpoint}')}; fontsize=12; style=rounded; "
             'color="#5f6b7a";',
             f"    {_id(VIP_NODE)} [label={vip}];"]
            + _rank_lines(rows, "    ") + ["  }"]
            + [f"  {_id(VIP_NODE)} -> {_id(n)};" for n in rows[0]])


def _id(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot_source(report: Report, config: object) -> str:
    """The .dot of the picture of report, the check of a stack of config: deterministic for one
    report (the docs' copy is compared to it)."""
    verdict = "yes" if report.ok else f"no, {len(report.problems)} problems"
    lines = ["digraph planned_cluster {",
             f"  label={_id(f'stack {report.stack}: would it come up? {verdict}')};",
             "  labelloc=t; fontname=Helvetica; fontsize=16; nodesep=0.3; ranksep=0.4;",
             "  node [shape=plain, fontname=Helvetica, fontsize=10];",
             "  edge [style=invis];"]
    drawn = boxes(report)
    names = [b.node.name for b in drawn]
    for box in drawn:
        lines.append(f"  {_id(box.node.name)} [label={_box_html(box)}];")
    missing = unplaced(report)
    if missing:
        rows = "".join(f'<TR><TD ALIGN="LEFT">{html.escape(m)}</TD></TR>' for m in missing)
        lines.append('  "not placed" [label=<<TABLE BORDER="1" COLOR="#b00020" CELLBORDER="0" CELLSPACING="0" '
                     f'CELLPADDING="3"><TR><TD BGCOLOR="#f6d5da"><B>not placed</B></TD></TR>{rows}</TABLE>>];')
        names.append("not placed")
    group = control_plane_group(config)
    members = [n for n in names if group is not None and n in group.members]
    others = [n for n in names if n not in members]
    group_rows = [members[i:i + ROW] for i in range(0, len(members), ROW)]
    other_rows = [others[i:i + ROW] for i in range(0, len(others), ROW)]
    if group is not None and group_rows:  # members is empty without a group
        lines += _group_lines(group, group_rows)
    lines += _rank_lines(other_rows, "  ")
    rows_of = group_rows + other_rows  # each row under the one before
    for upper, lower in zip(rows_of, rows_of[1:], strict=False):
        lines += [f"  {_id(a)} -> {_id(b)};" for a, b in zip(upper, lower, strict=False)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def svg(source: str) -> str:
    """`dot -Tsvg` of a .dot source; PictureError when graphviz is missing or fails."""
    dot = shutil.which("dot")
    if dot is None:
        raise PictureError(f"graphviz's `dot` is not on PATH: {GRAPHVIZ_HINT}")
    try:
        done = subprocess.run([dot, "-Tsvg"], input=source, capture_output=True, text=True,
                              timeout=DOT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        raise PictureError(f"`dot -Tsvg` did not finish in {DOT_SECONDS} s") from None
    if done.returncode != 0:
        raise PictureError(f"`dot -Tsvg` failed ({done.returncode}): {done.stderr.strip()[:500]}")
    return done.stdout


def main(argv: list[str]) -> int:
    """python -m render.cluster_picture STACK OUT.svg: the check of STACK, drawn to OUT.svg."""
    if len(argv) != 2:
        print("usage: python -m render.cluster_picture STACK OUT.svg", file=sys.stderr)
        return 2
    plan = program.run(argv[0])
    report = cluster.check(plan, plan.config, cluster.upstream_dir())
    Path(argv[1]).write_text(svg(dot_source(report, plan.config)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
