"""The GPU health runbook (docs/runbook.md) has a section for every alert the program's rules define,
read from the rules as the Monitoring component builds them (components/monitoring: the GPU and
cluster groups, the RDMA group, the GPU health service's group), each saying what the alert means,
what the service does and what a human does; and what it says the service does matches the route
and the service's own action table (routed or not; acting or only counting)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from typing import Any

import components.monitoring as monitoring
from components.monitoring import etcd_backup, gpu_health, kueue, prometheus_rule, rdma
from config.monitoring import MonitoringConfig
from tests.conftest import PROJECT_DIR

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))
from gpuhealth import alerts as service_alerts  # noqa: E402

RUNBOOK = PROJECT_DIR / "docs" / "runbook.md"
PARTS = ("**What it means.**", "**What the service does.**", "**What a human does.**")
# Every group the component can add beside alerts.rule_groups (components/monitoring/__init__.py).
EXTRA_GROUPS = {rdma: lambda: rdma.rule_group(25.0), gpu_health: lambda: gpu_health.rule_group(60.0),
                etcd_backup: lambda: etcd_backup.rule_group(21600), kueue: lambda: kueue.rule_group(60)}


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
