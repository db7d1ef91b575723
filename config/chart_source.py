"""Where every Helm chart and upstream manifest the program installs comes from: its repository or
URL (the default), or, with gpu-cluster:chartsDir, a folder of the pinned copies for clusters without
internet access: each chart unpacked as <chart>-<version>/, each manifest (an install YAML file, a
kustomize overlay) at <name>-<version>/<path>. The one home of the pinned thing -> folder mapping:
the components, the config's refusals (config/charts_dir.py) and the whole-cluster check
(render/cluster/objects.py) use it. It holds no Pulumi: it stands on the config's floor (the config
builds a stack's ChartSource and checks its folder); the components, a floor up, import it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components import versions


def chart_name(chart: str) -> str:
    """The chart's own name (Chart.yaml `name`): a repository chart is its name, an OCI reference
    `oci://registry/path/<chart>` ends with it."""
    return chart.rstrip("/").rsplit("/", 1)[-1] if chart.startswith("oci://") else chart


def chart_folder(chart: str, version: str) -> str:
    """The folder a pinned chart is unpacked into: `helm pull --untar` of it, renamed <chart>-<version>."""
    return f"{chart_name(chart)}-{version}"


def is_local_chart(chart: str) -> bool:
    """A chart input naming a folder on disk (what ChartSource gives with a charts folder)."""
    return Path(chart).is_absolute()


def pinned_chart_name(chart: str, version: str) -> str:
    """The chart's name from a release's `chart` input, whichever source it names (repository
    chart, OCI reference or local folder <chart>-<version>): what code matching releases compares."""
    if is_local_chart(chart):
        folder = Path(chart).name
        return folder.removesuffix(f"-{version}")
    return chart_name(chart)


@dataclass(frozen=True)
class PinnedManifest:
    """An upstream install manifest the program applies from a pinned URL: a YAML file (yaml/v2
    ConfigFile) when `repo` is None, else a kustomize overlay, the folder `path` of repository
    `repo` at tag `version` (kustomize/v2 Directory). Its local copy: <charts_dir>/<folder>/<path>."""

    name: str
    version: str
    path: str
    url: str
    repo: str | None = None

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def is_overlay(self) -> bool:
        return self.repo is not None

    def local(self, charts_dir: Path) -> Path:
        return charts_dir / self.folder / self.path

    def fetch_command(self) -> str:
        """How to fetch it into the charts folder, on a machine with internet access."""
        if self.repo is not None:  # the overlay's bases lie elsewhere in the repository: all of it
            return f"git clone --depth 1 --branch {self.version} {self.repo} {self.folder}"
        return f"mkdir -p {self.folder} && curl -fsSL -o {self.folder}/{self.path} {self.url}"


# network.roce: Multus' thick-plugin DaemonSet (components/rdma_network.py).
MULTUS_DAEMONSET = PinnedManifest("multus", versions.MULTUS_VERSION, versions.MULTUS_MANIFEST_FILE,
                                  versions.MULTUS_MANIFEST)
# training.launcher pytorchjob: the training operator's standalone overlay (components/training/job.py).
TRAINING_OPERATOR_OVERLAY = PinnedManifest(
    "training-operator", versions.TRAINING_OPERATOR_VERSION, versions.TRAINING_OPERATOR_OVERLAY,
    versions.TRAINING_OPERATOR_KUSTOMIZE, repo=versions.TRAINING_OPERATOR_REPO,
)
PINNED_MANIFESTS = (MULTUS_DAEMONSET, TRAINING_OPERATOR_OVERLAY)


def pinned_manifest(source: str) -> PinnedManifest | None:
    """Which pinned manifest a ConfigFile's `file` or a kustomize Directory's `directory` names:
    its URL, or its copy <charts_dir>/<folder>/<path> (None: neither)."""
    for manifest in PINNED_MANIFESTS:
        if source == manifest.url or (
                is_local_chart(source) and Path(source).as_posix().endswith(f"/{manifest.folder}/{manifest.path}")):
            return manifest
    return None


@dataclass(frozen=True)
class ChartSource:
    """charts_dir None: each chart from its repository, each manifest from its URL. A folder: each
    chart from <charts_dir>/<chart>-<version>, with no repository, so Helm fetches nothing, and each
    manifest from its copy there (config/charts_dir.py has checked that everything the stack needs
    is there, each chart at its pinned version)."""

    charts_dir: Path | None = None

    def args(self, chart: str, version: str, repo: str | None = None) -> dict[str, Any]:
        """The `chart`, `version` and `repository_opts` arguments of a helm Release or v4 Chart.
        `version` stays with a local folder: pulumi-kubernetes' locateChart takes a folder holding a
        Chart.yaml as is, and Check then records the chart's own version (which the config checked)."""
        if self.charts_dir is not None:
            return {"chart": str(self.charts_dir / chart_folder(chart, version)), "version": version}
        return {"chart": chart, "version": version, **({"repository_opts": {"repo": repo}} if repo else {})}

    def manifest(self, pinned: PinnedManifest) -> str:
        """A ConfigFile's `file` or a kustomize Directory's `directory`: the local copy with a charts
        folder (config/charts_dir.py has checked it is there), else the pinned URL."""
        return str(pinned.local(self.charts_dir)) if self.charts_dir is not None else pinned.url
