"""The DCGM exporter's field list (components/dcgm_metrics.py) against upstream: every field is one
the exporter's own list names, no default field is lost, the alert rules and dashboards use only
fields it publishes, and both GPU-stack paths' pinned charts, rendered with our values, hand the
exporter exactly this list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from components import dcgm_metrics
from components.monitoring import alerts, dashboards
from config.monitoring import MonitoringAlerts
from render import program
from render.cluster.objects import collect
from tests.conftest import stack_config_with

FIELD = re.compile(r"^\s*#?\s*(DCGM_FI_[A-Z0-9_]+)\s*,", re.MULTILINE)


def upstream_fields(upstream_dir: Path) -> tuple[set[str], set[str]]:
    """(the exporter's default fields, every field its lists name, commented ones included)."""
    text = "\n".join((upstream_dir / "dcgm-exporter" / f).read_text()
                     for f in ("default-counters.csv", "dcp-metrics-included.csv"))
    defaults = {m.group(1) for m in re.finditer(r"^(DCGM_FI_[A-Z0-9_]+)\s*,", (
        upstream_dir / "dcgm-exporter" / "default-counters.csv").read_text(), re.MULTILINE)}
    return defaults, {m.group(1) for m in FIELD.finditer(text)}


def ours() -> list[str]:
    return [f for f, _, _ in dcgm_metrics.FIELDS]


def test_every_field_is_one_the_exporter_names_and_no_default_is_lost(upstream_dir: Path) -> None:
    defaults, known = upstream_fields(upstream_dir)
    assert len(defaults) > 20  # the parse found the list
    assert set(ours()) <= known, set(ours()) - known
    assert defaults <= set(ours()), defaults - set(ours())
    assert len(ours()) == len(set(ours()))
    assert {f for f, kind, _ in dcgm_metrics.FIELDS if kind not in ("gauge", "counter", "label")} == set()


def test_the_check_catches_a_misspelt_field(upstream_dir: Path) -> None:
    _, known = upstream_fields(upstream_dir)
    assert "DCGM_FI_DEV_ECC_DBE_VOLATILE_TOTAL" not in known and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in known


def test_rules_and_dashboards_use_only_published_fields() -> None:
    used = set()
    for group in alerts.rule_groups(MonitoringAlerts()):
        for rule in group["rules"]:
            used |= set(re.findall(r"DCGM_FI_[A-Z0-9_]+", rule["expr"]))
    used |= set(re.findall(r"DCGM_FI_[A-Z0-9_]+", repr(dashboards.__dict__)))
    assert used and used <= set(ours()), used - set(ours())
    for field, _, _ in dcgm_metrics.HEALTH_FIELDS:  # every health field is alerted on
        assert any(field in r["expr"] for g in alerts.rule_groups(MonitoringAlerts()) for r in g["rules"]), field


def _rendered(stack_overrides: dict[str, object], upstream_dir: Path) -> list[dict[str, object]]:
    plan = program.run("lab", config=stack_config_with("lab", **stack_overrides))
    return [o.body for o in collect(plan, upstream_dir, plan.config.kubernetes_version).objects]


def _csv_fields(text: str) -> list[str]:
    return [line.split(",")[0].strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_the_dcgm_exporter_chart_hands_the_exporter_our_list(upstream_dir: Path) -> None:
    objs = _rendered({}, upstream_dir)  # lab: the device-plugin stack
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "exporter-metrics-config-map"]
    assert _csv_fields(cm["data"]["metrics"]) == ours()
    (ds,) = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "dcgm-exporter"]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][container["args"].index("-f") + 1] == "/etc/dcgm-exporter/default-counters.csv"
    mounted = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/dcgm-exporter/default-counters.csv"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mounted[0]["name"]]
    assert volume["configMap"]["name"] == "exporter-metrics-config-map"


@pytest.mark.parametrize("sharing", [{"mode": "none"}, {"mode": "time-slicing", "replicas": 4}])
def test_the_gpu_operator_chart_hands_the_exporter_our_list(sharing: dict[str, object], upstream_dir: Path) -> None:
    objs = _rendered({"gpu": {"stack": "operator", "sharing": sharing}}, upstream_dir)
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == dcgm_metrics.OPERATOR_CONFIGMAP]
    assert _csv_fields(cm["data"]["dcgm-metrics.csv"]) == ours()
    (policy,) = [o for o in objs if o["kind"] == "ClusterPolicy"]
    assert policy["spec"]["dcgmExporter"]["config"] == {"name": dcgm_metrics.OPERATOR_CONFIGMAP}
    assert cm["metadata"]["namespace"] == [o for o in objs if o["kind"] == "Deployment"
                                          and o["metadata"]["name"] == "gpu-operator"][0]["metadata"]["namespace"]


def test_upstream_documents_both_keys_as_commented_examples(upstream_dir: Path) -> None:
    exporter = (upstream_dir / "dcgm-exporter" / "values.yaml").read_text()
    assert re.search(r"^# customMetrics: \|", exporter, re.MULTILINE)
    operator = (upstream_dir / "gpu-operator" / "values.yaml").read_text()
    block = re.search(r"^  # config:\n((?:    #.*\n)+)", operator, re.MULTILINE)
    assert block is not None
    example = yaml.safe_load("\n".join(line.strip()[2:] for line in block.group(1).splitlines()
                                       if line.strip().startswith("# ") and ":" in line and "#" not in line.strip()[2:]))
    assert {"name", "create", "data"} <= set(example)
