"""Where every Helm chart the program installs comes from: its repository (the default), or, with
gpu-cluster:chartsDir, a folder of the pinned charts unpacked as <chart>-<version>/ for clusters
without internet access. The one home of the chart -> folder mapping: the releases, the config's
refusals (config/charts_dir.py) and the whole-cluster check (render/cluster/objects.py) use it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
class ChartSource:
    """charts_dir None: each chart from its repository. A folder: each chart from <charts_dir>/
    <chart>-<version>, with no repository, so Helm fetches nothing (config/charts_dir.py has
    checked that every chart the stack needs is there at its pinned version)."""

    charts_dir: Path | None = None

    def args(self, chart: str, version: str, repo: str | None = None) -> dict[str, Any]:
        """The `chart`, `version` and `repository_opts` arguments of a helm Release or v4 Chart.
        `version` stays with a local folder: pulumi-kubernetes' locateChart takes a folder holding a
        Chart.yaml as is, and Check then records the chart's own version (which the config checked)."""
        if self.charts_dir is not None:
            return {"chart": str(self.charts_dir / chart_folder(chart, version)), "version": version}
        return {"chart": chart, "version": version, **({"repository_opts": {"repo": repo}} if repo else {})}
