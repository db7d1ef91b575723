"""summary.md leads with the answer: the whole-cluster check's verdict and every problem first,
then what was planned, the count of resources by type last; nothing it said before is lost.

The failing plan is the committed lab with kube-prometheus-stack's tolerations removed (as in
tests/render/test_cluster_check.py): nothing on lab takes Grafana, so `python -m render` exits 3.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from render import __main__ as render_main
from render import cluster, program
from render.cluster import Report


@dataclass
class Failing:
    rc: int
    err: str
    summary: str
    report: Report
    out: Path


def _strip(value: Any, key: str) -> Any:
    """`value` without any `key` entry, at any depth."""
    if isinstance(value, dict):
        return {k: _strip(v, key) for k, v in value.items() if k != key}
    if isinstance(value, list):
        return [_strip(v, key) for v in value]
    return value


@pytest.fixture(scope="module")
def failing(upstream_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Failing:
    """`python -m render lab` of a plan that would not come up, and the report its check made."""
    real_run, real_check = program.run, cluster.check
    reports: list[Report] = []

    def broken(stack: str, *args: Any, **kwargs: Any) -> program.Plan:
        plan = real_run(stack, *args, **kwargs)
        (release,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release")
                      if r.inputs.get("chart") == "kube-prometheus-stack"]
        release.inputs = {**release.inputs, "values": _strip(release.inputs["values"], "tolerations")}
        return plan

    def keep(*args: Any, **kwargs: Any) -> Report:
        reports.append(real_check(*args, **kwargs))
        return reports[-1]

    out = tmp_path_factory.mktemp("failing") / "lab"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPU_CLUSTER_UPSTREAM", str(upstream_dir))
        mp.setattr(program, "run", broken)
        mp.setattr(cluster, "check", keep)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = render_main.main(["lab", "--out", str(out)])
    assert len(reports) == 1
    return Failing(rc, err.getvalue(), (out / "summary.md").read_text(), reports[0], out)


def _sections(summary: str) -> list[tuple[str, str]]:
    """(heading, body) of each `## ` section, in order."""
    parts = re.split(r"^## (.+)$", summary, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_first_section_is_the_verdict_with_every_problem(failing: Failing) -> None:
    assert failing.rc == 3, failing.err
    assert failing.report.problems, "the broken plan must fail the check"
    heading, body = _sections(failing.summary)[0]
    assert heading == "Would it come up"
    assert body.lstrip().startswith("**no**"), body[:200]
    listed = [line[2:] for line in body.splitlines() if line.startswith("- ")]
    assert listed == failing.report.problems
    # ... the same problems render printed on stderr, one per line.
    assert [line[2:] for line in failing.err.splitlines() if line.startswith("  ")] == failing.report.problems
    # Nothing comes before the verdict but the title.
    assert failing.summary.split("\n## ", 1)[0].strip() == "# Plan of stack `lab`"


def test_planned_then_counts_last(failing: Failing) -> None:
    headings = [h for h, _ in _sections(failing.summary)]
    # lab has one control plane and no etcdBackup.s3: its Warnings say every etcd copy is on that host
    order = ["Would it come up", "Warnings", "The planned cluster", "Host steps", "Helm releases", "Kubernetes objects",
             "Outputs", "Resources by type"]
    assert headings == order
    counts = dict(_sections(failing.summary))["Resources by type"]
    resources = json.loads((failing.out / "plan.json").read_text())["resources"]
    assert sorted(re.findall(r"^\| `([^`]+)` \| \d+ \|$", counts, flags=re.M)) == sorted({e["type"] for e in resources})
    assert f"{len(resources)} resources." in counts


def test_planned_cluster_lists_every_node_and_workload_line(failing: Failing) -> None:
    """What the check said of each node and workload, each line kept, jobs apart, per node too."""
    planned = dict(_sections(failing.summary))["The planned cluster"]
    report = failing.report
    for line in [*report.nodes, *report.lines, *report.notes]:
        assert f"- {line}\n" in planned, line
    jobs = planned.split("### Jobs", 1)[1]
    for p, line in zip(report.placements, report.lines, strict=True):
        assert (f"- {line}\n" in jobs) == p.workload.job, line
    per_node = planned.split("### Workloads per node", 1)[1].split("\n### ", 1)[0]
    for node in report.modelled:
        (entry,) = [e for e in per_node.splitlines() if e.startswith(f"- `{node.name}`: ")]
        for p in report.placements:
            if node.name in p.nodes:
                assert p.workload.ref in entry, (node.name, p.workload.ref)


def test_summary_links_the_picture(failing: Failing) -> None:
    if shutil.which("dot") is None:
        pytest.skip("graphviz's dot is not installed: the picture is not drawn")
    assert (failing.out / "cluster.svg").is_file() and (failing.out / "cluster.dot").is_file()
    planned = dict(_sections(failing.summary))["The planned cluster"]
    assert "](cluster.svg)" in planned and "](cluster.dot)" in planned
    marker = (failing.out / ".gpu-cluster-render").read_text()
    assert "cluster.svg" in marker and "cluster.dot" in marker  # the next render may clear them


def test_no_check_says_so(tmp_path: Path) -> None:
    """--no-check: the first section says the plan was not checked; no picture is drawn."""
    plan = program.run("lab")
    render_main.write(plan, tmp_path / "out")
    summary = (tmp_path / "out" / "summary.md").read_text()
    heading, body = _sections(summary)[0]
    assert heading == "Would it come up" and "**not checked**" in body and "--no-check" in body
    assert not (tmp_path / "out" / "cluster.dot").exists()


def test_picture_of_a_plan_that_would_not_come_up(failing: Failing) -> None:
    """The failing render's cluster.svg: every box as the check placed it, and a 'not placed' box
    naming each workload the check could not place (Grafana among them)."""
    from tests.render.test_summary_picture import assert_picture_matches, boxes_of, need_dot

    need_dot()
    svg = (failing.out / "cluster.svg").read_text()
    assert_picture_matches(svg, failing.report)
    assert any(t.startswith("Deployment monitoring/monitoring-grafana: 0 of 1 pods")
               for t in boxes_of(svg)["not placed"])
