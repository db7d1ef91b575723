"""A charts folder as gpu-cluster:chartsDir wants it, made from ../shared/upstream/charts without
copying a chart or manifest: each entry a symlink to the vendored file, except the Chart.yaml of the charts
whose git copy carries a placeholder version that upstream's release build replaces (SOURCES.md,
"Chart sources"): theirs is written with the version the published chart says, as `helm package
--version` does at release. For tests, and for an end-to-end run that installs from local charts."""

from __future__ import annotations

from pathlib import Path

import yaml

# folder -> (version in the git copy, version of the published chart), from SOURCES.md.
PUBLISHED_VERSIONS = {
    "gpu-operator-v26.7.0": ("v1.0.0-devel", "v26.7.0"),
    "tigera-operator-v3.32.1": ("v0.0", "v3.32.1"),
    "crd.projectcalico.org.v1-v3.32.1": ("v0.0", "v3.32.1"),
    "whereabouts-chart-0.9.4": ("0.1.1", "0.9.4"),
}


def published_charts(upstream_charts: Path, dest: Path) -> Path:
    """`dest` holding every chart of `upstream_charts` as published (see the module docstring), and
    every upstream manifest there (multus-<version>/, training-operator-<version>/: folders without
    a Chart.yaml, which chartsDir holds as they are) as a symlink to its folder."""
    dest.mkdir(parents=True, exist_ok=True)
    for manifests in sorted(p for p in upstream_charts.iterdir() if p.is_dir() and not (p / "Chart.yaml").is_file()):
        (dest / manifests.name).symlink_to(manifests)
    for chart in sorted(p for p in upstream_charts.iterdir() if (p / "Chart.yaml").is_file()):
        folder = dest / chart.name
        folder.mkdir()
        for entry in chart.iterdir():
            if entry.name != "Chart.yaml":
                (folder / entry.name).symlink_to(entry)
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        if chart.name in PUBLISHED_VERSIONS:
            in_git, published = PUBLISHED_VERSIONS[chart.name]
            assert str(meta["version"]) == in_git, f"{chart}/Chart.yaml: the vendored copy changed, update this table"
            meta["version"] = published
        (folder / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return dest
