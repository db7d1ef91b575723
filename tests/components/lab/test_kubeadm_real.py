"""The lab stacks' kubeadm configs, read by the real kubeadm of the pinned Kubernetes (built from
k8s.io/kubernetes by tools/toolchain/build.sh; tests/toolchain.py finds it):

  - `kubeadm config validate` on every kubeadm config the program hands a host of the committed lab
    and lab-ha stacks: the first control plane's init file (Init-, Cluster- and KubeletConfiguration,
    as render writes it to out/<stack>/hosts/<host>/control-plane-init.stdin) and each other host's
    join file (made at `up` from the token, the CA pin and the certificate key, which are secrets, so
    here with values of their form);
  - `kubeadm init --dry-run` on the init file, with only the preflight checks ignored that need a
    real host (DRY_RUN_IGNORED, each with why) and the flags the init script passes; kubeadm runs in
    a network namespace of its own (loopback only) and writes
    what it would install into a temporary folder (KUBEADM_INIT_DRYRUN_DIR), and the test checks
    that this machine's /etc/kubernetes and /var/lib were left alone. What kubeadm would install
    is then held to the program's intent: the API server's flags and mounts, the etcd and pause
    images the program pins for this minor (versions.py), the kubelet settings.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from components import versions
from components.lab import kubeadm
from components.toolchain_versions import KUBERNETES, KUBERNETES_MINOR
from config.lab import Role
from render import program
from render.__main__ import host_steps
from stacks.lab import kubeadm_settings
from tests.toolchain import toolchain_binary

STACKS = ("lab", "lab-ha")
TIMEOUT = 120  # seconds per kubeadm run
INIT_STEP = "control-plane-init"
# Values of the form the join's secrets take (node_join.py makes the real ones at `up`).
TOKEN = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "0f" * 32
CERT_KEY = "a1" * 32

# The preflight checks of `kubeadm init` that fail on a test machine because it is not a lab host,
# each with why; everything else kubeadm checks must pass. Each is a fact the lab's own host steps
# establish before init runs (components/lab/node_prep.py), not something the config decides.
DRY_RUN_IGNORED = {
    "KubeletVersion": "no kubelet on a test machine; the kube-packages step installs the pinned one",
    "FileContent--proc-sys-net-ipv4-ip_forward": "the kernel step's sysctl sets it on lab hosts",
    "SystemVerification": "kernel config and cgroups of the test machine, not of an Ubuntu 22.04 lab host",
}
# The paths a real `kubeadm init` writes: the dry run must leave them as they were.
HOST_PATHS = ("/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd")

@functools.cache
def _plan(stack: str) -> program.Plan:
    return program.run(stack, config=program.stack_config(stack))


def _init_command(stack: str) -> tuple[str, list[str]]:
    """The first control plane's init file and the flags its host script passes to `kubeadm init`."""
    plan = _plan(stack)
    step = host_steps(plan)[plan.config.control_planes[0].name][INIT_STEP]
    script = step["create"].replace("\\\n", " ")
    match = re.search(r"kubeadm init --config \S+ ((?:--[a-z-]+ +)*)", script)
    assert match, "the init step runs `kubeadm init --config FILE [flags]`"
    return step["stdin"], match.group(1).split()


def _configs(stack: str) -> dict[str, str]:
    """Every kubeadm config file the stack hands a host: {what it is: its text}."""
    plan = _plan(stack)
    cfg = plan.config
    first = cfg.control_planes[0]
    files = {f"{first.name} init": _init_command(stack)[0]}
    cluster = kubeadm_settings(cfg)
    for h in cfg.hosts:
        if h is not first:
            key = CERT_KEY if h.role is Role.CONTROL_PLANE else None
            files[f"{h.name} join"] = kubeadm.join_config(cluster, h, TOKEN, CA_HASH, key)
    return files


@pytest.fixture(scope="module")
def kubeadm_binary() -> Path:
    return toolchain_binary(KUBERNETES, "kubeadm")


