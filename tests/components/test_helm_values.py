"""Every Helm value we set is one the chart declares, and every pinned chart is the one upstream
data describes.

Helm silently ignores a values key the chart's templates never read, so a typo (`podCIDR` for
`podCidr`) installs the chart with its defaults and nobody notices. The walker below compares the
values we pass with the chart's default values.yaml (upstream data, reached only through the
`upstream_dir` fixture) and names every path the chart does not declare.

Walker rules (decided here, applied everywhere):
  * Dicts are walked key by key; each key must exist in the upstream dict at the same path.
  * An upstream empty dict `{}` (nodeSelector, resources, podAnnotations, ...) is a free-form map:
    the chart passes it through, so anything below it is accepted.
  * An upstream `null` (e.g. `certs.node.key:`) is a declared leaf of unknown type: any value is
    accepted there.
  * Lists are leaves. Helm replaces a list wholesale (it merges only maps), and an upstream list's
    items are example values of some Kubernetes type (tolerations, args), not a complete key set:
    walking our items against them would reject valid keys such as a toleration's `key`. Only the
    shape is checked: a list must stay a list, a map a map, a scalar a scalar.
  * `walk_list_items=True` overrides the previous rule for reference data that *is* a shape
    illustration (the commented Installation example in calico's values.yaml): each of our items
    must then use only keys some upstream item uses.
  * An allow-list names free-form subtrees by dotted path, each with the reason it is allowed.
  * A subchart's keys (grafana.*, nfd.gc.*) are declared by the subchart's own values.yaml: the
    defaults are the parent's values.yaml over each vendored subchart's (upstream charts/), under
    the dependency's alias, as Helm coalesces them.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import cni, gpu_stack, versions
from config.gpu import GpuConfig
from config.lab import Cni as CniKind
from render import program

POD_CIDR = ipaddress.IPv4Network("10.244.0.0/16")
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"


# ------------------------------------------------------------------------------------------------
# the walker


def undeclared_paths(
    ours: Mapping[str, Any],
    upstream: Any,
    allowed: Mapping[str, str] | None = None,
    *,
    walk_list_items: bool = False,
    _path: tuple[str, ...] = (),
) -> list[str]:
    """Every path of `ours` the upstream defaults do not declare, as 'dotted.path: why'.

    `allowed` maps dotted paths of free-form subtrees to the reason they are free-form; nothing at
    or below such a path is checked.
    """
    allowed = allowed or {}
    problems: list[str] = []
    for key, value in ours.items():
        path = (*_path, str(key))
        dotted = ".".join(path)
        if dotted in allowed:
            continue
        if not isinstance(upstream, Mapping) or key not in upstream:
            problems.append(f"{dotted}: not declared in the chart's default values")
            continue
        default = upstream[key]
        if default is None:
            continue  # declared, type unknown
        if isinstance(value, Mapping):
            if not isinstance(default, Mapping):
                problems.append(f"{dotted}: a map, but the chart's default is a {type(default).__name__}")
            elif default:  # an empty upstream map is free-form
                problems += undeclared_paths(value, default, allowed, walk_list_items=walk_list_items, _path=path)
        elif isinstance(value, list):
            if not isinstance(default, list):
                problems.append(f"{dotted}: a list, but the chart's default is a {type(default).__name__}")
            elif walk_list_items and default and all(isinstance(d, Mapping) for d in default):
                item_keys: dict[str, Any] = {}
                for d in default:
                    item_keys.update(d)
                for i, item in enumerate(value):
                    item_path = (*path[:-1], f"{path[-1]}[{i}]")
                    if not isinstance(item, Mapping):
                        problems.append(f"{'.'.join(item_path)}: a {type(item).__name__}, upstream items are maps")
                        continue
                    problems += undeclared_paths(item, item_keys, allowed, walk_list_items=True, _path=item_path)
        elif isinstance(default, (Mapping, list)):
            problems.append(f"{dotted}: a {type(value).__name__}, but the chart's default is a {type(default).__name__}")
    return problems


# ------------------------------------------------------------------------------------------------
# upstream data, per chart

# Free-form subtrees of each chart's values, with the reason. Keep this list short and explained.
ALLOWED: dict[str, dict[str, str]] = {
    "flannel": {},
    "dcgm-exporter": {
        # The chart renders `securityContext` with toYaml as the exporter container's SecurityContext;
        # its default sets no `privileged`, which gke needs (gpu_stack.dcgm_exporter_values).
        "securityContext.privileged": "container SecurityContext passed through; the default leaves it unset",
        # templates/metrics-configmap.yaml writes it as the exporter's metrics file; values.yaml has
        # it only as a commented example (tests/components/test_dcgm_metrics.py renders it).
        "customMetrics": "the exporter's metrics CSV; documented only as a commented example",
    },
    "gpu-operator": {
        # templates/dcgm_exporter_config.yaml (the ConfigMap) and clusterpolicy.yaml (its name) read
        # dcgmExporter.config.{name,create,data}; values.yaml has it only as a commented example
        # (tests/components/test_dcgm_metrics.py renders it).
        "dcgmExporter.config": "the exporter's metrics ConfigMap; documented only as a commented example",
    },
    "tigera-operator": {
        # The chart copies `installation` (minus `enabled`) into the operator's Installation
        # resource, so this subtree is operator.tigera.io/v1 InstallationSpec.calicoNetwork, not a
        # chart key. values.yaml documents it only as a commented example block; its keys are
        # checked against that example in test_calico_network_matches_commented_example.
        "installation.calicoNetwork": "operator Installation spec passed through; documented only in a commented block",
    },
}

# chart name (as a Release names it) -> upstream folder holding its Chart.yaml and values.yaml.
# calico's folder is named after the released chart version (its Chart.yaml says v0.0).
UPSTREAM_CHART_DIR = {
    versions.FLANNEL_CHART: "flannel",
    versions.CALICO_CHART: f"calico/{versions.CALICO_CHART_VERSION}",
    versions.CALICO_CRDS_CHART: f"charts/{versions.CALICO_CRDS_CHART}-{versions.CALICO_CRDS_CHART_VERSION}",
    versions.NVIDIA_DEVICE_PLUGIN_CHART: "nvidia-device-plugin",
    versions.DCGM_EXPORTER_CHART: "dcgm-exporter",
    versions.GPU_OPERATOR_CHART: "gpu-operator",
    versions.CSI_DRIVER_NFS_CHART: f"csi-driver-nfs/v{versions.CSI_DRIVER_NFS_CHART_VERSION}",
    versions.KUBE_PROMETHEUS_STACK_CHART: "kube-prometheus-stack",
}

PINNED = {
    versions.FLANNEL_CHART: (versions.FLANNEL_CHART_VERSION, versions.FLANNEL_CHART_REPO),
    versions.CALICO_CHART: (versions.CALICO_CHART_VERSION, versions.CALICO_CHART_REPO),
    versions.CALICO_CRDS_CHART: (versions.CALICO_CRDS_CHART_VERSION, versions.CALICO_CRDS_CHART_REPO),
    versions.NVIDIA_DEVICE_PLUGIN_CHART: (
        versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION, versions.NVIDIA_DEVICE_PLUGIN_CHART_REPO
    ),
    versions.DCGM_EXPORTER_CHART: (versions.DCGM_EXPORTER_CHART_VERSION, versions.DCGM_EXPORTER_CHART_REPO),
    versions.GPU_OPERATOR_CHART: (versions.GPU_OPERATOR_CHART_VERSION, versions.GPU_OPERATOR_CHART_REPO),
    versions.CSI_DRIVER_NFS_CHART: (versions.CSI_DRIVER_NFS_CHART_VERSION, versions.CSI_DRIVER_NFS_CHART_REPO),
    versions.KUBE_PROMETHEUS_STACK_CHART: (
        versions.KUBE_PROMETHEUS_STACK_CHART_VERSION, versions.KUBE_PROMETHEUS_STACK_CHART_REPO
    ),
}


def _load_yaml(path: Path) -> Any:
    assert path.is_file(), f"upstream file missing: {path}"
    return yaml.safe_load(path.read_text())


def _coalesce(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, maps merged key by key (Helm's rule for values)."""
    out = dict(base)
    for key, value in over.items():
        both_maps = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = _coalesce(out[key], value) if both_maps else value
    return out


