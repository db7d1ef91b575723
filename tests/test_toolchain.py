"""The pinned toolchain (tools/toolchain/, components/toolchain_versions.py): each component's Go
module pins the version the versions module names, and each binary that build.sh made reports that
version when asked the way its upstream documents (which proves the version ldflags took effect:
without them Kubernetes says v0.0.0-master)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from components import toolchain_versions as tv
from tests.toolchain import toolchain_binary

TOOLCHAIN_DIR = Path(__file__).resolve().parent.parent / "tools" / "toolchain"
TIMEOUT = 60  # seconds per --version


def _go_mod(component: tv.ToolchainComponent) -> str:
    return (TOOLCHAIN_DIR / component.name / "go.mod").read_text()


@pytest.mark.parametrize("component", tv.COMPONENTS, ids=lambda c: c.name)
def test_go_mod_requires_the_pinned_module_version(component):
    text = _go_mod(component)
    required = dict(re.findall(r"^\s*(?:require\s+)?(\S+) (v\S+)(?: // indirect)?$", text, re.MULTILINE))
    assert required.get(component.module) == component.module_version
    assert (TOOLCHAIN_DIR / component.name / "go.sum").is_file(), "go.sum pins every module the build reads"
    tools = set(re.findall(r"^\s*(?:tool\s+)?(\S+/cmd/\S+|go\.etcd\.io/etcd/\S+/v3)$", text, re.MULTILINE))
    assert tools, "the main packages built are the go.mod's tool directives"


def test_kubernetes_staging_modules_are_replaced_by_the_same_patch():
    """k8s.io/kubernetes requires its staging modules at v0.0.0 (never published): each is replaced
    by v0.<minor>.<patch>, the staging release cut with this Kubernetes release."""
    text = _go_mod(tv.KUBERNETES)
    replaces = re.findall(r"^\s*(k8s\.io/\S+) => (k8s\.io/\S+) (v\S+)$", text, re.MULTILINE)
    assert len(replaces) >= 29
    staging = "v0." + tv.KUBERNETES.version.removeprefix("v1.")
    assert all(old == new and version == staging for old, new, version in replaces)


def _version_output(path: Path, *args: str) -> str:
    result = subprocess.run([str(path), *args], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


# binary -> (arguments, what the output must contain, given the component's version)
VERSION_CHECKS = {
    "kubeadm": (("version", "-o", "short"), lambda v: v),
    "kube-apiserver": (("--version",), lambda v: f"Kubernetes {v}"),
    "kube-controller-manager": (("--version",), lambda v: f"Kubernetes {v}"),
    "kube-scheduler": (("--version",), lambda v: f"Kubernetes {v}"),
    "etcd": (("--version",), lambda v: f"etcd Version: {v.removeprefix('v')}"),
    "etcdctl": (("version",), lambda v: f"etcdctl version: {v.removeprefix('v')}"),
    "etcdutl": (("version",), lambda v: f"etcdutl version: {v.removeprefix('v')}"),
    "kwok": (("--version",), lambda v: v.removeprefix("v")),
    "kwokctl": (("--version",), lambda v: v.removeprefix("v")),
}


@pytest.mark.parametrize(
    ("component", "binary"),
    [(c, b) for c in tv.COMPONENTS for b in c.binaries],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_built_binary_reports_the_pinned_version(component, binary):
    args, expected = VERSION_CHECKS[binary]
    output = _version_output(toolchain_binary(component, binary), *args)
    assert expected(component.version) in output


def test_every_binary_has_a_version_check():
    assert {b for c in tv.COMPONENTS for b in c.binaries} <= set(VERSION_CHECKS)
