"""protectKernelDefaults (components/lab/kubeadm.py): the kubelet refuses to start while a kernel
setting it checks differs, so node prep must set exactly those first.

  - the list is the kubelet's own: read from the pinned Kubernetes source in Go's module cache
    (setupKernelTunables in pkg/kubelet/cm/container_manager_linux.go; the names and values in
    k8s.io/component-helpers node/util/sysctl/sysctl.go), which `make toolchain` downloads to build
    the e2e control plane (tools/toolchain/kubernetes/go.mod);
  - the kernel step writes exactly those settings (beside the networking ones) on a simulated host,
    and runs before the kubelet is installed;
  - the kubelet configuration every node gets carries protectKernelDefaults (the real kubeadm reads
    it: test_kubeadm_real.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from components.lab import kubeadm, scripts
from components.toolchain_versions import KUBERNETES
from render import program
from stacks.lab import kubeadm_settings
from tests.conftest import lab_config

SYSCTL_FILE = "/etc/sysctl.d/99-gpu-cluster-k8s.conf"
NETWORKING = {"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.ipv4.ip_forward"}
# What the pinned source is: k8s.io/kubernetes at KUBERNETES.module_version, and the staging module
# component-helpers at the same patch (v1.34.2 -> v0.34.2), as tools/toolchain/kubernetes/go.mod pins it.
HELPERS = "k8s.io/component-helpers@v0" + KUBERNETES.module_version.removeprefix("v1")


def _module_cache() -> Path:
    gomodcache = os.environ.get("GOMODCACHE")
    if not gomodcache and shutil.which("go"):
        gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, timeout=60,
                                    check=False).stdout.strip()
    cache = Path(gomodcache or Path.home() / "go" / "pkg" / "mod")
    kubelet = cache / f"{KUBERNETES.module}@{KUBERNETES.module_version}"
    if not (kubelet.is_dir() and (cache / HELPERS).is_dir()):
        pytest.skip(f"{kubelet} or {cache / HELPERS} is not in Go's module cache: run `make toolchain` "
                    "(tools/toolchain/build.sh kubernetes downloads them)")
    return cache


def _kubelets_tunables(cache: Path) -> dict[str, int]:
    manager = (cache / f"{KUBERNETES.module}@{KUBERNETES.module_version}" /
               "pkg/kubelet/cm/container_manager_linux.go").read_text()
    body = manager.split("func setupKernelTunables(", 1)[1].split("desiredState := map[string]int{", 1)[1]
    pairs = re.findall(r"utilsysctl\.(\w+):\s*utilsysctl\.(\w+),", body.split("}", 1)[0])
    constants = (cache / HELPERS / "node/util/sysctl/sysctl.go").read_text()
    values: dict[str, str | int] = {}
    for name, expr in re.findall(r"^\t(\w+)\s*=\s*(.+?)\s*$", constants, flags=re.M):
        if expr.startswith('"'):
            values[name] = expr.strip('"')
        else:  # an integer, or a product of constants defined above (RootMaxBytesSetting)
            factors = [int(values[f]) if f in values else int(f) for f in (t.strip() for t in expr.split("*"))]
            product = 1
            for f in factors:
                product *= f
            values[name] = product
    assert len(pairs) >= 6, pairs
    return {str(values[key]).replace("/", "."): int(values[value]) for key, value in pairs}


def test_the_list_is_the_kubelets_own() -> None:
    assert dict(kubeadm.KUBELET_KERNEL_TUNABLES) == _kubelets_tunables(_module_cache())


def test_node_prep_writes_exactly_those(tmp_path: Path) -> None:
    from tests.hostsim import HostSim, isolation_unavailable

    why = isolation_unavailable()
    if why is not None:
        pytest.skip(f"isolated host runs: {why}")
    sim = HostSim(tmp_path)
    result = sim.run(scripts.as_root(scripts.kernel_prep()))
    assert result.returncode == 0, result.stderr
    written = {}
    for line in sim.path(SYSCTL_FILE).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = (part.strip() for part in line.split("=", 1))
            written[key] = int(value)
    assert set(written) - NETWORKING == {name for name, _ in kubeadm.KUBELET_KERNEL_TUNABLES}
    assert {k: v for k, v in written.items() if k not in NETWORKING} == dict(kubeadm.KUBELET_KERNEL_TUNABLES)
    assert ["sysctl", "--system"] in sim.calls()  # applied now, not only at the next boot


def test_the_kernel_step_runs_before_the_kubelet_is_installed() -> None:
    commands = {r.urn: r for r in program.run("lab").of_type("command:remote:Command")}
    by_name = {r.name: r for r in commands.values()}

    def waits_for(urn: str) -> set[str]:
        seen, todo = set(), [urn]
        while todo:
            for dep in commands[todo.pop()].dependencies:
                if dep in commands and dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    hosts = [name.removesuffix("-kernel") for name in by_name if name.endswith("-kernel")]
    assert hosts
    for host in hosts:
        assert by_name[f"{host}-kernel"].urn in waits_for(by_name[f"{host}-kube-packages"].urn), host


def test_every_node_gets_protect_kernel_defaults() -> None:
    cfg = lab_config()
    _, _, kubelet = yaml.safe_load_all(kubeadm.init_config(kubeadm_settings(cfg), cfg.control_planes[0]))
    assert kubelet["kind"] == "KubeletConfiguration" and kubelet["protectKernelDefaults"] is True