def _subchart_defaults(upstream_dir: Path, chart: str) -> dict[str, Any]:
    """Each dependency's values.yaml of the vendored pinned chart, under its alias (or name)."""
    chart_dir = upstream_dir / "charts" / f"{chart}-{PINNED[chart][0]}"
    if not (chart_dir / "Chart.yaml").is_file():
        return {}
    found: dict[str, Any] = {}
    for dep in _load_yaml(chart_dir / "Chart.yaml").get("dependencies") or []:
        values = chart_dir / "charts" / dep["name"] / "values.yaml"
        if values.is_file():
            found[dep.get("alias") or dep["name"]] = _load_yaml(values) or {}
    return found


def _defaults(upstream_dir: Path, chart: str) -> dict[str, Any]:
    own = _load_yaml(upstream_dir / UPSTREAM_CHART_DIR[chart] / "values.yaml") or {}  # an empty file: no values
    return _coalesce(_subchart_defaults(upstream_dir, chart), own)


def _commented_block(text: str, key: str) -> tuple[dict[str, Any], str]:
    """A commented-out `# key:` block of a values.yaml, uncommented and parsed; and its raw text.

    The block starts at a line '<indent># key:' and runs while lines start with '<indent>#'.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.fullmatch(rf"(\s*)# {re.escape(key)}:\s*", line)), None)
    assert start is not None, f"no commented '{key}:' block in values.yaml"
    indent = lines[start][: lines[start].index("#")]
    block = []
    for line in lines[start:]:
        if not line.startswith(indent + "#"):
            break
        body = line[len(indent) + 1:]
        block.append(body[1:] if body.startswith(" ") else body)
    raw = "\n".join(block)
    parsed = yaml.safe_load(raw)
    assert isinstance(parsed, dict) and isinstance(parsed.get(key), dict), f"commented '{key}:' block is not a map"
    return parsed, raw


# ------------------------------------------------------------------------------------------------
# plans with Helm releases (lab with each CNI, and with each GPU stack and sharing mode)

GPU_OPERATOR_TIME_SLICING = {"stack": "operator", "sharing": {"mode": "time-slicing", "replicas": 4}}
GPU_OPERATOR_MIG = {
    "stack": "operator",
    "sharing": {"mode": "mig", "migStrategy": "mixed", "migProfile": "all-1g.10gb"},
}

# variant -> config keys replaced in the committed lab stack (None: the stack file as committed)
VARIANTS: dict[str, dict[str, str] | None] = {
    "lab": None,
    "lab-flannel": {"gpu-cluster:cni": "flannel"},
    "lab-operator-time-slicing": {"gpu-cluster:gpu": json.dumps(GPU_OPERATOR_TIME_SLICING)},
    "lab-operator-mig": {"gpu-cluster:gpu": json.dumps(GPU_OPERATOR_MIG)},
}

# variant -> every chart its plan installs
EXPECTED_CHARTS = {
    "lab": [versions.DCGM_EXPORTER_CHART, versions.NVIDIA_DEVICE_PLUGIN_CHART, versions.CALICO_CHART,
            versions.CALICO_CRDS_CHART],
    "lab-flannel": [versions.DCGM_EXPORTER_CHART, versions.FLANNEL_CHART, versions.NVIDIA_DEVICE_PLUGIN_CHART],
    "lab-operator-time-slicing": [versions.CALICO_CHART, versions.CALICO_CRDS_CHART, versions.GPU_OPERATOR_CHART],
    "lab-operator-mig": [versions.CALICO_CHART, versions.CALICO_CRDS_CHART, versions.GPU_OPERATOR_CHART],
}
# Pulumi.lab.yaml's shared storage (storage.provision) adds the NFS CSI driver to every variant.
for _charts in EXPECTED_CHARTS.values():
    _charts.append(versions.CSI_DRIVER_NFS_CHART)
    _charts.append(versions.KUBE_PROMETHEUS_STACK_CHART)  # monitoring.enabled defaults to true


def _lab_config(overrides: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config("lab")
    return {**values, **overrides}, secret_keys


@functools.cache
def _releases(variant: str) -> list[dict[str, Any]]:
    """Inputs of every Release in the lab plan of `variant` (see VARIANTS)."""
    overrides = VARIANTS[variant]
    plan = program.run("lab") if overrides is None else program.run("lab", config=_lab_config(overrides))
    return [r.inputs for r in plan.of_type(RELEASE_TYPE)]


def _release_params() -> list[Any]:
    return [
        pytest.param(variant, i, id=f"{variant}-{r.get('chart')}")
        for variant in VARIANTS
        for i, r in enumerate(_releases(variant))
    ]


# ------------------------------------------------------------------------------------------------
# the walker itself


def test_walker_catches_a_typo() -> None:
    upstream = {"podCidr": "10.244.0.0/16", "flannel": {"backend": "vxlan", "args": ["--ip-masq"]}}
    assert undeclared_paths({"podCidr": "10.0.0.0/16"}, upstream) == []
    assert undeclared_paths({"podCIDR": "10.0.0.0/16"}, upstream) == ["podCIDR: not declared in the chart's default values"]
    assert undeclared_paths({"flannel": {"backnd": "vxlan"}}, upstream) == [
        "flannel.backnd: not declared in the chart's default values"
    ]


def test_walker_catches_shape_changes() -> None:
    upstream = {"flannel": {"backend": "vxlan", "args": ["--ip-masq"], "image": {"tag": "v1"}}}
    assert undeclared_paths({"flannel": "vxlan"}, upstream)
    assert undeclared_paths({"flannel": {"backend": {"type": "vxlan"}}}, upstream)
    assert undeclared_paths({"flannel": {"args": "--ip-masq"}}, upstream)
    assert undeclared_paths({"flannel": {"image": "repo:v1"}}, upstream)


def test_walker_rules_for_free_form_and_lists() -> None:
    upstream = {"nodeSelector": {}, "key": None, "tolerations": [{"effect": "NoSchedule", "operator": "Exists"}]}
    # {} and null are free-form / untyped; list items are leaves by default
    assert undeclared_paths({"nodeSelector": {"a": {"b": 1}}, "key": {"x": 1}}, upstream) == []
    assert undeclared_paths({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, upstream) == []
    # ...unless items are walked explicitly
    assert undeclared_paths({"tolerations": [{"key": "k"}]}, upstream, walk_list_items=True) == [
        "tolerations[0].key: not declared in the chart's default values"
    ]


def test_walker_allow_list_covers_only_its_subtree() -> None:
    upstream = {"installation": {"enabled": True}}
    allowed = {"installation.calicoNetwork": "free-form"}
    assert undeclared_paths({"installation": {"calicoNetwork": {"anything": [1]}}}, upstream, allowed) == []
    # a typo next to an allowed subtree is still caught
    assert undeclared_paths({"installation": {"calicoNetwrok": {}}}, upstream, allowed) == [
        "installation.calicoNetwrok: not declared in the chart's default values"
    ]


def test_negative_flannel_typo_against_real_upstream(upstream_dir: Path) -> None:
    defaults = _defaults(upstream_dir, versions.FLANNEL_CHART)
    typo = {**cni.flannel_values(POD_CIDR)}
    typo["podCIDR"] = typo.pop("podCidr")
    assert undeclared_paths(typo, defaults, ALLOWED[versions.FLANNEL_CHART]) == [
        "podCIDR: not declared in the chart's default values"
    ]


# ------------------------------------------------------------------------------------------------
# our values against upstream defaults


def test_flannel_values_declared_upstream(upstream_dir: Path) -> None:
    defaults = _defaults(upstream_dir, versions.FLANNEL_CHART)
    assert undeclared_paths(cni.flannel_values(POD_CIDR), defaults, ALLOWED[versions.FLANNEL_CHART]) == []


def test_calico_values_declared_upstream(upstream_dir: Path) -> None:
    defaults = _defaults(upstream_dir, versions.CALICO_CHART)
    assert undeclared_paths(cni.calico_values(POD_CIDR), defaults, ALLOWED[versions.CALICO_CHART]) == []


@pytest.mark.parametrize("chart", sorted(ALLOWED))
def test_allow_list_entries_are_still_needed(upstream_dir: Path, chart: str) -> None:
    """An allowed path the chart now declares must go: the walker should check it."""
    defaults = _defaults(upstream_dir, chart)
    for dotted in ALLOWED[chart]:
        node: Any = defaults
        parts = dotted.split(".")
        for part in parts[:-1]:
            assert isinstance(node, dict) and part in node, f"{chart}: parent of {dotted} missing upstream"
            node = node[part]
        assert parts[-1] not in node, f"{chart}: {dotted} is now declared upstream; drop it from ALLOWED"


def test_calico_network_matches_commented_example(upstream_dir: Path) -> None:
    text = (upstream_dir / UPSTREAM_CHART_DIR[versions.CALICO_CHART] / "values.yaml").read_text()
    example, raw = _commented_block(text, "calicoNetwork")
    ours = cni.calico_values(POD_CIDR)["installation"]["calicoNetwork"]
    assert undeclared_paths(ours, example["calicoNetwork"], walk_list_items=True) == []
    # the example lists the allowed encapsulations in a comment after its own value
    m = re.search(r"encapsulation:.*#\s*(.+)$", raw, re.MULTILINE)
    assert m, "no encapsulation options in the commented example"
    options = {o.strip() for o in m.group(1).split(",")}
    assert "VXLANCrossSubnet" in options
    for pool in ours["ipPools"]:
        assert pool["encapsulation"] in options
        assert pool["cidr"] == str(POD_CIDR)


def test_calico_example_check_catches_a_typo(upstream_dir: Path) -> None:
    text = (upstream_dir / UPSTREAM_CHART_DIR[versions.CALICO_CHART] / "values.yaml").read_text()
    example, _ = _commented_block(text, "calicoNetwork")
    typo = {"ipPools": [{"cidr": "10.244.0.0/16", "encapsulaton": "VXLAN"}]}
    assert undeclared_paths(typo, example["calicoNetwork"], walk_list_items=True) == [
        "ipPools[0].encapsulaton: not declared in the chart's default values"
    ]


# ------------------------------------------------------------------------------------------------
# every Release the lab plan registers


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_plans_register_the_expected_charts(variant: str) -> None:
    assert sorted(r["chart"] for r in _releases(variant)) == sorted(EXPECTED_CHARTS[variant])


def test_gpu_releases_install_into_the_gpu_namespace() -> None:
    gpu_charts = {versions.NVIDIA_DEVICE_PLUGIN_CHART, versions.DCGM_EXPORTER_CHART, versions.GPU_OPERATOR_CHART}
    for variant in VARIANTS:
        for release in _releases(variant):
            if release["chart"] in gpu_charts:
                expected = "gpu-operator" if release["chart"] == versions.GPU_OPERATOR_CHART else "gpu-system"
                assert release["namespace"] == expected, (variant, release["chart"])


def test_device_plugin_chart_installs_only_gfd() -> None:
    """The device plugin itself is this program's typed DaemonSet: its chart brings only GFD (+NFD)."""
    (release,) = [r for r in _releases("lab") if r["chart"] == versions.NVIDIA_DEVICE_PLUGIN_CHART]
    assert release["values"]["devicePlugin"] == {"enabled": False}
    assert release["values"]["gfd"] == {"enabled": True}


