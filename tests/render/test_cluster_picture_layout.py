"""The picture as dot draws it (render/cluster_picture.py): no text runs over another text of its
row or out of its box when a viewer draws it in its own font (the widths come from the font file
fontconfig gives this machine for the SVG's font-family, tests/render/font_advances.py; not from
dot's own layout, which measured with hinted metrics); and on an HA lab the VIP and the control
planes are one group (a graphviz cluster) framing exactly those boxes.

The stacks' own files say which hosts are control planes and what the VIP is.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from config.control_planes import KubeVip
from config.lab import LabStack
from render import cluster, cluster_picture, program
from render.cluster import Report
from tests.render.font_advances import font_for

SVG = "{http://www.w3.org/2000/svg}"
PROJECT = Path(__file__).resolve().parents[2]
STACKS = ("lab", "lab-ha", "gke", "dev")
GAP = 2.0  # user units: the least room between two texts of one row, and before the box's edge


@pytest.fixture(scope="module")
def checked(upstream_dir: Path) -> dict[str, tuple[program.Plan, Report]]:
    out = {}
    for stack in STACKS:
        plan = program.run(stack)
        out[stack] = plan, cluster.check(plan, plan.config, upstream_dir)
    return out


def drawn(stack: str, checked: dict[str, tuple[program.Plan, Report]]) -> tuple[str, str]:
    assert shutil.which("dot"), "graphviz's dot is not installed (apt-get install graphviz; .ci/run does)"
    plan, report = checked[stack]
    source = cluster_picture.dot_source(report, plan.config)
    return source, cluster_picture.svg(source)


def _points(g: ET.Element) -> list[tuple[float, float]]:
    """The corners of g's polygons and the points of its paths (a rounded cluster frame is a path)."""
    shapes = [poly.get("points") or "" for poly in g.iter(f"{SVG}polygon")]
    shapes += [path.get("d") or "" for path in g.iter(f"{SVG}path")]
    return [(float(x), float(y)) for shape in shapes for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", shape)]


def _extent(t: ET.Element) -> tuple[float, float]:
    """Left and right of a <text> as a viewer draws it, from its anchor and its font's widths."""
    family = (t.get("font-family") or "").split(",")[0]
    style = ":bold" if t.get("font-weight") == "bold" else ""
    style += ":italic" if t.get("font-style") == "italic" else ""
    width = font_for(family + style).width(t.text or "", float(t.get("font-size") or 14))
    x = float(t.get("x") or 0)
    anchor = t.get("text-anchor")
    left = x if anchor == "start" else x - width if anchor == "end" else x - width / 2
    return left, left + width


def overruns(svg: str) -> list[str]:
    """Every text that reaches the next text of its row, or its box's right edge."""
    found = []
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if g.get("class") != "node":
            continue
        right_edge = max(x for x, _y in _points(g))
        rows: dict[str, list[ET.Element]] = {}
        for t in g.iter(f"{SVG}text"):
            rows.setdefault(t.get("y") or "", []).append(t)
        for texts in rows.values():
            spans = sorted((_extent(t), t.text or "") for t in texts)
            for ((_l, end), text), ((start, _r), after) in zip(spans, spans[1:], strict=False):
                if end + GAP > start:
                    found.append(f"{text!r} ends at {end:.1f}, over {after!r} at {start:.1f}")
            (_l, end), text = spans[-1]
            if end + GAP > right_edge:
                found.append(f"{text!r} ends at {end:.1f}, past its box's edge at {right_edge:.1f}")
    return found


def test_the_font_measure_matches_a_known_width() -> None:
    """The measure itself: 'M' is one em wide or less in any sans face, and a string is its letters' sum."""
    font = font_for("Helvetica")
    assert 0 < font.width("M", 10) <= 10
    assert font.width("1 pod", 10) == pytest.approx(sum(font.width(c, 10) for c in "1 pod"))
    assert font.width("ii", 10) < font.width("mm", 10)


@pytest.mark.parametrize("stack", STACKS)
def test_no_name_runs_over_its_count_or_out_of_its_box(stack: str,
                                                       checked: dict[str, tuple[program.Plan, Report]]) -> None:
    """Long pod names (the lab's 'StatefulSet monitoring/alertmanager-monitoring-kube-prometheus-
    alertmanager') drawn in this machine's font stay clear of the count and of the box's edge."""
    _source, svg = drawn(stack, checked)
    rows_with_two = [t for t in ET.fromstring(svg).iter(f"{SVG}text") if re.fullmatch(r"\d+ pods?.*", t.text or "")]
    assert rows_with_two, "no workload row was drawn"
    assert overruns(svg) == []


def _stack_file(stack: str) -> dict[str, object]:
    config: dict[str, object] = yaml.safe_load((PROJECT / f"Pulumi.{stack}.yaml").read_text())["config"]
    return config


def _cluster_members(source: str) -> tuple[str, set[str]]:
    """The control-plane cluster's label and the node ids inside it, from the .dot."""
    match = re.search(r"subgraph cluster_control_plane \{(.*?)\n  \}", source, re.S)
    assert match, "no cluster_control_plane subgraph"
    body = match.group(1)
    label = re.search(r'label="([^"]*)"', body)
    assert label
    return label.group(1), set(re.findall(r'^\s+"([^"]+)"(?: \[|;)', body, re.M)) | {
        n for line in re.findall(r"\{rank=same; (.*?);\}", body) for n in re.findall(r'"([^"]+)"', line)}


def test_ha_lab_draws_the_vip_and_its_control_planes_as_one_group(
        checked: dict[str, tuple[program.Plan, Report]]) -> None:
    stack_file = _stack_file("lab-ha")
    vip = stack_file["gpu-cluster:kubeVip"]["address"]  # type: ignore[index]
    control_planes = {h["name"] for h in stack_file["gpu-cluster:hosts"]  # type: ignore[attr-defined]
                      if h["role"] == "control-plane"}
    assert len(control_planes) == 3
    source, svg = drawn("lab-ha", checked)
    label, members = _cluster_members(source)
    assert label == f"control plane: VIP {vip}:6443"
    assert members == control_planes | {cluster_picture.VIP_NODE}
    # What dot drew: the frame holds the VIP's and every control plane's box, and no other box.
    root = ET.fromstring(svg)
    frames = [g for g in root.iter(f"{SVG}g") if g.get("class") == "cluster"]
    assert len(frames) == 1
    xs, ys = zip(*_points(frames[0]), strict=True)
    inside = set()
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "node":
            title = g.find(f"{SVG}title")
            assert title is not None and title.text
            if all(min(xs) <= x <= max(xs) and min(ys) <= y <= max(ys) for x, y in _points(g)):
                inside.add(title.text)
    assert inside == control_planes | {cluster_picture.VIP_NODE}
    assert any(t.text == f"VIP {vip}:6443" for t in root.iter(f"{SVG}text"))


@pytest.mark.parametrize("stack", ["lab", "gke", "dev"])
def test_no_group_without_a_vip(stack: str, checked: dict[str, tuple[program.Plan, Report]]) -> None:
    """The lab's one control plane is reached at its own address: nothing to group; gke and dev do
    not run their control planes."""
    if stack == "lab":
        assert "gpu-cluster:kubeVip" not in _stack_file(stack)
    source, svg = drawn(stack, checked)
    assert "subgraph cluster" not in source
    assert not [g for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("class") == "cluster"]


def test_one_control_plane_behind_a_vip_is_a_group_too(checked: dict[str, tuple[program.Plan, Report]]) -> None:
    """kubeVip works with one control plane (config/control_planes.py): the API is at the VIP, so
    the picture frames it with the one control plane."""
    plan, report = checked["lab"]
    assert isinstance(plan.config, LabStack)
    [host] = plan.config.control_planes
    with_vip = plan.config.model_copy(update={"kube_vip": KubeVip(address="192.0.2.200", interface="ens18")})
    label, members = _cluster_members(cluster_picture.dot_source(report, with_vip))
    assert label == "control plane: VIP 192.0.2.200:6443"
    assert members == {host.name, cluster_picture.VIP_NODE}
