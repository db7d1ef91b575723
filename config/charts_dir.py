"""gpu-cluster:chartsDir: the folder of pinned Helm charts and upstream manifests for clusters
without internet access, checked before anything is registered. Each chart the stack installs must
be there, unpacked as <chart>-<version>/ (config/chart_source.py), and its Chart.yaml must say the
pinned name and version: Helm installs a local folder as it finds it, whatever version the release
asks for. Each manifest it applies must be there as <name>-<version>/<path>: a YAML file, or a
kustomize overlay (a folder with a kustomization file); neither says its version."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple, TypeAlias

import yaml

from config.chart_source import PinnedManifest, chart_folder, chart_name
from config.errors import Problems

KEY = "chartsDir"


class PinnedChart(NamedTuple):
    """A chart as components/versions.py pins it: name (or OCI reference), version, repository
    (None for an OCI reference, which names its registry itself)."""

    chart: str
    version: str
    repo: str | None = None

    def pull_command(self) -> str:
        """How to fetch it into the folder, on a machine with internet access."""
        source = f"{self.chart} --repo {self.repo}" if self.repo else self.chart
        return (f"helm pull {source} --version {self.version} --untar "
                f"&& mv {chart_name(self.chart)} {chart_folder(self.chart, self.version)}")


# What chartsDir holds: a chart, or an upstream manifest (a YAML file, a kustomize overlay).
PinnedDownload: TypeAlias = PinnedChart | PinnedManifest
# The names kustomize looks for in an overlay's folder (sigs.k8s.io/kustomize konfig.RecognizedKustomizationFileNames).
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def charts_dir_problems(charts_dir: str, needed: Iterable[PinnedDownload]) -> Problems:
    """Why `charts_dir` cannot serve the charts and manifests `needed` ([] when it can, or when it is unset)."""
    if not charts_dir:
        return []
    root = Path(charts_dir)
    if not root.is_absolute():
        return [(KEY, f"{charts_dir!r} is not an absolute path: give the folder holding the pinned charts, "
                      "e.g. /srv/gpu-cluster/charts")]
    if not root.is_dir():
        return [(KEY, f"{root} is not a folder: create it and unpack every pinned chart the stack installs "
                      "into it as <chart>-<version>/ (docs/getting-started/index.md, Air-gapped installs)")]
    problems: Problems = []
    for pinned in needed:
        problem = _manifest_problem(root, pinned) if isinstance(pinned, PinnedManifest) else _chart_problem(root, pinned)
        if problem:
            problems.append((KEY, problem))
    return problems


def _chart_problem(root: Path, pinned: PinnedChart) -> str | None:
    folder = root / chart_folder(pinned.chart, pinned.version)
    chart_yaml = folder / "Chart.yaml"
    name = chart_name(pinned.chart)
    if not chart_yaml.is_file():
        return (f"chart {name} {pinned.version} is not in {root}: no {chart_yaml} "
                f"(fetch it with `{pinned.pull_command()}`)")
    try:
        meta = yaml.safe_load(chart_yaml.read_text())
    except (OSError, yaml.YAMLError) as err:
        return f"{chart_yaml} cannot be read as a Chart.yaml: {err}"
    if not isinstance(meta, dict):
        return f"{chart_yaml} is not a Chart.yaml (no name and version)"
    found_name, found_version = str(meta.get("name", "")), str(meta.get("version", ""))
    if found_name != name:
        return f"{chart_yaml} is chart {found_name!r}, not the pinned {name!r}"
    if found_version != pinned.version:
        return (f"{chart_yaml} says version {found_version!r}, but {name} is pinned at {pinned.version!r} "
                f"(components/versions.py): replace the folder with the pinned chart")
    return None


def _manifest_problem(root: Path, pinned: PinnedManifest) -> str | None:
    path = pinned.local(root)
    fetch = f"fetch it in {root} with `{pinned.fetch_command()}`"
    if pinned.is_overlay:
        if not path.is_dir():
            return f"{pinned.name} {pinned.version}'s kustomize overlay is not in {root}: no folder {path} ({fetch})"
        if not any((path / name).is_file() for name in KUSTOMIZATION_FILES):
            return f"{path} is not a kustomize overlay: no {' or '.join(KUSTOMIZATION_FILES)} in it ({fetch})"
        return None
    if not path.is_file():
        return f"{pinned.name} {pinned.version}'s manifest is not in {root}: no file {path} ({fetch})"
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as err:
        return f"{path} cannot be read as a YAML manifest: {err}"
    if not docs or not all(isinstance(d, dict) and d.get("kind") for d in docs):
        return f"{path} is not a Kubernetes manifest (a document without a kind) ({fetch})"
    return None