def test_operator_releases_carry_the_sharing_mode() -> None:
    (ts,) = [r for r in _releases("lab-operator-time-slicing") if r["chart"] == versions.GPU_OPERATOR_CHART]
    config = ts["values"]["devicePlugin"]["config"]
    assert config["create"] is True and config["default"] in config["data"]
    assert yaml.safe_load(config["data"][config["default"]])["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}
    ]
    assert ts["values"]["migManager"]["enabled"] is False
    (mig,) = [r for r in _releases("lab-operator-mig") if r["chart"] == versions.GPU_OPERATOR_CHART]
    assert mig["values"]["mig"] == {"strategy": "mixed"}
    # The layout is a node label (tests/components/test_mig_layout.py): the CRD admits only all-disabled or "" here.
    assert mig["values"]["migManager"] == {"enabled": True, "config": {"default": "all-disabled"}}
    assert "config" not in mig["values"]["devicePlugin"]


@pytest.mark.parametrize(("variant", "index"), _release_params())
def test_release_values_declared_upstream(upstream_dir: Path, variant: str, index: int) -> None:
    release = _releases(variant)[index]
    chart = release["chart"]
    assert chart in UPSTREAM_CHART_DIR, f"no upstream data mapped for chart {chart!r}; add it to UPSTREAM_CHART_DIR"
    chart_dir = upstream_dir / UPSTREAM_CHART_DIR[chart]
    assert _load_yaml(chart_dir / "Chart.yaml")["name"] == chart
    values = release.get("values") or {}
    assert undeclared_paths(values, _defaults(upstream_dir, chart), ALLOWED.get(chart, {})) == []


