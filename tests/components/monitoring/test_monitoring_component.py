"""The Monitoring component under the recording mocks, its config keys, its kube-prometheus-stack
values against upstream, its custom resources against the upstream CRDs, and how stacks/addons.py
wires it before the GPU stack (whose DCGM exporter ServiceMonitor needs its CRDs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pulumi
import pytest
import yaml

from components import versions
from components.monitoring import (
    DASHBOARD_LABEL,
    GRAFANA_ADMIN_SECRET,
    NAMESPACE,
    PORT_FORWARD,
    Monitoring,
    MonitoringArgs,
    ScrapeTarget,
    prometheus_rule,
    prometheus_stack_values,
    service_monitor,
)
from config import ConfigError
from config.monitoring import MonitoringConfig
from render import program
from render.program import SECRET_MARKER
from tests.components.test_helm_values import _defaults, undeclared_paths
from tests.conftest import PROJECT_DIR, lab_config, lab_raw
from tests.monitoring_crd_schema import validate_custom_resource

RELEASE = "kubernetes:helm.sh/v3:Release"
RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
SERVICE_MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
RDMA = ScrapeTarget(name="rdma-exporter", namespace="rdma", match_labels={"app": "rdma-exporter"}, port="metrics")


def _monitoring(**overrides: Any) -> MonitoringConfig:
    return MonitoringConfig.model_validate(overrides)


def _one(plan: program.Plan, type_: str, name: str | None = None) -> program.Registration:
    found = [r for r in plan.of_type(type_) if name is None or r.name == name]
    assert len(found) == 1, (type_, name, [r.name for r in plan.of_type(type_)])
    return found[0]


# ------------------------------------------------------------------------------------------------
# the component under mocks


def _build(monitoring: MonitoringConfig, scrape_targets: tuple[ScrapeTarget, ...] = ()) -> None:
    """Run the component as a Pulumi program under the test's mocks; wait for every registration."""
    pulumi.runtime.test(lambda: Monitoring("monitoring", MonitoringArgs(monitoring=monitoring,
                                                                         scrape_targets=scrape_targets)))()


def test_component_registers_release_secret_dashboards_and_rules(mocks):
    _build(_monitoring(), (RDMA,))
    plan = mocks.plan
    release = _one(plan, RELEASE)
    assert release.inputs["chart"] == versions.KUBE_PROMETHEUS_STACK_CHART
    assert release.inputs["version"] == versions.KUBE_PROMETHEUS_STACK_CHART_VERSION
    assert release.inputs["repositoryOpts"]["repo"] == versions.KUBE_PROMETHEUS_STACK_CHART_REPO
    assert release.inputs["namespace"] == NAMESPACE
    grafana = release.inputs["values"]["grafana"]
    assert grafana["admin"]["existingSecret"] == GRAFANA_ADMIN_SECRET
    assert "adminPassword" not in grafana  # never the chart's default (or any) password in values
    secret = _one(plan, "kubernetes:core/v1:Secret")
    assert secret.inputs["metadata"] == {"name": GRAFANA_ADMIN_SECRET, "namespace": NAMESPACE}
    assert secret.inputs["stringData"] == SECRET_MARKER
    assert secret.urn in release.dependencies
    pw = _one(plan, "random:index/randomPassword:RandomPassword")
    assert pw.inputs["length"] >= 24 and pw.parent.endswith("::monitoring")
    # custom resources wait for the chart (its CRDs and operator)
    for type_ in (RULE, SERVICE_MONITOR):
        assert release.urn in _one(plan, type_).dependencies, type_
    assert _one(plan, SERVICE_MONITOR).inputs["metadata"]["namespace"] == "rdma"
    boards = plan.of_type("kubernetes:core/v1:ConfigMap")
    assert len(boards) == 2
    for cm in boards:
        assert cm.inputs["metadata"]["labels"] == {DASHBOARD_LABEL: "1"}
        (body,) = cm.inputs["data"].values()
        assert json.loads(body)["uid"] == cm.inputs["metadata"]["name"]
    assert _one(plan, "kubernetes:core/v1:Namespace").inputs["metadata"]["name"] == NAMESPACE
    assert [r.parent.rsplit("::", 1)[-1] for r in plan.resources if r.custom] == ["monitoring"] * (
        len([r for r in plan.resources if r.custom])
    )