def _run(args: list[str], timeout: int = TIMEOUT, **env_extra: str) -> subprocess.CompletedProcess[str]:
    """kubeadm in a network namespace of its own (loopback only): its preflight looks the node name
    up in DNS, and nothing it does may reach beyond this machine."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8", **env_extra}
    return subprocess.run(["unshare", "--net", "--", *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env=env)


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubeadm_config_passes_kubeadm_config_validate(stack, kubeadm_binary, tmp_path):
    files = _configs(stack)
    assert any(name.endswith("join") for name in files), "a lab stack joins at least one host"
    refused = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(" ", "-") + ".yaml")
        path.write_text(text)
        result = _run([str(kubeadm_binary), "config", "validate", "--config", str(path)])
        # kubeadm says "ok" and nothing else; a warning (a deprecated field) is a finding too.
        if result.returncode != 0 or result.stdout.strip() != "ok" or result.stderr.strip():
            refused[name] = (result.stdout + result.stderr).strip()
    assert refused == {}


def test_kubeadm_config_validate_refuses_a_broken_config(kubeadm_binary, tmp_path):
    """The check can fail: the init file with its pod subnet made invalid is refused, naming it."""
    text = _configs("lab")["cp-1 init"]
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace("podSubnet: 10.244.0.0/16", "podSubnet: 10.244.0.0/33"))
    assert broken.read_text() != text
    result = _run([str(kubeadm_binary), "config", "validate", "--config", str(broken)])
    assert result.returncode != 0
    assert "podSubnet" in result.stderr or "podSubnet" in result.stdout


def _host_paths() -> dict[str, float | None]:
    return {p: (Path(p).stat().st_mtime if Path(p).exists() else None) for p in HOST_PATHS}


def _dry_run(kubeadm_binary: Path, stack: str, tmp_path: Path, ignored: list[str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    text, flags = _init_command(stack)
    tmp_path.mkdir()
    config = tmp_path / "kubeadm-init.yaml"
    config.write_text(text)
    out = tmp_path / "dry-run"
    args = [str(kubeadm_binary), "init", "--dry-run", "--config", str(config), *flags]
    if ignored:
        args.append("--ignore-preflight-errors=" + ",".join(ignored))
    before = _host_paths()
    result = _run(args, KUBEADM_INIT_DRYRUN_DIR=str(out))
    assert _host_paths() == before, "the dry run changed this machine's kubeadm paths"
    return result, out


def _flags(manifest: dict) -> dict[str, str]:
    (container,) = manifest["spec"]["containers"]
    return dict(arg[2:].split("=", 1) for arg in container["command"][1:])


@pytest.mark.parametrize("stack", STACKS)
def test_kubeadm_init_dry_run_passes_preflight_and_installs_what_the_program_means(stack, kubeadm_binary, tmp_path):
    unignored, _ = _dry_run(kubeadm_binary, stack, tmp_path / "plain", [])
    errors = set(re.findall(r"\[ERROR ([^\]]+)\]", unignored.stdout + unignored.stderr))
    assert errors <= set(DRY_RUN_IGNORED), f"preflight errors that are not host facts: {errors - set(DRY_RUN_IGNORED)}"

    result, out = _dry_run(kubeadm_binary, stack, tmp_path / "ignored", sorted(DRY_RUN_IGNORED))
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    init, cluster, kubelet = yaml.safe_load_all(_init_command(stack)[0])

    api_server = yaml.safe_load((out / "kube-apiserver.yaml").read_text())
    flags = _flags(api_server)
    for arg in cluster["apiServer"]["extraArgs"]:
        assert flags[arg["name"]] == arg["value"], arg
    assert flags["advertise-address"] == init["localAPIEndpoint"]["advertiseAddress"]
    assert flags["service-cluster-ip-range"] == cluster["networking"]["serviceSubnet"]
    (container,) = api_server["spec"]["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for volume in cluster["apiServer"]["extraVolumes"]:
        assert mounts[volume["mountPath"]].get("readOnly", False) == volume["readOnly"], volume
    # Every file the API server's flags name under a mount is inside one of the mounted folders.
    for name in ("audit-policy-file", "encryption-provider-config"):
        assert any(flags[name].startswith(path + "/") for path in mounts), name

    controller_manager = _flags(yaml.safe_load((out / "kube-controller-manager.yaml").read_text()))
    assert controller_manager["cluster-cidr"] == cluster["networking"]["podSubnet"]
    assert controller_manager["allocate-node-cidrs"] == "true"

    # The etcd kubeadm runs is the one the program's backups and restores are pinned to.
    etcd = yaml.safe_load((out / "etcd.yaml").read_text())
    minor = ".".join(cluster["kubernetesVersion"].lstrip("v").split(".")[:2])
    assert etcd["spec"]["containers"][0]["image"] == f"{versions.ETCD_IMAGE_REPOSITORY}:{versions.ETCD_KUBEADM[minor]}"
    # etcd serves /metrics on the host's addresses, as the pod the chart's etcd Service selects
    # (component=etcd, on the host network: its address is the node's).
    assert _flags(etcd)["listen-metrics-urls"] == kubeadm.ETCD_METRICS_URL
    assert etcd["metadata"]["labels"]["component"] == "etcd" and etcd["spec"]["hostNetwork"] is True

    # The kubelet configuration kubeadm writes keeps every setting the program gave it.
    written = yaml.safe_load((out / "config.yaml").read_text())
    for key, value in kubelet.items():
        if key == "readOnlyPort" and value == 0:  # 0 is v1beta1's default, which kubeadm omits
            assert written.get(key, 0) == 0
            continue
        assert _contains(written[key], value), key


def _contains(have: object, want: object) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _contains(have[k], v) for k, v in want.items())
    return have == want


def test_kubeadm_expects_the_pause_and_etcd_images_the_program_pins(kubeadm_binary, tmp_path):
    """containerd's sandbox image (versions.PAUSE_IMAGE) and the etcd the backups use
    (versions.ETCD_KUBEADM) are what this kubeadm pulls for its minor."""
    text, _ = _init_command("lab")
    config = tmp_path / "kubeadm-init.yaml"
    config.write_text(text)
    result = _run([str(kubeadm_binary), "config", "images", "list", "--config", str(config)])
    assert result.returncode == 0, result.stderr
    images = result.stdout.split()
    minor = KUBERNETES_MINOR
    assert versions.PAUSE_IMAGE[minor] in images
    assert f"{versions.ETCD_IMAGE_REPOSITORY}:{versions.ETCD_KUBEADM[minor]}" in images