@pytest.mark.parametrize(("variant", "index"), _release_params())
def test_release_pins_version_and_repo(variant: str, index: int) -> None:
    release = _releases(variant)[index]
    version, repo = PINNED[release["chart"]]
    assert release["version"] == version
    assert release["repositoryOpts"]["repo"] == repo


# ------------------------------------------------------------------------------------------------
# the GPU charts' values against upstream, for every GPU config the walker has not seen in a plan


@pytest.mark.parametrize("driver_on_host", [False, True])
@pytest.mark.parametrize(
    "gpu",
    [{}, {"stack": "operator"}, GPU_OPERATOR_TIME_SLICING, GPU_OPERATOR_MIG,
     {"stack": "operator", "sharing": {"mode": "mig", "migProfile": "all-balanced"}}],
    ids=["default", "operator", "operator-time-slicing", "operator-mig-mixed", "operator-mig-single"],
)
def test_operator_values_declared_upstream(upstream_dir: Path, gpu: dict[str, Any], driver_on_host: bool) -> None:
    values = gpu_stack.operator_values(GpuConfig.model_validate(gpu), driver_on_host)
    defaults = _defaults(upstream_dir, versions.GPU_OPERATOR_CHART)
    assert undeclared_paths(values, defaults, ALLOWED.get(versions.GPU_OPERATOR_CHART, {})) == []


