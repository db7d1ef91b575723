"""With gpu-cluster:chartsDir set, every Helm chart and upstream manifest the dev, lab and gke stacks
install comes from that folder: under mocks through the real __main__.py (and the whole-cluster check,
which renders each chart from the path the release names), each helm Release and v4 Chart names a
local folder that exists, holds the pinned chart (Chart.yaml name and version) and has no repository;
each yaml ConfigFile and kustomize Directory names an existing local copy, no URL; and what is
installed is exactly what the config says it needs (what config/charts_dir.py checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from config.chart_source import PinnedManifest, chart_name, pinned_manifest
from e2e.published_charts import published_charts
from render import program
from render.cluster import objects
from tests.conftest import SEED_002_ROCE, stack_config_with

HELM_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart")

# Every chart the program installs appears in one case at least: the committed stacks (lab: calico and
# the NFS CSI driver), flannel, the GPU Operator, and dev with everything optional (RDMA network,
# Kueue, the W&B agent; seed 002's two GPU nodes as tests/stacks/test_rdma_network.py has them).
EVERYTHING = {
    "network": {"linkGbps": 25, "rdma": True, "roce": SEED_002_ROCE}, "queues": {"enabled": True},
    "wandb": {"enabled": True, "entity": "ml-team", "queue": "gpu-queue", "project": "llm"},
    "gpuNodes": ["gpu0", "gpu1"], "gpuNodeGpus": None, "storage": {"hostPath": "", "useDefaultClass": True},
    "training": {"nodes": 2}, "acceptance": {"nccl": True},
}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "dev": ("dev", {}),
    "dev-operator": ("dev", {"gpu": {"stack": "operator"}}),
    "dev-everything": ("dev", EVERYTHING),
    "dev-pytorchjob": ("dev", {"training": {"launcher": "pytorchjob"}}),
    "lab": ("lab", {}),
    "lab-flannel": ("lab", {"cni": "flannel"}),
    "gke": ("gke", {}),
}


def _config(stack: str, charts_dir: Path, overrides: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = stack_config_with(stack, chartsDir=str(charts_dir), **overrides)
    if "wandb" in overrides:  # the agent's API key: a secret
        values["gpu-cluster:wandbApiKey"] = program.SECRET_MARKER
        secret_keys = [*secret_keys, "gpu-cluster:wandbApiKey"]
    return values, secret_keys


@pytest.fixture(scope="module")
def charts_dir(upstream_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return published_charts(upstream_dir / "charts", tmp_path_factory.mktemp("charts"))


@pytest.mark.parametrize("case", CASES)
def test_every_chart_is_the_pinned_one_from_the_charts_folder(case: str, charts_dir: Path) -> None:
    stack, overrides = CASES[case]
    plan = program.run(stack, config=_config(stack, charts_dir, overrides))
    releases = [r for r in plan.resources if r.type in HELM_TYPES]
    assert releases, f"{case}: no helm release"
    assert plan.config is not None
    pinned = {chart_name(c.chart): c.version for c in plan.config.pinned_downloads() if not isinstance(c, PinnedManifest)}
    installed = set()
    for r in releases:
        chart = Path(str(r.inputs["chart"]))
        assert chart.is_absolute() and chart.parent == charts_dir, f"{r.name}: chart {chart} is not in {charts_dir}"
        assert "repositoryOpts" not in r.inputs, f"{r.name}: a local chart with a repository"
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        assert meta["name"] in pinned, f"{r.name}: installs {meta['name']}, which the config does not list"
        assert str(meta["version"]) == pinned[meta["name"]] == r.inputs["version"], r.name
        installed.add(meta["name"])
    assert installed == set(pinned), f"{case}: config lists {sorted(pinned)}, plan installs {sorted(installed)}"


MANIFEST_TYPES = {**dict.fromkeys(objects.CONFIGFILE_TYPES, "file"), **dict.fromkeys(objects.KUSTOMIZE_TYPES, "directory")}


def _manifests(plan: program.Plan) -> list[program.Registration]:
    return [r for r in plan.resources if r.type in MANIFEST_TYPES]


@pytest.mark.parametrize("case", CASES)
def test_every_manifest_is_the_local_copy_in_the_charts_folder(case: str, charts_dir: Path) -> None:
    stack, overrides = CASES[case]
    plan = program.run(stack, config=_config(stack, charts_dir, overrides))
    assert plan.config is not None
    needed = {d for d in plan.config.pinned_downloads() if isinstance(d, PinnedManifest)}
    applied = set()
    for r in _manifests(plan):
        source = str(r.inputs[MANIFEST_TYPES[r.type]])
        assert "://" not in source, f"{r.name}: fetched over the network from {source}"
        path = Path(source)
        assert path.is_absolute() and path.is_relative_to(charts_dir), f"{r.name}: {source} is not in {charts_dir}"
        assert path.is_file() if r.type in objects.CONFIGFILE_TYPES else (path / "kustomization.yaml").is_file(), source
        applied.add(pinned_manifest(source))
    assert applied == needed, f"{case}: config lists {needed}, plan applies {applied}"
    if case in ("dev-everything", "dev-pytorchjob"):
        assert applied, f"{case}: the case meant to apply a manifest applies none"


@pytest.mark.parametrize("case", ["dev-everything", "dev-pytorchjob"])
def test_the_whole_cluster_check_reads_the_same_objects_from_the_local_copies(
        case: str, charts_dir: Path, upstream_dir: Path) -> None:
    """The check expands the chartsDir copies (the program's transforms applied) into the objects it
    reads from the vendored copies of the URLs when the key is unset."""
    stack, overrides = CASES[case]
    values, secret_keys = _config(stack, charts_dir, overrides)
    local = program.run(stack, config=(values, secret_keys))
    unset = {key: value for key, value in values.items() if key != "gpu-cluster:chartsDir"}
    remote = program.run(stack, config=(unset, secret_keys))

    def bodies(plan: program.Plan) -> list[Any]:
        only = program.Plan(plan.stack, _manifests(plan), config=plan.config)
        return sorted((o.body for o in objects.collect(only, upstream_dir, "1.34.2").objects), key=repr)

    assert [str(r.inputs[MANIFEST_TYPES[r.type]]) for r in _manifests(remote)] != [
        str(r.inputs[MANIFEST_TYPES[r.type]]) for r in _manifests(local)]
    assert bodies(local) == bodies(remote) and bodies(local)
