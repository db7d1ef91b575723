"""The GPU health runbook (docs/runbook.md) has a section for every alert the program's rules define,
read from the rules as the Monitoring component builds them (components/monitoring: the GPU and
cluster groups, the RDMA group, the GPU health service's group), each saying what the alert means,
what the service does and what a human does; and what it says the service does matches the route
and the service's own action table (routed or not; acting or only counting). Each rule carries its
section's `What a human does.` text (written only there) and a `runbook_url` whose anchor the page has."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import sys
from typing import Any

import markdown
import pytest
import yaml

import components.monitoring as monitoring
from components.monitoring import alerts, certificates, etcd, etcd_backup, gpu_health, kueue, prometheus_rule, rdma
from config.monitoring import MonitoringConfig
from tests.conftest import PROJECT_DIR

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))
from gpuhealth import alerts as service_alerts  # noqa: E402

RUNBOOK = PROJECT_DIR / "docs" / "runbook.md"
PARTS = ("**What it means.**", "**What the service does.**", "**What a human does.**")
# Every group the component can add beside alerts.rule_groups (components/monitoring/__init__.py).
EXTRA_GROUPS = {rdma: lambda: rdma.rule_group(25.0), gpu_health: lambda: gpu_health.rule_group(60.0),
                etcd_backup: lambda: etcd_backup.rule_group(21600), kueue: lambda: kueue.rule_group(60),
                etcd: etcd.rule_group, certificates: certificates.rule_group}


def _rules() -> dict[str, dict[str, Any]]:
    extra = tuple(build() for build in EXTRA_GROUPS.values())
    spec = prometheus_rule(MonitoringConfig(), extra)["spec"]
    return {r["alert"]: r for g in spec["groups"] for r in g["rules"] if "alert" in r}


def _sections(text: str) -> dict[str, str]:
    """`## Title` -> the text up to the next `## ` heading."""
    parts = re.split(r"^## +(.+?) *$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_rule_group_module_is_read() -> None:
    """A new module of components/monitoring with its own rule group must be read here too."""
    with_groups = set()
    for info in pkgutil.iter_modules(monitoring.__path__):
        module = importlib.import_module(f"{monitoring.__name__}.{info.name}")
        if hasattr(module, "rule_group"):
            with_groups.add(module)
    assert with_groups == set(EXTRA_GROUPS)


def test_every_alert_has_a_runbook_section() -> None:
    sections = _sections(RUNBOOK.read_text())
    names = set(_rules())
    assert len(names) >= 20  # the GPU, cluster, RDMA and GPU health groups
    missing = sorted(names - set(sections))
    assert not missing, f"docs/runbook.md has no '## <alert>' section for {missing}"
    for name in names:
        body = sections[name]
        for part in PARTS:
            assert part in body, f"runbook section {name} lacks {part}"
            said = body.split(part, 1)[1].split("**What", 1)[0].strip()
            assert len(said) > 20, f"runbook section {name}: {part} says nothing"


def test_no_section_for_an_alert_that_does_not_exist() -> None:
    """An alert renamed or removed leaves no stale section behind (alert names are CamelCase words)."""
    names = set(_rules())
    alert_like = {s for s in _sections(RUNBOOK.read_text()) if re.fullmatch(r"[A-Z][A-Za-z0-9]+", s)}
    assert alert_like <= names, sorted(alert_like - names)


def test_what_the_service_does_follows_the_route_and_its_actions() -> None:
    sections = _sections(RUNBOOK.read_text())
    acting = set(service_alerts.XID_ALERTS) | set(service_alerts.ALERT_ACTIONS)
    assert acting <= set(gpu_health.HEALTH_ALERTS)
    for name in _rules():
        said = sections[name].split("**What the service does.**", 1)[1].split("**What a human does.**", 1)[0]
        said = " ".join(said.split())
        if name == gpu_health.STALE_ALERT:
            assert "/healthz" in said
        elif name not in gpu_health.HEALTH_ALERTS:
            assert "not routed" in said, name
        elif name in acting:
            assert "cordon" in said.lower() and "not routed" not in said and "changes nothing" not in said, name
        else:
            assert "counts it" in said and "changes nothing" in said, name


# --- One source per alert: the rule's remedy is its runbook section's, and its runbook_url resolves ---

HUMAN = "**What a human does.**"


def _heading_ids() -> set[str]:
    """The ids MkDocs gives the page's headings: Python-Markdown's toc extension, as mkdocs.yml configures it."""
    html = markdown.markdown(RUNBOOK.read_text(), extensions=["toc", "attr_list", "tables", "admonition"],
                             extension_configs={"toc": {"permalink": True}})
    return set(re.findall(r'<h[1-6] id="([^"]+)"', html))


def test_every_alert_links_its_own_runbook_section() -> None:
    # The URL is repo-relative because mkdocs.yml names no site the docs are served at; a site_url
    # added there should become the links' base (components/monitoring/runbook.py RUNBOOK_URL).
    assert "site_url" not in yaml.safe_load((PROJECT_DIR / "mkdocs.yml").read_text())
    ids = _heading_ids()
    for name, rule in _rules().items():
        link = rule["annotations"].get("runbook_url")
        assert link, f"{name} has no runbook_url annotation"
        path, _, anchor = link.partition("#")
        assert (PROJECT_DIR / path).resolve() == RUNBOOK.resolve(), f"{name}: {link} is not docs/runbook.md"
        assert anchor in ids, f"{name}: {link}: docs/runbook.md has no heading with id {anchor!r}"
        assert re.search(rf'<h2 id="{re.escape(anchor)}">{name}\b', markdown.markdown(
            RUNBOOK.read_text(), extensions=["toc"])), f"{name}: #{anchor} is another alert's section"


def test_the_remedy_is_the_runbook_text() -> None:
    """Each rule's `runbook` annotation says what its section's `What a human does.` paragraph says, word
    for word (a link kept as its words and its target): a second, diverging text in the rule fails here."""
    sections = _sections(RUNBOOK.read_text())
    for name, rule in _rules().items():
        paragraph = sections[name].split(HUMAN, 1)[1].split("\n\n", 1)[0]
        words = " ".join(re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", paragraph).split())
        said = re.sub(r" \((?:docs/|https?://)[^ ()]*\)", "", rule["annotations"]["runbook"])
        assert said == words, f"{name}: the rule's remedy differs from docs/runbook.md:\n{said}\n{words}"


def test_no_remedy_sentence_is_also_written_in_the_rules() -> None:
    """No string in components/monitoring repeats a runbook remedy: the rule reads it, never copies it."""
    remedies = " ".join(" ".join(s.split(HUMAN, 1)[1].split()) for s in _sections(RUNBOOK.read_text()).values()
                        if HUMAN in s)
    for source in (PROJECT_DIR / "components" / "monitoring").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= 40:
                text = " ".join(node.value.split())
                assert text not in remedies, f"{source.name} repeats a runbook remedy: {text!r}"


def test_an_alert_without_a_section_is_refused() -> None:
    with pytest.raises(ValueError, match=r"docs/runbook.md has no '## NoSuchAlert' section"):
        alerts._alert("NoSuchAlert", "vector(1)", "0m", "warning", "summary", "description")