@pulumi.runtime.test
def test_password_output_is_secret_and_port_forward_plain(mocks):
    mon = Monitoring("monitoring", MonitoringArgs(monitoring=_monitoring()))

    def check(args):
        password_is_secret, forward_is_secret, forward = args
        assert password_is_secret is True
        assert forward_is_secret is False and forward == PORT_FORWARD

    return pulumi.Output.all(
        pulumi.Output.from_input(mon.grafana_admin_password.is_secret()),
        pulumi.Output.from_input(mon.grafana_port_forward.is_secret()),
        mon.grafana_port_forward,
    ).apply(check)


def test_storage_is_emptydir_without_a_class_and_a_pvc_with_one() -> None:
    spec = prometheus_stack_values(_monitoring())["prometheus"]["prometheusSpec"]
    assert spec["storageSpec"] == {"emptyDir": {"sizeLimit": "50Gi"}}
    assert spec["retention"] == "15d" and spec["retentionSize"] == "42GB"
    spec = prometheus_stack_values(_monitoring(storageClass="fast", storageSize="1Ti", retention="30d"))[
        "prometheus"]["prometheusSpec"]
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "fast" and claim["resources"]["requests"]["storage"] == "1Ti"
    assert spec["retention"] == "30d" and spec["retentionSize"] == "870GB"


def test_prometheus_selects_monitors_and_rules_in_every_namespace() -> None:
    spec = prometheus_stack_values(_monitoring())["prometheus"]["prometheusSpec"]
    for kind in ("serviceMonitor", "podMonitor", "rule", "probe"):
        assert spec[f"{kind}SelectorNilUsesHelmValues"] is False
        assert spec[f"{kind}Selector"] == {} and spec[f"{kind}NamespaceSelector"] == {}


# ------------------------------------------------------------------------------------------------
# upstream: values paths, sidecar label, CRD schemas


@pytest.mark.parametrize("overrides", [{}, {"storageClass": "fast"}], ids=["emptyDir", "pvc"])
def test_values_declared_upstream(upstream_dir: Path, overrides: dict[str, str]) -> None:
    # the chart's values with its subcharts' (grafana, kube-state-metrics) under their keys
    defaults = _defaults(upstream_dir, versions.KUBE_PROMETHEUS_STACK_CHART)
    assert undeclared_paths(prometheus_stack_values(_monitoring(**overrides)), defaults) == []


def test_values_typo_is_caught(upstream_dir: Path) -> None:
    defaults = _defaults(upstream_dir, versions.KUBE_PROMETHEUS_STACK_CHART)
    values = prometheus_stack_values(_monitoring())
    values["grafana"]["admin"]["existingSecrets"] = values["grafana"]["admin"].pop("existingSecret")
    assert undeclared_paths(values, defaults) == [
        "grafana.admin.existingSecrets: not declared in the chart's default values"
    ]


def test_chart_version_and_sidecar_label_are_upstreams(upstream_dir: Path) -> None:
    chart = yaml.safe_load((upstream_dir / "kube-prometheus-stack" / "Chart.yaml").read_text())
    assert chart["name"] == versions.KUBE_PROMETHEUS_STACK_CHART
    assert str(chart["version"]) == versions.KUBE_PROMETHEUS_STACK_CHART_VERSION == "88.5.3"
    defaults = yaml.safe_load((upstream_dir / "kube-prometheus-stack" / "values.yaml").read_text())
    sidecar = defaults["grafana"]["sidecar"]["dashboards"]
    assert (sidecar["label"], str(sidecar["labelValue"])) == (DASHBOARD_LABEL, "1")
    assert defaults["grafana"]["admin"]["userKey"] == "admin-user"
    assert defaults["grafana"]["admin"]["passwordKey"] == "admin-password"


def test_prometheus_rule_and_service_monitor_valid_against_crds(upstream_dir: Path) -> None:
    validate_custom_resource(prometheus_rule(_monitoring()), upstream_dir)
    validate_custom_resource(service_monitor(RDMA), upstream_dir)