def test_gfd_and_dcgm_exporter_values_declared_upstream(upstream_dir: Path) -> None:
    for chart, values in (
        (versions.NVIDIA_DEVICE_PLUGIN_CHART, gpu_stack.gfd_values()),
        (versions.DCGM_EXPORTER_CHART, gpu_stack.dcgm_exporter_values()),
    ):
        assert undeclared_paths(values, _defaults(upstream_dir, chart), ALLOWED.get(chart, {})) == [], chart


def test_subchart_keys_are_walked_against_the_subchart(upstream_dir: Path) -> None:
    # nfd is node-feature-discovery's alias in the device plugin chart; gc is declared only there
    defaults = _defaults(upstream_dir, versions.NVIDIA_DEVICE_PLUGIN_CHART)
    assert undeclared_paths({"nfd": {"gc": {"tolerations": []}}}, defaults) == []
    assert undeclared_paths({"nfd": {"gc": {"tolerationz": []}}}, defaults) == [
        "nfd.gc.tolerationz: not declared in the chart's default values"
    ]
    # the parent's own value wins over the subchart's default
    assert defaults["nfd"]["worker"]["tolerations"][-1]["key"] == "nvidia.com/gpu"


def test_negative_operator_typo_against_real_upstream(upstream_dir: Path) -> None:
    defaults = _defaults(upstream_dir, versions.GPU_OPERATOR_CHART)
    typo = gpu_stack.operator_values(GpuConfig.model_validate(GPU_OPERATOR_MIG), False)
    typo["migManager"]["confg"] = typo["migManager"].pop("config")
    assert undeclared_paths(typo, defaults, ALLOWED["gpu-operator"]) == [
        "migManager.confg: not declared in the chart's default values"]


