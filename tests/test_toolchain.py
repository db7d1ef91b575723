"""The pinned toolchain (tools/toolchain/, components/toolchain_versions.py): each component's Go
module pins the version the versions module names, and each binary that build.sh made reports that
version when asked the way its upstream documents (which proves the version ldflags took effect:
without them Kubernetes says v0.0.0-master)."""

from __future__ import annotations

import re
import select
import shutil
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
    "pulumi": (("version",), lambda v: v),
}


@pytest.mark.parametrize(
    ("component", "binary"),
    [(c, b) for c in tv.COMPONENTS for b in c.binaries if b in VERSION_CHECKS],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_built_binary_reports_the_pinned_version(component, binary):
    args, expected = VERSION_CHECKS[binary]
    output = _version_output(toolchain_binary(component, binary), *args)
    assert expected(component.version) in output


# Binaries with no version flag: the language host and the provider tell theirs over gRPC only
# (the provider: test_provider_reports_the_pinned_version_over_grpc), and the host's exec shim is a
# Python script from the same module (checked by test_built_binary_is_built_from_the_pinned_module).
# The Kueue manager logs its version when it starts (tests/e2e/test_kueue_real.py reads it there).
# gofakes3's server has no version flag; its build info names the module version (below).
NO_VERSION_FLAG = {"pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-kubernetes", "kueue",
                   "gofakes3"}


def test_every_binary_has_a_version_check():
    assert {b for c in tv.COMPONENTS for b in c.binaries} <= set(VERSION_CHECKS) | NO_VERSION_FLAG


@pytest.mark.parametrize(
    ("component", "binary"),
    [(c, b) for c in tv.COMPONENTS for b in c.binaries],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_built_binary_is_built_from_the_pinned_module(component, binary):
    """Go's build info in each binary (`go version -m`) names the module version it was built from."""
    path = toolchain_binary(component, binary)
    if binary == "pulumi-language-python-exec":  # the host's Python shim, copied from the module
        assert path.read_text().startswith("#!/usr/bin/env python")
        return
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not on PATH (make toolchain needs it too)")
    info = subprocess.run([go, "version", "-m", str(path)], capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)
    assert info.returncode == 0, info.stderr
    # The main package's module ("mod"): one the component's go.mod requires, at the pinned version
    # (etcd's three binaries come from three modules of one release). pulumi-kubernetes' main package
    # is built from a copy (build.sh prepare_source: its embedded schema is generated first), so its
    # main module is the toolchain's own and the provider module is a dependency ("dep") at the pin.
    main_module, main_version = re.findall(r"^\s+mod\s+(\S+)\s+(\S+)", info.stdout, re.MULTILINE)[0]
    if main_module == f"gpu-cluster.local/toolchain/{component.name}":
        deps = dict(re.findall(r"^\s+dep\s+(\S+)\s+(\S+)", info.stdout, re.MULTILINE))
        assert deps.get(component.module) == component.module_version
        return
    assert main_version == component.module_version
    assert main_module == component.module or f"{main_module} {main_version}" in _go_mod(component)


def test_pulumi_sdk_is_the_one_the_program_runs_with():
    """The CLI is chosen for the SDK in requirements.txt: a new SDK pin must revisit it."""
    requirements = (Path(__file__).resolve().parent.parent / "requirements.txt").read_text()
    assert re.search(rf"^pulumi=={re.escape(tv.PULUMI_SDK)}$", requirements, re.MULTILINE)


def test_provider_reports_the_pinned_version_over_grpc():
    """A provider plugin prints its port and answers GetPluginInfo with the version the build's
    ldflags set (what the engine compares with the SDK's request: docs/toolchain.md)."""
    grpc = pytest.importorskip("grpc")
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import provider_pb2_grpc

    path = toolchain_binary(tv.PULUMI_KUBERNETES, "pulumi-resource-kubernetes")
    # The engine's address is the one argument; the plugin dials it lazily, for logs only.
    plugin = subprocess.Popen([str(path), "127.0.0.1:1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert plugin.stdout is not None
        printed, _, _ = select.select([plugin.stdout], [], [], TIMEOUT)
        assert printed, f"the plugin printed no port within {TIMEOUT} s"
        port = int(plugin.stdout.readline().strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = provider_pb2_grpc.ResourceProviderStub(channel).GetPluginInfo(empty_pb2.Empty(), timeout=TIMEOUT)
        assert info.version == tv.PULUMI_KUBERNETES.version.removeprefix("v")
    finally:
        plugin.terminate()
        plugin.wait(TIMEOUT)
