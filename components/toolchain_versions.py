"""The real components the tests run, built from their published Go modules: each one's version and
where it comes from. versions.py is the home of every version the program installs; this module
holds only what the toolchain adds, and takes the rest from there (Kubernetes is the lab's default
patch release, etcd the one kubeadm of that release runs).

Each component is a small Go module under tools/toolchain/<name>/ whose go.mod requires the
upstream module at `module_version` (a test keeps the two equal); tools/toolchain/build.sh builds it
into <cache>/<name>-<version>/bin (docs/toolchain.md). `python -m components.toolchain_versions`
prints one `name version` line per component for that script.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from components.versions import ETCD_KUBEADM, KUBERNETES_DEFAULT, KUEUE_IMAGE_TAG

KUBERNETES_MINOR = ".".join(KUBERNETES_DEFAULT.split(".")[:2])


@dataclass(frozen=True)
class ToolchainComponent:
    name: str  # tools/toolchain/<name>/ and the cache folder's prefix
    version: str  # the version the binaries report
    module: str  # the upstream Go module whose main packages are built
    module_version: str  # what tools/toolchain/<name>/go.mod requires (tag or pseudo-version)
    binaries: tuple[str, ...]
    source: str  # where the version comes from, and what stands in where it is not served


KUBERNETES = ToolchainComponent(
    name="kubernetes",
    version=f"v{KUBERNETES_DEFAULT}",
    module="k8s.io/kubernetes",
    module_version=f"v{KUBERNETES_DEFAULT}",
    binaries=("kubeadm", "kube-apiserver", "kube-controller-manager", "kube-scheduler"),
    source="versions.KUBERNETES_DEFAULT; the 29 k8s.io staging modules replaced by their v0.x of the same patch",
)

# kubeadm's DefaultEtcdVersion / SupportedEtcdVersion for the minor (read in the v1.34.2 module:
# cmd/kubeadm/app/constants/constants.go says 3.6.5-0 for 1.34), the image tag without its "-0".
ETCD = ToolchainComponent(
    name="etcd",
    version="v" + ETCD_KUBEADM[KUBERNETES_MINOR].split("-")[0],
    module="go.etcd.io/etcd/server/v3",
    module_version="v" + ETCD_KUBEADM[KUBERNETES_MINOR].split("-")[0],
    binaries=("etcd", "etcdctl", "etcdutl"),
    source="versions.ETCD_KUBEADM for the default minor: the etcd kubeadm runs on the lab clusters",
)

# Nodes and pod lifecycles without kubelets: the newest release (needs Go 1.26; k8s.io v0.36.1).
KWOK = ToolchainComponent(
    name="kwok",
    version="v0.8.0",
    module="sigs.k8s.io/kwok",
    module_version="v0.8.0",
    binaries=("kwok", "kwokctl"),
    source="sigs.k8s.io/kwok's newest release; its default Kubernetes (consts.KubeVersion) set to ours",
)

# The Pulumi CLI of the SDK in requirements.txt (pulumi==3.272.0). The proxy does not serve
# github.com/pulumi/pulumi/pkg/v3 v3.272.0 (403, "not available"); v3.274.0 is the nearest it serves
# (then v3.260.0 below). A CLI reads programs of older SDKs.
PULUMI_SDK = "3.272.0"
PULUMI = ToolchainComponent(
    name="pulumi",
    version="v3.274.0",
    module="github.com/pulumi/pulumi/pkg/v3",
    module_version="v3.274.0",
    binaries=("pulumi",),
    source=f"the Python SDK's {PULUMI_SDK}, not served; the nearest served pkg/v3 (v3.274.0)",
)

# The Python language host: a stand-in. Since pulumi#13819 (2023-08-31) it is its own module,
# github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3, which has no tags and which the
# proxy refuses (403 for the version list, @latest and v3.259.0's pseudo-version). Before, it was a
# package of sdk/v3; v3.68.0 (2023-05) is the newest served sdk/v3 that has it. Whether it runs the
# 3.272.0 SDK's programs under the 3.274.0 CLI is for `pulumi up` to show.
PULUMI_LANGUAGE_PYTHON = ToolchainComponent(
    name="pulumi-language-python",
    version="v3.68.0",
    module="github.com/pulumi/pulumi/sdk/v3",
    module_version="v3.68.0",
    binaries=("pulumi-language-python", "pulumi-language-python-exec"),
    source="stand-in: the newest served sdk/v3 that still holds the host; its own module is not served",
)


# The Kubernetes provider of the Python SDK in requirements.txt (pulumi-kubernetes==4.34.2). Its
# module has no provider/ tags, so only pseudo-versions name it, and the proxy serves two: tag
# v4.18.1's and tag v4.25.0's commits; it refuses every release commit tried from v4.26.0 to v4.34.0
# (docs/toolchain.md, "Providers: what the proxy serves"). v4.25.0 is the nearest; its whole module
# graph resolves (tools/toolchain/pulumi-kubernetes/go.mod and go.sum). The engine takes a provider
# found on PATH whatever version the SDK asks for.
PULUMI_KUBERNETES_SDK = "4.34.2"
PULUMI_KUBERNETES = ToolchainComponent(
    name="pulumi-kubernetes",
    version="v4.25.0",
    module="github.com/pulumi/pulumi-kubernetes/provider/v4",
    module_version="v4.0.0-20260115033456-f47bc2d6f199",
    binaries=("pulumi-resource-kubernetes",),
    source=f"the Python SDK's {PULUMI_KUBERNETES_SDK}, not served; tag v4.25.0's commit, the nearest served",
)

# The Kueue manager the program installs (its image tag, versions.KUEUE_IMAGE_TAG), built from the
# module at that tag: the e2e tier runs it against the control plane (e2e/kueue.py). v0.19.2 needs
# sigs.k8s.io/scheduler-library v0.1.0-alpha1 (served by the proxy as of 2026-11-28); the cold
# build is the longest here (docs/toolchain.md).
KUEUE = ToolchainComponent(
    name="kueue",
    version=KUEUE_IMAGE_TAG,
    module="sigs.k8s.io/kueue",
    module_version=KUEUE_IMAGE_TAG,
    binaries=("kueue",),
    source="versions.KUEUE_IMAGE_TAG: the manager image the program installs, from its own module",
)

# An S3-compatible server for the tests of etcdBackup.s3 (upload, list, retention, download of the
# encrypted snapshots): a real server speaking S3's REST API with SigV4, built from its module. MinIO
# is not served by the proxy (docs/toolchain.md); gofakes3's tag v1.2.0 is. Only a test runs it, on
# 127.0.0.1 (its -host default, :9000, would bind every interface).
GOFAKES3 = ToolchainComponent(
    name="gofakes3",
    version="v1.2.0",
    module="github.com/johannesboyne/gofakes3",
    module_version="v1.2.0",
    binaries=("gofakes3",),
    source="github.com/johannesboyne/gofakes3's tag v1.2.0: a test server, not installed on any host",
)

COMPONENTS = (KUBERNETES, ETCD, KWOK, PULUMI, PULUMI_LANGUAGE_PYTHON, PULUMI_KUBERNETES, KUEUE, GOFAKES3)


def cache_root() -> Path:
    """Where build.sh puts the binaries: outside the checkout, kept across runs (GPU_CLUSTER_TOOLCHAIN)."""
    configured = os.environ.get("GPU_CLUSTER_TOOLCHAIN")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "gpu-cluster" / "toolchain"


def binary_path(component: ToolchainComponent, binary: str) -> Path:
    return cache_root() / f"{component.name}-{component.version}" / "bin" / binary


if __name__ == "__main__":
    for component in COMPONENTS:
        print(component.name, component.version)
