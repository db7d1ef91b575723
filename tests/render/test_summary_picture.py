"""The picture of the planned cluster (render/cluster_picture.py): one box per node the check
modelled, naming every workload the check placed on it and nothing else; drawn by graphviz's
`dot` (CI installs it: under CI=true a skip fails); render goes on without graphviz and says so;
the copy the docs show (docs/images/cluster-lab.svg) is what the code draws for the lab today.

Boxes are compared with the check's own placement data (Report.placements, Report.modelled),
never with a pinned string.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from render import __main__ as render_main
from render import cluster, cluster_picture, program
from render.cluster import Report
from render.cluster.scheduling import expand

SVG = "{http://www.w3.org/2000/svg}"
DOCS_PICTURE = Path(__file__).resolve().parents[2] / "docs" / "images" / "cluster-lab.svg"
# A workload row: "Kind namespace/name", with ✗ when the check found a problem with it.
WORKLOAD_ROW = re.compile(r"^(?:✗ )?([A-Z][A-Za-z]+ [^ /]+/\S+)$")


def boxes_of(svg: str) -> dict[str, list[str]]:
    """Each graphviz node of the SVG (its <title>) -> the lines of text drawn in it."""
    root = ET.fromstring(svg)  # valid XML, or this raises
    assert root.tag == f"{SVG}svg"
    out = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "node":
            title = g.find(f"{SVG}title")
            assert title is not None and title.text
            out[title.text] = [t.text or "" for t in g.iter(f"{SVG}text")]
    return out


def texts_of(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def assert_picture_matches(svg: str, report: Report) -> None:
    """A box per modelled node, titled with its name, listing exactly the workloads placed on it."""
    boxes = boxes_of(svg)
    shape_of = {clone.name: shape.name for shape in report.modelled for clone in expand([shape])}
    placed: dict[str, set[str]] = {n.name: set() for n in report.modelled}
    for p in report.placements:
        for node in p.nodes:
            placed[shape_of[node]].add(p.workload.ref)
    assert set(placed) <= set(boxes), f"nodes without a box: {set(placed) - set(boxes)}"
    for name, refs in placed.items():
        assert boxes[name][0].startswith(f"{name} ("), boxes[name][:1]
        shown = {m.group(1) for t in boxes[name] if (m := WORKLOAD_ROW.match(t))}
        assert shown == refs, f"{name}: shown but not placed {shown - refs}; placed but not shown {refs - shown}"
    unplaced = {p.workload.ref for p in report.placements if not p.ok}
    if unplaced:
        lines = boxes["not placed"]
        assert {ref for ref in unplaced if any(t.startswith(f"{ref}: ") for t in lines)} == unplaced
    else:
        assert "not placed" not in boxes


def need_dot() -> None:
    if shutil.which("dot") is None:
        pytest.skip("graphviz's dot is not installed (apt-get install graphviz)")


@pytest.fixture(scope="module")
def lab(upstream_dir: Path) -> tuple[program.Plan, Report]:
    plan = program.run("lab")
    return plan, cluster.check(plan, plan.config, upstream_dir)


@pytest.mark.parametrize("stack", ["lab", "gke"])
def test_picture_names_every_node_and_placed_workload(stack: str, lab: tuple[program.Plan, Report],
                                                      upstream_dir: Path) -> None:
    """gke too: a pool is one box, its pods counted over the nodes it may scale to."""
    need_dot()
    if stack == "lab":
        plan, report = lab
    else:
        plan = program.run(stack)
        report = cluster.check(plan, plan.config, upstream_dir)
    assert any(p.nodes for p in report.placements)
    assert_picture_matches(cluster_picture.svg(cluster_picture.dot_source(report, plan.config)), report)


def test_committed_docs_picture_is_current(lab: tuple[program.Plan, Report]) -> None:
    """docs/images/cluster-lab.svg is the lab's picture as the code draws it now. Redraw it with
    `.venv/bin/python -m render.cluster_picture lab docs/images/cluster-lab.svg`."""
    committed = DOCS_PICTURE.read_text()
    assert_picture_matches(committed, lab[1])
    need_dot()
    # The same text in every box; graphviz versions may place it differently, so positions are not compared.
    fresh = cluster_picture.svg(cluster_picture.dot_source(lab[1], lab[0].config))
    assert Counter(texts_of(committed)) == Counter(texts_of(fresh)), \
        "docs/images/cluster-lab.svg is stale: python -m render.cluster_picture lab docs/images/cluster-lab.svg"


@pytest.mark.parametrize("dot", [None, "#!/bin/sh\necho 'syntax error in line 1' >&2\nexit 1\n"],
                         ids=["missing", "failing"])
def test_render_goes_on_without_graphviz(dot: str | None, lab: tuple[program.Plan, Report], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """No `dot` on PATH (or one that fails): the files are written, summary.md says what is missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if dot is not None:
        (bin_dir / "dot").write_text(dot)
        (bin_dir / "dot").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    out = tmp_path / "out"
    render_main.write(lab[0], out, lab[1])
    summary = (out / "summary.md").read_text()
    assert not (out / "cluster.svg").exists()
    assert (out / "cluster.dot").read_text() == cluster_picture.dot_source(lab[1], lab[0].config)
    assert "The picture of the planned cluster was not drawn: it needs graphviz" in summary
    assert "[cluster.dot](cluster.dot)" in summary
    assert ("not on PATH" in summary) if dot is None else ("syntax error in line 1" in summary)
    if dot is None:  # the install lines README's "The two commands" gives too (tests/test_docs_graphviz.py)
        assert all(line in summary for line in cluster_picture.GRAPHVIZ_INSTALL), summary
    assert "](cluster.svg)" not in summary
    assert "cluster.svg" not in (out / ".gpu-cluster-render").read_text()