# ------------------------------------------------------------------------------------------------
# pinned chart versions against upstream data


def test_flannel_chart_version_is_upstreams(upstream_dir: Path) -> None:
    chart = _load_yaml(upstream_dir / "flannel" / "Chart.yaml")
    assert chart["name"] == versions.FLANNEL_CHART
    assert versions.FLANNEL_CHART_VERSION == chart["version"] == "v0.28.9"
    defaults = _defaults(upstream_dir, versions.FLANNEL_CHART)
    assert defaults["flannel"]["image"]["tag"] == chart["appVersion"]


def test_calico_chart_version_is_upstream_folder(upstream_dir: Path) -> None:
    # calico's Chart.yaml always says v0.0 (set at publish time); the folder names the release.
    folder = upstream_dir / "calico" / versions.CALICO_CHART_VERSION
    assert folder.is_dir(), f"no upstream data for calico {versions.CALICO_CHART_VERSION}"
    assert versions.CALICO_CHART_VERSION == "v3.32.1"
    assert _load_yaml(folder / "Chart.yaml")["name"] == versions.CALICO_CHART
    defaults = _defaults(upstream_dir, versions.CALICO_CHART)
    assert defaults["calicoctl"]["tag"] == versions.CALICO_CHART_VERSION


@pytest.mark.parametrize("kind", list(CniKind))
def test_every_cni_maps_to_upstream_data(upstream_dir: Path, kind: CniKind) -> None:
    _, chart, version, _, values = cni._CHARTS[kind]  # noqa: SLF001 (the table the component uses)
    assert chart in UPSTREAM_CHART_DIR
    assert PINNED[chart][0] == version
    assert undeclared_paths(values(POD_CIDR), _defaults(upstream_dir, chart), ALLOWED.get(chart, {})) == []


