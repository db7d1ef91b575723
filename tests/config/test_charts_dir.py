"""gpu-cluster:chartsDir refused before anything is registered: a relative path, a folder that is not
there, a chart the stack installs that the folder lacks, a Chart.yaml that is not the pinned chart.
Real folders in tmp_path; the charts a stack needs come from its config (Addons.helm_charts)."""

from __future__ import annotations

from pathlib import Path

import pytest

import config
from components import versions
from config import ConfigError
from render import program
from tests.conftest import stack_config_with
from tests.render_cli import render_cli

# What a default dev stack installs: the device plugin path (GFD from the device plugin's chart, the
# DCGM exporter) and monitoring.
DEV_CHARTS = {
    "nvidia-device-plugin": versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
    "dcgm-exporter": versions.DCGM_EXPORTER_CHART_VERSION,
    "kube-prometheus-stack": versions.KUBE_PROMETHEUS_STACK_CHART_VERSION,
}


def _chart(root: Path, name: str, version: str, said_version: str | None = None) -> Path:
    folder = root / f"{name}-{version}"
    folder.mkdir(parents=True)
    (folder / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: {said_version or version}\n")
    return folder


def _dev(charts_dir: str, **extra: object) -> config.StackConfig:
    return config.parse({"platform": "dev", "kubeContext": "minikube", "chartsDir": charts_dir, **extra})


def _problems(charts_dir: str, **extra: object) -> str:
    with pytest.raises(ConfigError) as err:
        _dev(charts_dir, **extra)
    return str(err.value)


def test_every_needed_chart_at_its_pin_is_accepted(tmp_path: Path) -> None:
    for name, version in DEV_CHARTS.items():
        _chart(tmp_path, name, version)
    cfg = _dev(str(tmp_path))
    assert cfg.chart_source.charts_dir == tmp_path
    assert {c.chart for c in cfg.helm_charts()} == set(DEV_CHARTS)


def test_unset_fetches_from_the_repositories() -> None:
    cfg = config.parse({"platform": "dev", "kubeContext": "minikube"})
    assert cfg.chart_source.charts_dir is None


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    message = _problems(str(tmp_path / "charts"))
    assert f"gpu-cluster:chartsDir: {tmp_path / 'charts'} is not a folder" in message


def test_a_relative_path_is_refused() -> None:
    assert "gpu-cluster:chartsDir: 'charts' is not an absolute path" in _problems("charts")


def test_a_missing_chart_is_refused_with_the_pull_that_fetches_it(tmp_path: Path) -> None:
    for name, version in DEV_CHARTS.items():
        if name != "dcgm-exporter":
            _chart(tmp_path, name, version)
    message = _problems(str(tmp_path))
    assert f"gpu-cluster:chartsDir: chart dcgm-exporter {versions.DCGM_EXPORTER_CHART_VERSION} is not in {tmp_path}" in message
    assert (f"helm pull dcgm-exporter --repo {versions.DCGM_EXPORTER_CHART_REPO} --version "
            f"{versions.DCGM_EXPORTER_CHART_VERSION} --untar && mv dcgm-exporter dcgm-exporter-4.8.2") in message
    assert "nvidia-device-plugin" not in message and "kube-prometheus-stack" not in message


def test_an_oci_chart_is_its_last_path_element(tmp_path: Path) -> None:
    """queues.enabled needs Kueue, an oci:// chart: its folder is kueue-<version>."""
    for name, version in DEV_CHARTS.items():
        _chart(tmp_path, name, version)
    message = _problems(str(tmp_path), queues={"enabled": True})
    assert f"chart kueue {versions.KUEUE_CHART_VERSION} is not in {tmp_path}: no {tmp_path}/kueue-0.19.2/Chart.yaml" in message
    assert f"helm pull {versions.KUEUE_CHART} --version 0.19.2 --untar && mv kueue kueue-0.19.2" in message
    _chart(tmp_path, "kueue", versions.KUEUE_CHART_VERSION)
    assert _dev(str(tmp_path), queues={"enabled": True}).queues.enabled


def test_a_chart_at_another_version_is_refused_naming_the_file_and_both_versions(tmp_path: Path) -> None:
    for name, version in DEV_CHARTS.items():
        _chart(tmp_path, name, version, said_version="88.5.2" if name == "kube-prometheus-stack" else None)
    message = _problems(str(tmp_path))
    chart_yaml = tmp_path / "kube-prometheus-stack-88.5.3" / "Chart.yaml"
    assert (f"gpu-cluster:chartsDir: {chart_yaml} says version '88.5.2', but kube-prometheus-stack is pinned "
            "at '88.5.3'") in message


def test_a_folder_holding_another_chart_is_refused(tmp_path: Path) -> None:
    for name, version in DEV_CHARTS.items():
        _chart(tmp_path, name, version)
    (tmp_path / "dcgm-exporter-4.8.2" / "Chart.yaml").write_text("apiVersion: v2\nname: dcgm\nversion: 4.8.2\n")
    assert "is chart 'dcgm', not the pinned 'dcgm-exporter'" in _problems(str(tmp_path))


def test_the_program_registers_nothing_when_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="gpu-cluster:chartsDir: .* is not a folder"):
        program.run("dev", config=stack_config_with("dev", chartsDir=str(tmp_path / "absent")))


def test_render_exits_2_naming_the_key_the_file_and_both_versions(tmp_path: Path) -> None:
    """As a user runs it: `python -m render dev` with a charts folder whose DCGM exporter is another version."""
    charts = tmp_path / "charts"
    for name, version in DEV_CHARTS.items():
        _chart(charts, name, version, said_version="4.8.1" if name == "dcgm-exporter" else None)
    done = render_cli(tmp_path, "dev", {"chartsDir": str(charts)})
    assert done.returncode == 2, done.stdout + done.stderr
    chart_yaml = charts / "dcgm-exporter-4.8.2" / "Chart.yaml"
    assert (f"gpu-cluster:chartsDir: {chart_yaml} says version '4.8.1', but dcgm-exporter is pinned at '4.8.2'"
            in done.stdout + done.stderr)
    assert "Traceback" not in done.stderr
