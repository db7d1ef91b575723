"""NetworkPolicies enforced on every default stack (issue 24), and a warning where they are not:

- lab: calico by default (it enforces them); flannel still accepted, and `render` warns (stderr
  and summary.md, exit 0);
- gke: Dataplane V2 (datapathProvider ADVANCED_DATAPATH) by default; `gke.dataplane: legacy`
  warns; the datapath is fixed at creation, so `render --against` shows the cluster replaced and
  a `!!` line (exit 4);
- dev: `clusterCni` says what the existing cluster runs; plain minikube's default does not
  enforce (render warns), calico does; a value minikube has no `--cni` for is refused, naming the
  key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import config
from render import __main__ as render_main
from render import program
from tests.config.refusals import accepted, reported
from tests.conftest import PROJECT_DIR, lab_raw, stack_config_with

GKE_CLUSTER = "gcp:container/cluster:Cluster"
_RUN = program.run  # before any test patches it


def _render(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], stack: str,
            *extra: str, **overrides: Any) -> tuple[int, str, str]:
    """`python -m render <stack> --no-check` of the committed stack file with `overrides`."""
    # The new side only: --against's older side comes with its own config.
    monkeypatch.setattr(render_main.program, "run",
                        lambda s, **kw: _RUN(s, config=kw.get("config") or stack_config_with(s, **overrides)))
    rc = render_main.main([stack, "--out", str(tmp_path / "out"), "--no-check", *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _summary(tmp_path: Path) -> str:
    return (tmp_path / "out" / "summary.md").read_text()


# --- lab ------------------------------------------------------------------------------------------

def test_lab_defaults_to_calico_and_the_committed_stack_runs_it() -> None:
    assert accepted(lab_raw()).cni.value == "calico"  # type: ignore[union-attr]
    committed = yaml.safe_load((PROJECT_DIR / "Pulumi.lab.yaml").read_text())["config"]
    assert committed["gpu-cluster:cni"] == "calico"
    charts = {r.inputs["chart"] for r in program.run("lab").of_type("kubernetes:helm.sh/v3:Release")}
    assert "tigera-operator" in charts and "flannel" not in charts


def test_lab_with_calico_renders_without_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _render(monkeypatch, tmp_path, capsys, "lab")
    # The committed lab has one control plane: its one warning is the etcd copy's (test_etcd_copy_warning.py).
    assert rc == 0 and [x for x in err.splitlines() if x.startswith("warning: ")] == [
        f"warning: {render_main._etcd_copy_warning(program.run('lab').config)}"]  # noqa: SLF001
    assert "gpu-cluster:cni" not in _summary(tmp_path)


def test_lab_with_flannel_warns_and_still_renders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _render(monkeypatch, tmp_path, capsys, "lab", cni="flannel")
    assert rc == 0, err
    (line,) = [x for x in err.splitlines() if x.startswith("warning: ") and "etcd" not in x]
    assert "gpu-cluster:cni is flannel" in line and "not enforced" in line and "calico" in line
    summary = _summary(tmp_path)
    assert "## Warnings" in summary and "gpu-cluster:cni is flannel" in summary
    # The answer first: the warning sits right under the verdict, above the plan.
    assert summary.index("## Warnings") < summary.index("## Helm releases")


# --- gke ------------------------------------------------------------------------------------------

def _gke_cluster(**overrides: Any) -> Any:
    (cluster,) = program.run("gke", config=stack_config_with("gke", **overrides)).of_type(GKE_CLUSTER)
    return cluster


def test_gke_runs_dataplane_v2_by_default() -> None:
    cluster = _gke_cluster()
    assert cluster.inputs["datapathProvider"] == "ADVANCED_DATAPATH"
    # The provider's ForceNew, said to the engine so that the offline preview shows it too.
    assert "datapathProvider" in cluster.entry()["options"]["replaceOnChanges"]


def test_gke_legacy_dataplane_is_a_choice_and_warns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert _gke_cluster(gke={"dataplane": "legacy"}).inputs["datapathProvider"] == "LEGACY_DATAPATH"
    rc, _, err = _render(monkeypatch, tmp_path, capsys, "gke", gke={"dataplane": "legacy"})
    assert rc == 0 and "warning: gpu-cluster:gke.dataplane is legacy" in err
    assert "gke.dataplane is legacy" in _summary(tmp_path)


def test_gke_dataplane_change_replaces_the_cluster_and_is_loud(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load((PROJECT_DIR / "Pulumi.gke.yaml").read_text())
    gke = data["config"].get("gpu-cluster:gke") or {}
    data["config"]["gpu-cluster:gke"] = {**gke, "dataplane": "legacy"}
    older = tmp_path / "old-Pulumi.gke.yaml"
    older.write_text(yaml.safe_dump(data))
    rc, out, err = _render(monkeypatch, tmp_path, capsys, "gke", "--against", str(older))
    assert rc == 4, err
    cluster_name = _gke_cluster().name
    replaced = [x for x in out.splitlines() if x.split()[:1] == [cluster_name] and "replace (delete first)" in x]
    assert replaced and any("datapathProvider" in x for x in out.splitlines()), out
    loud = [x for x in out.splitlines() if x.startswith("!!") and "gke.dataplane" in x]
    assert loud and "LEGACY_DATAPATH -> ADVANCED_DATAPATH" in loud[0] and "replaced" in loud[0], out


def test_gke_dataplane_refuses_what_gke_has_not(capsys: pytest.CaptureFixture[str]) -> None:
    committed = yaml.safe_load((PROJECT_DIR / "Pulumi.gke.yaml").read_text())["config"]
    raw = {k.removeprefix("gpu-cluster:"): v for k, v in committed.items()}
    raw["gke"] = {**raw.get("gke", {}), "dataplane": "cilium"}
    reported(raw, "gke.dataplane", "v2", "legacy", secrets=set())


# --- dev ------------------------------------------------------------------------------------------

DEV = {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"]}


def test_dev_default_is_plain_minikube_and_warns() -> None:
    cfg = accepted(dict(DEV))
    assert isinstance(cfg, config.DevStack) and cfg.cluster_cni.value == "minikube-default"
    assert "gpu-cluster:clusterCni is minikube-default" in cfg.unenforced_warning()
    assert "--cni=calico" in cfg.unenforced_warning()


@pytest.mark.parametrize("cni, warns", [("calico", False), ("cilium", False), ("bridge", True),
                                        ("kindnet", True), ("flannel", True)])
def test_dev_warns_unless_the_cluster_cni_enforces(cni: str, warns: bool) -> None:
    assert bool(accepted({**DEV, "clusterCni": cni}).unenforced_warning()) is warns


def test_dev_refuses_a_cni_minikube_has_no_flag_for() -> None:
    reported({**DEV, "clusterCni": "weave"}, "clusterCni", "calico", "cilium")


def test_the_committed_dev_stack_starts_minikube_with_calico(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    text = (PROJECT_DIR / "Pulumi.dev.yaml").read_text()
    assert "--cni=calico" in text and yaml.safe_load(text)["config"]["gpu-cluster:clusterCni"] == "calico"
    rc, _, err = _render(monkeypatch, tmp_path, capsys, "dev")
    assert rc == 0 and "warning:" not in err
    rc, _, err = _render(monkeypatch, tmp_path, capsys, "dev", clusterCni=None)
    assert rc == 0 and "warning: gpu-cluster:clusterCni is minikube-default" in err


def test_the_getting_started_page_says_how() -> None:
    page = (PROJECT_DIR / "docs" / "getting-started" / "dev.md").read_text()
    assert "--cni=calico" in page and "clusterCni" in page