@pytest.mark.parametrize(
    ("chart", "pinned", "expected"),
    [
        (versions.NVIDIA_DEVICE_PLUGIN_CHART, versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION, "0.20.0"),
        (versions.DCGM_EXPORTER_CHART, versions.DCGM_EXPORTER_CHART_VERSION, "4.8.2"),
    ],
)
def test_gpu_chart_version_is_upstreams(upstream_dir: Path, chart: str, pinned: str, expected: str) -> None:
    meta = _load_yaml(upstream_dir / UPSTREAM_CHART_DIR[chart] / "Chart.yaml")
    assert meta["name"] == chart
    assert pinned == str(meta["version"]) == expected


def test_device_plugin_chart_matches_pinned_image(upstream_dir: Path) -> None:
    # the typed DaemonSet's image and the chart (GFD) come from the same device plugin release
    meta = _load_yaml(upstream_dir / UPSTREAM_CHART_DIR[versions.NVIDIA_DEVICE_PLUGIN_CHART] / "Chart.yaml")
    assert versions.NVIDIA_DEVICE_PLUGIN_IMAGE.endswith(f":v{meta['appVersion']}")


def test_gpu_operator_chart_version_is_upstream_tag(upstream_dir: Path) -> None:
    # gpu-operator's Chart.yaml on main says v1.0.0-devel (versions are injected at release);
    # SOURCES.md records that the copied deployments/ is identical to the pinned release tag.
    meta = _load_yaml(upstream_dir / UPSTREAM_CHART_DIR[versions.GPU_OPERATOR_CHART] / "Chart.yaml")
    assert meta["name"] == versions.GPU_OPERATOR_CHART
    assert meta["version"] == "v1.0.0-devel"
    assert versions.GPU_OPERATOR_CHART_VERSION == "v26.7.0"
    sources = (upstream_dir / "SOURCES.md").read_text()
    assert f"`deployments/` identical to tag {versions.GPU_OPERATOR_CHART_VERSION}" in sources
    assert re.search(
        rf"gpu-operator: .*`deployments/` at HEAD is identical to tag {re.escape(versions.GPU_OPERATOR_CHART_VERSION)}\b",
        sources,
    ), "SOURCES.md no longer says gpu-operator's deployments/ is the pinned tag"
    # the driver the operator installs is the chart's default at that tag
    defaults = _defaults(upstream_dir, versions.GPU_OPERATOR_CHART)
    assert defaults["driver"]["version"] == versions.GPU_OPERATOR_DRIVER_VERSION
