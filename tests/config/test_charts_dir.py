"""gpu-cluster:chartsDir refused before anything is registered: a relative path, a folder that is not
there, a chart the stack installs that the folder lacks, a Chart.yaml that is not the pinned chart,
an upstream manifest (Multus' DaemonSet, the training operator's overlay) missing or not one.
Real folders in tmp_path; what a stack needs comes from its config (Addons.pinned_downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

import config
from components import versions
from config import ConfigError
from config.chart_source import MULTUS_DAEMONSET, TRAINING_OPERATOR_OVERLAY, PinnedManifest
from render import program
from tests.conftest import SEED_002_ROCE, stack_config_with
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
    assert {getattr(c, 'chart', None) for c in cfg.pinned_downloads()} == set(DEV_CHARTS)


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


# network.roce on dev (seed 002's two GPU nodes, as tests/stacks/test_charts_dir.py has them), and the
# pytorchjob launcher (the committed dev stack runs its training job with it).
RDMA = {"network": {"linkGbps": 25, "rdma": True, "roce": SEED_002_ROCE}, "gpuNodes": ["gpu0", "gpu1"],
        "training": {"image": "registry.example.com/trainer:1.0.0", "nodes": 2}}
PYTORCHJOB = {"training": {"enabled": True, "launcher": "pytorchjob", "image": "registry.example.com/trainer:1.0.0"},
              "storage": {"hostPath": "/data/shared"}, "gpuNodes": ["minikube"]}


def _with_every_chart(root: Path, **extra: object) -> None:
    """`root` holding every chart (not manifest) the dev stack with `extra` installs."""
    unset = config.parse({"platform": "dev", "kubeContext": "minikube", **extra})
    for chart in unset.pinned_downloads():
        if not isinstance(chart, PinnedManifest):
            _chart(root, chart.chart.rsplit("/", 1)[-1], chart.version)


def test_the_rdma_network_needs_multus_manifest_with_the_download_that_fetches_it(
        tmp_path: Path, upstream_dir: Path) -> None:
    _with_every_chart(tmp_path, **RDMA)
    message = _problems(str(tmp_path), **RDMA)
    manifest = tmp_path / "multus-v4.3.0" / "multus-daemonset-thick.yml"
    assert f"gpu-cluster:chartsDir: multus v4.3.0's manifest is not in {tmp_path}: no file {manifest}" in message
    assert f"mkdir -p multus-v4.3.0 && curl -fsSL -o multus-v4.3.0/multus-daemonset-thick.yml {versions.MULTUS_MANIFEST}" in message
    assert "training-operator" not in message  # indexed-job: no operator
    manifest.parent.mkdir()
    manifest.symlink_to(upstream_dir / "charts" / "multus-v4.3.0" / "multus-daemonset-thick.yml")
    cfg = _dev(str(tmp_path), **RDMA)
    assert MULTUS_DAEMONSET in cfg.pinned_downloads() and TRAINING_OPERATOR_OVERLAY not in cfg.pinned_downloads()
    assert cfg.chart_source.manifest(MULTUS_DAEMONSET) == str(manifest)


def test_a_download_that_is_no_manifest_is_refused(tmp_path: Path) -> None:
    """What `curl` without -f saves from a wrong URL: GitHub's 404 page, one YAML string."""
    _with_every_chart(tmp_path, **RDMA)
    manifest = tmp_path / "multus-v4.3.0" / "multus-daemonset-thick.yml"
    manifest.parent.mkdir()
    manifest.write_text("404: Not Found")
    assert f"gpu-cluster:chartsDir: {manifest} is not a Kubernetes manifest" in _problems(str(tmp_path), **RDMA)


def test_the_pytorchjob_launcher_needs_the_training_operator_overlay(tmp_path: Path, upstream_dir: Path) -> None:
    _with_every_chart(tmp_path, **PYTORCHJOB)
    overlay = tmp_path / "training-operator-v1.9.4" / "manifests" / "overlays" / "standalone"
    message = _problems(str(tmp_path), **PYTORCHJOB)
    assert (f"gpu-cluster:chartsDir: training-operator v1.9.4's kustomize overlay is not in {tmp_path}: "
            f"no folder {overlay}") in message
    assert f"git clone --depth 1 --branch v1.9.4 {versions.TRAINING_OPERATOR_REPO} training-operator-v1.9.4" in message
    assert "multus" not in message
    overlay.mkdir(parents=True)  # a folder, but not the overlay
    assert f"gpu-cluster:chartsDir: {overlay} is not a kustomize overlay" in _problems(str(tmp_path), **PYTORCHJOB)
    overlay.rmdir()
    overlay.parent.rmdir()
    overlay.parent.parent.rmdir()
    overlay.parent.parent.parent.rmdir()
    (tmp_path / "training-operator-v1.9.4").symlink_to(upstream_dir / "charts" / "training-operator-v1.9.4")
    cfg = _dev(str(tmp_path), **PYTORCHJOB)
    assert cfg.chart_source.manifest(TRAINING_OPERATOR_OVERLAY) == str(overlay)


def test_the_program_registers_nothing_without_the_overlay(tmp_path: Path) -> None:
    """The committed dev stack with the pytorchjob launcher and a charts folder without the overlay."""
    _with_every_chart(tmp_path, **PYTORCHJOB)
    with pytest.raises(ConfigError, match="gpu-cluster:chartsDir: training-operator v1.9.4's kustomize overlay"):
        program.run("dev", config=stack_config_with("dev", chartsDir=str(tmp_path), training={"launcher": "pytorchjob"}))