def test_crd_validation_is_strict(upstream_dir: Path) -> None:
    rule = prometheus_rule(_monitoring())
    rule["spec"]["groups"][0]["rules"][0]["severity"] = "critical"  # belongs under labels
    with pytest.raises(jsonschema.ValidationError, match="severity"):
        validate_custom_resource(rule, upstream_dir)
    sm = service_monitor(RDMA)
    sm["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        validate_custom_resource(sm, upstream_dir)


# ------------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("monitoring", "key"),
    [
        ({"retention": "15 days"}, "monitoring.retention"),
        ({"retention": "12h"}, "monitoring.retention"),
        ({"storageSize": "50GB"}, "monitoring.storageSize"),
        ({"alerts": {"gpuTempCelsius": 200}}, "monitoring.alerts.gpuTempCelsius"),
        ({"alerts": {"idleMinutes": 1}}, "monitoring.alerts.idleMinutes"),
        ({"grafana": {}}, "monitoring.grafana"),
    ],
)
def test_bad_monitoring_config_names_the_key(monitoring: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        lab_config(monitoring=monitoring)
    assert key in [k for k, _ in err.value.problems]


def test_pulumi_yaml_default_is_the_model_default() -> None:
    project = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())
    assert lab_config(monitoring=project["config"]["monitoring"]["default"]).monitoring == MonitoringConfig()
    assert MonitoringConfig().storage_class is None  # "" in Pulumi.yaml means emptyDir
    assert lab_raw()  # the default lab config parses with monitoring on
    assert lab_config().monitoring.enabled is True


# ------------------------------------------------------------------------------------------------
# wiring in every stack


def _plan(stack: str, monitoring: dict[str, Any] | None = None, gpu: dict[str, Any] | None = None) -> program.Plan:
    values, secret_keys = program.stack_config(stack)
    if monitoring is not None:
        values["gpu-cluster:monitoring"] = json.dumps(monitoring)
    if gpu is not None:
        values["gpu-cluster:gpu"] = json.dumps(gpu)
    return program.run(stack, config=(values, secret_keys))


@pytest.mark.parametrize("stack", ["lab", "dev"])
@pytest.mark.parametrize("gpu_stack", ["device-plugin", "operator"])
def test_gpu_stack_waits_for_monitoring_and_enables_the_service_monitor(stack: str, gpu_stack: str) -> None:
    plan = _plan(stack, gpu={"stack": gpu_stack})
    release = next(r for r in plan.of_type(RELEASE) if r.inputs["chart"] == versions.KUBE_PROMETHEUS_STACK_CHART)
    (gpu,) = plan.of_type("gpucluster:gpu:SoftwareStack")
    assert release.urn in gpu.dependencies
    for r in plan.of_type(RELEASE):
        if r.inputs["chart"] == versions.DCGM_EXPORTER_CHART:
            assert r.inputs["values"]["serviceMonitor"]["enabled"] is True
        if r.inputs["chart"] == versions.GPU_OPERATOR_CHART:
            assert r.inputs["values"]["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert plan.outputs["grafanaAdminPassword"] == SECRET_MARKER
    assert plan.outputs["grafanaPortForward"] == PORT_FORWARD
    assert len(plan.of_type(RULE)) == 1


@pytest.mark.parametrize("stack", ["lab", "dev"])
def test_monitoring_disabled_means_no_release_and_no_service_monitor(stack: str) -> None:
    plan = _plan(stack, monitoring={"enabled": False})
    charts = [r.inputs["chart"] for r in plan.of_type(RELEASE)]
    assert versions.KUBE_PROMETHEUS_STACK_CHART not in charts
    assert not plan.of_type(RULE) and "grafanaAdminPassword" not in plan.outputs
    for r in plan.of_type(RELEASE):
        if r.inputs["chart"] == versions.DCGM_EXPORTER_CHART:
            assert r.inputs["values"]["serviceMonitor"]["enabled"] is False


def test_docs_tell_how_to_open_grafana() -> None:
    page = (PROJECT_DIR / "docs" / "monitoring.md").read_text()
    assert PORT_FORWARD in page
    assert "pulumi stack output grafanaAdminPassword --show-secrets" in page
    for alert in ("GpuFatalXidError", "GpuAllocatedButIdle", "DcgmExporterDown", "GpuNodeAllocatableBelowCapacity"):
        assert alert in page
