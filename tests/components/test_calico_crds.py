"""cni: calico installs: every custom resource the tigera-operator release creates has its CRD
installed first, by a chart the release depends on in the plan.

Since Calico 3.32 the tigera-operator chart ships no CRDs (its README: "CRDs are no longer bundled
in this chart and must be installed separately from the `crd.projectcalico.org.v1` chart"), yet its
templates create operator.tigera.io resources (Installation, APIServer, Goldmane, Whisker). Both
charts are rendered here from the pinned upstream copies (upstream_dir/charts/<chart>-<version>),
with the values the plan gives them: the check is against upstream's templates, not our output.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
from pathlib import Path
from typing import Any

import yaml

from components import versions
from render import program
from render.program import Plan, Registration
from tests.stacks.test_stacks import dependency_graph, transitive

RELEASE = "kubernetes:helm.sh/v3:Release"
CHART = "kubernetes:helm.sh/v4:Chart"
CRD_KIND = "CustomResourceDefinition"


@functools.cache
def calico_plan() -> Plan:
    values, secret_keys = program.stack_config("lab")
    return program.run("lab", config=({**values, "gpu-cluster:cni": "calico"}, secret_keys))


def render_texts(chart_dir: Path, values: dict[str, Any], name: str, namespace: str) -> list[str]:
    """The manifests `helm install` of the chart would apply (templates and crds/), offline."""
    import helm_python
    from helm_python import _native
    from helm_python.chart import _dumps

    options = {"name": name, "namespace": namespace, "kube_version": f"v{versions.KUBERNETES_DEFAULT}",
               "is_install": True}
    with helm_python.Chart.load(str(chart_dir)) as chart:
        rendered = json.loads(_native.call_string("helm_render", chart._raw(), _dumps(values), json.dumps(options)))
        return [*rendered.values(), *(crd["data"] for crd in chart.crds)]


def render_chart(chart_dir: Path, values: dict[str, Any], name: str, namespace: str) -> list[dict[str, Any]]:
    texts = render_texts(chart_dir, values, name, namespace)
    return [doc for text in texts for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]


def upstream_chart(upstream_dir: Path, inputs: dict[str, Any]) -> Path:
    """The pinned upstream copy of the chart a Release/Chart registration installs."""
    path = upstream_dir / "charts" / f"{inputs['chart']}-{inputs['version']}"
    assert (path / "Chart.yaml").is_file(), f"no upstream copy of {inputs['chart']} {inputs['version']} at {path}"
    assert yaml.safe_load((path / "Chart.yaml").read_text())["name"] == inputs["chart"]
    return path


def render_registration(upstream_dir: Path, reg: Registration) -> list[dict[str, Any]]:
    inputs = reg.inputs
    return render_chart(upstream_chart(upstream_dir, inputs), inputs.get("values") or {},
                        inputs.get("name") or reg.name, inputs.get("namespace") or "default")


def is_builtin(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def operator_release(plan: Plan) -> Registration:
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs.get("chart") == versions.CALICO_CHART]
    return release


def test_operator_chart_ships_no_crds_but_creates_custom_resources(upstream_dir: Path) -> None:
    """Why a second chart is needed at all: upstream's operator chart, with our values."""
    release = operator_release(calico_plan())
    objects = render_registration(upstream_dir, release)
    assert not [o for o in objects if o["kind"] == CRD_KIND]
    kinds = {(o["apiVersion"].rpartition("/")[0], o["kind"]) for o in objects if not is_builtin(o["apiVersion"])}
    assert ("operator.tigera.io", "Installation") in kinds


def test_every_custom_resource_of_the_operator_has_its_crd_installed_first(upstream_dir: Path) -> None:
    plan = calico_plan()
    release = operator_release(plan)
    needed = {(o["apiVersion"].rpartition("/")[0], o["kind"])
              for o in render_registration(upstream_dir, release) if not is_builtin(o["apiVersion"])}
    assert needed, "the tigera-operator chart rendered no custom resource: is the Installation still enabled?"

    graph = dependency_graph(plan)
    before = transitive(graph, release.urn)
    providers = [r for r in plan.resources if r.urn in before and r.type in (RELEASE, CHART)]
    installed: dict[tuple[str, str], str] = {}
    for reg in providers:
        for obj in render_registration(upstream_dir, reg):
            if obj["kind"] == CRD_KIND:
                spec = obj["spec"]
                installed[(spec["group"], spec["names"]["kind"])] = reg.inputs["chart"]
    missing = sorted(needed - set(installed))
    assert not missing, f"custom resources of tigera-operator with no CRD installed before it: {missing}"
    assert {installed[k] for k in needed} == {versions.CALICO_CRDS_CHART}


def crd_release(plan: Plan) -> Registration:
    (crds,) = [r for r in plan.resources if r.type in (RELEASE, CHART)
               and r.inputs.get("chart") == versions.CALICO_CRDS_CHART]
    return crds


def test_crd_chart_is_pinned_with_the_operator(upstream_dir: Path) -> None:
    crds = crd_release(calico_plan())
    assert crds.type == RELEASE
    assert crds.inputs["version"] == versions.CALICO_CRDS_CHART_VERSION == versions.CALICO_CHART_VERSION
    assert crds.inputs["repositoryOpts"]["repo"] == versions.CALICO_CRDS_CHART_REPO == versions.CALICO_CHART_REPO
    assert crds.inputs["namespace"] == operator_release(calico_plan()).inputs["namespace"]
    upstream_chart(upstream_dir, crds.inputs)


def test_crd_release_fits_in_its_helm_secret(upstream_dir: Path) -> None:
    """Helm 3 keeps a release (chart files included) in one Secret, at most 1 MiB of data:
    json.Marshal, gzip BestCompression, base64 (helm/helm pkg/storage/driver/util.go encodeRelease).
    Upstream's docs apply these CRDs with `helm template | kubectl apply --server-side` instead; if
    a Calico bump leaves too little margin here, do that (a kubernetes.helm.v4.Chart) instead.
    This is an estimate (Python's gzip level 6, no weaker than Go's BestCompression), with margin."""
    release = crd_release(calico_plan())
    chart_dir = upstream_chart(upstream_dir, release.inputs)
    files = sorted(p for p in chart_dir.rglob("*") if p.is_file())
    stored = {
        "chart": {"files": [{"name": str(p.relative_to(chart_dir)), "data": base64.b64encode(p.read_bytes()).decode()}
                            for p in files]},
        "manifest": "\n---\n".join(render_texts(chart_dir, {}, release.inputs["name"], release.inputs["namespace"])),
    }
    raw = json.dumps(stored).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    size = len(base64.b64encode(gzip.compress(raw.encode(), compresslevel=6)))
    assert size < 0.95 * 2**20, f"calico-crds release record ~{size} bytes: too close to the Secret's 1 MiB"


def test_flannel_plans_install_no_calico_crds() -> None:
    values, secret_keys = program.stack_config("lab")
    plan = program.run("lab", config=({**values, "gpu-cluster:cni": "flannel"}, secret_keys))
    assert not [r for r in plan.resources if r.type in (RELEASE, CHART)
                and r.inputs.get("chart") == versions.CALICO_CRDS_CHART]
