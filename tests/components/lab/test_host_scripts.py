"""The bash the lab hosts run (components/lab/host_steps/*.sh as scripts.py fills them), checked without a lab:

  - shellcheck on every script the module can produce, and on the as_root() wrapper (the files as
    they are: test_host_step_files.py);
  - the wrapper hands the script and stdin through unchanged (bash and dash login shells);
  - node prep run twice in an isolated root (tests/hostsim.py) changes nothing the second time,
    installs the pinned versions, and the delete scripts undo it;
  - the NVIDIA driver's reboot path and driver_ready's GPU count check;
  - the RDMA step of GPU hosts with network.roce (a simulated /sys with the NIC, a stand-in `rdma`):
    exclusive mode at once or by a reboot, idempotent, NIC mismatches named, undone by delete;
  - the join script hands kubeadm the complete config it receives (token, CA hash, certificate
    key), refuses one without them and removes it afterwards;
  - readiness runs on the host with the kubelet's credentials; the drain of removed hosts runs
    once on the control plane; the CA hash is the real openssl's on a real CA, checked against a
    hash computed here from the certificate's DER;
  - no rendered command text of the lab stack carries a secret.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from components import versions
from components.lab import gone_hosts, kubeadm, kubelet_config, nfs_storage, scripts
from config import LabStack
from config.lab import Host, Role
from render import program
from stacks.lab import kubeadm_settings
from tests.components.lab.certificate_cases import certificate_cases
from tests.components.lab.etcd_backup_cases import etcd_backup_cases
from tests.components.lab.etcd_defrag_cases import etcd_defrag_cases
from tests.conftest import SEED_002_ROCE, host, lab_config
from tests.hostsim import TIMEOUT, HostSim, isolation_unavailable, snapshot

DRIVER_EXACT = "570.172.08-0ubuntu0.22.04.1"
FSTAB = (
    "# /etc/fstab: static file system information.\n"
    "UUID=0b6e5b7a-1d2c-4e8f-9a3b-5c6d7e8f9a0b / ext4 defaults 0 1\n"
    "/swap.img none swap sw 0 0\n"
    "#/old.swap none swap sw 0 0\n"
)
JOIN_CONFIG = "/etc/gpu-cluster/kubeadm-join.yaml"
# (host, interface, PCI address, RDMA device, driver) as NodePrep passes network.roce (seed 002's E810).
ROCE_NIC = ("gpu-1", SEED_002_ROCE["interface"], SEED_002_ROCE["pciAddress"], SEED_002_ROCE["hca"],
            SEED_002_ROCE["driver"])


def _host(cfg: LabStack, name: str) -> Host:
    return next(h for h in cfg.hosts if h.name == name)


# ---------------------------------------------------------------------------------------------
# 1. shellcheck on every script


def _script_cases() -> dict[str, str]:
    """Every script the module produces, with representative arguments (as NodePrep, ControlPlane
    and NodeJoin call them)."""
    cfg = lab_config()
    minor = cfg.kubernetes_minor
    pause = versions.PAUSE_IMAGE[minor]
    return {
        "kernel_prep": scripts.kernel_prep(),
        "kernel_prep_delete": scripts.kernel_prep_delete(),
        "nvidia_driver-branch": scripts.nvidia_driver(cfg.nvidia_driver.branch, None),
        "nvidia_driver-exact": scripts.nvidia_driver(cfg.nvidia_driver.branch, DRIVER_EXACT),
        "nvidia_driver_delete": scripts.nvidia_driver_delete(cfg.nvidia_driver.branch),
        "driver_ready": scripts.driver_ready(2),
        "nvidia_toolkit": scripts.nvidia_toolkit(versions.NVIDIA_CONTAINER_TOOLKIT),
        "nvidia_toolkit_delete": scripts.nvidia_toolkit_delete(),
        "containerd-gpu": scripts.containerd(cfg.containerd_version, pause, nvidia_default=True),
        "containerd-cpu": scripts.containerd(cfg.containerd_version, pause, nvidia_default=False),
        "containerd_delete": scripts.containerd_delete(),
        "kube_packages": scripts.kube_packages(cfg.kubernetes_version, minor, versions.KUBE_PACKAGE_REVISION),
        "kube_packages_delete": scripts.kube_packages_delete(),
        "kubeadm_init": scripts.kubeadm_init(),
        "kubeadm_reset": scripts.kubeadm_reset(),
        "read_admin_kubeconfig": scripts.read_admin_kubeconfig(),
        "ca_cert_hash": scripts.ca_cert_hash(),
        "upload_control_plane_certs": scripts.upload_control_plane_certs(),
        "kube_vip_manifest": scripts.kube_vip_manifest(),
        "kube_vip_manifest_delete": scripts.kube_vip_manifest_delete(),
        "kubeadm_join": scripts.kubeadm_join(),
        "control_plane_files": scripts.control_plane_files("apiVersion: audit.k8s.io/v1\nkind: Policy\n"),
        "control_plane_files_delete": scripts.control_plane_files_delete(),
        "node_ready": scripts.node_ready("gpu-1"),
        "drain_removed_nodes-members": scripts.drain_removed_nodes([("gpu-1", "192.0.2.11"), ("cpu-1", "192.0.2.12")], "cp-1"),
        "drain_removed_nodes-none": scripts.drain_removed_nodes([], "cp-1"),
        "nfs_server": nfs_storage.nfs_server("/srv/gpu-cluster/shared", ["192.0.2.10", "192.0.2.11"]),
        "nfs_server_delete": nfs_storage.nfs_server_delete("/srv/gpu-cluster/shared"),
        # upgrades in place (tests/components/lab/test_upgrade_scripts.py runs them)
        "kube_packages_stage": scripts.kube_packages_stage("1.35.0", "1.35", versions.KUBE_PACKAGE_REVISION),
        "kubeadm_upgrade_apply": scripts.kubeadm_upgrade_apply("cp-1", "1.35.0", versions.KUBE_PACKAGE_REVISION, 180),
        "kubeadm_upgrade_apply-s3": scripts.kubeadm_upgrade_apply(
            "cp-1", "1.35.0", versions.KUBE_PACKAGE_REVISION, 180, s3_client="/usr/local/sbin/gpu-cluster-etcd-s3"),
        "node_upgrade_drain-worker": scripts.node_upgrade_drain(
            "gpu-1", "1.35.0", control_plane=False, driver=("580", None), slots=2, slot_tries=180),
        "node_upgrade_drain-exact-driver": scripts.node_upgrade_drain(
            "gpu-1", "1.35.0", control_plane=False, driver=("570", DRIVER_EXACT), slots=2, slot_tries=180),
        "node_upgrade_drain-control-plane": scripts.node_upgrade_drain(
            "cp-2", "1.35.0", control_plane=True, driver=None, slots=2, slot_tries=180),
        "node_upgrade-gpu": scripts.node_upgrade("gpu-1", "1.35.0", versions.KUBE_PACKAGE_REVISION, ("580", None)),
        "node_upgrade-cpu": scripts.node_upgrade("cpu-1", "1.35.0", versions.KUBE_PACKAGE_REVISION, None),
        "node_upgrade_done": scripts.node_upgrade_done("gpu-1", "1.35.0", ("580", None), 2),
        "node_self_upgrade-gpu": scripts.node_self_upgrade(
            "gpu-1", "1.35.0", versions.KUBE_PACKAGE_REVISION, control_plane=False, driver=("580", None), slots=2,
            slot_tries=3),
        "node_self_upgrade-control-plane": scripts.node_self_upgrade(
            "cp-2", "1.35.0", versions.KUBE_PACKAGE_REVISION, control_plane=True, driver=None, slots=1, slot_tries=3),
        "node_self_upgrade_done": scripts.node_self_upgrade_done("gpu-1", "1.35.0", ("580", None), 2),
        "nvidia_driver_deferred": scripts.nvidia_driver_deferred("gpu-1", "580", None),
        "nvidia_driver_self_upgrade": scripts.nvidia_driver_self_upgrade("cp-1", "580", DRIVER_EXACT, 180),
        "driver_ready_uncordon": scripts.driver_ready_uncordon("cp-1", 2, "580", None),
        # GPU hosts with network.roce (seed 002's NIC)
        "roce_host": scripts.roce_host(*ROCE_NIC, versions.ROCE_HOST_PACKAGES),
        "roce_ready": scripts.roce_ready(*ROCE_NIC),
        "roce_host_delete": scripts.roce_host_delete(versions.ROCE_HOST_PACKAGES),
        # etcd backups (components/lab/etcd_backup.py; test_etcd_backup_real.py runs them against etcd)
        **etcd_backup_cases(cfg),
        # etcd defragmentation (components/lab/etcd_defrag.py; test_etcd_defrag_real.py runs it against etcd)
        **etcd_defrag_cases(cfg),
        # hosts[].gone (components/lab/gone_hosts.py; test_gone_hosts_real.py runs it against etcd)
        "remove_gone_hosts": gone_hosts.remove_gone_hosts_script(
            [Host.model_construct(name="cp-3", role=Role.CONTROL_PLANE, gone=True),
             Host.model_construct(name="gpu-9", role=Role.WORKER, gone=True)], cfg.kubernetes_minor),
        # certificates on every control plane (components/lab/certificates.py; test_certificates.py runs them)
        **certificate_cases(cfg),
        # kubelet-config on older clusters (components/lab/kubelet_config.py; test_kubelet_config_rollout.py runs them)
        "kubelet_config_merge": kubelet_config.merge_script(kubeadm_settings(cfg)),
        "kubelet_config_node": kubelet_config.node_script("gpu-1", 180),
    }


SCRIPTS = _script_cases()
# The wrapped command as remote.Command sends it; the login shell may be bash or a POSIX sh.
WRAPPED = {
    f"as_root({name})-{dialect}": (scripts.as_root(SCRIPTS[name]), dialect)
    for name in ("kernel_prep", "kubeadm_join")
    for dialect in ("bash", "sh")
}


def test_every_public_script_function_is_covered():
    public = {
        name
        for name, fn in inspect.getmembers(scripts, inspect.isfunction)
        if not name.startswith("_") and fn.__module__ == scripts.__name__
    }
    covered = {case.split("-")[0] for case in SCRIPTS} | {"as_root"}
    assert public - covered == set(), "add the new script function to _script_cases()"


def _shellcheck(text: str, dialect: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (CI installs it: apt-get install shellcheck)")
    return subprocess.run(
        ["shellcheck", "--shell", dialect, "--severity", "style", "--format", "gcc", "-"],
        input=text, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )


@pytest.mark.parametrize("name", SCRIPTS)
def test_shellcheck_script(name):
    result = _shellcheck(SCRIPTS[name], "bash")
    assert result.returncode == 0, f"shellcheck findings in scripts.{name}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("name", WRAPPED)
def test_shellcheck_as_root_command(name):
    command, dialect = WRAPPED[name]
    result = _shellcheck(command, dialect)
    assert result.returncode == 0, f"shellcheck findings in {name}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_as_root_passes_script_and_stdin_through(tmp_path, shell):
    """Whatever the login shell, sudo gets `-n /bin/bash -c <the script> gpu-cluster` and the
    command's stdin is left for the script."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sudo = bin_dir / "sudo"
    sudo.write_text(
        "#!/bin/bash\n"
        f'printf "%s\\0" "$@" >{tmp_path}/argv\n'
        f"cat >{tmp_path}/stdin\n"
    )
    sudo.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for name, script in SCRIPTS.items():
        subprocess.run(
            [shell, "-c", scripts.as_root(script)],
            input="line 1\nline 2 @TOKEN@ $HOME `x`\n", env=env, timeout=TIMEOUT, check=True, text=True,
        )
        argv = (tmp_path / "argv").read_text().split("\0")[:-1]
        # $(...) drops the trailing newline; nothing else may change.
        assert argv == ["-n", "/bin/bash", "-c", script.rstrip("\n"), "gpu-cluster"], name
        assert (tmp_path / "stdin").read_text() == "line 1\nline 2 @TOKEN@ $HOME `x`\n", name


def test_as_root_refuses_the_terminator_and_tolerates_a_missing_final_newline(tmp_path):
    with pytest.raises(ValueError):
        scripts.as_root(f"echo hi\n{scripts.HEREDOC_END}\necho injected\n")
    wrapped = scripts.as_root("echo no-final-newline")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/bash\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n')
    (bin_dir / "sudo").chmod(0o755)
    out = subprocess.run(
        ["bash", "-c", wrapped], env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, "no-final-newline\n", "")


# ---------------------------------------------------------------------------------------------
# helpers for the isolated runs

_WHY_NOT = isolation_unavailable()
needs_isolation = pytest.mark.skipif(_WHY_NOT is not None, reason=f"isolated host runs: {_WHY_NOT}")

# Paths of the real machine the scripts would write; they must be untouched by the tests.
_REAL_WATCHED = (
    "/etc/fstab", "/etc/modules-load.d", "/etc/sysctl.d", "/etc/modprobe.d", "/etc/apt",
    "/etc/containerd", "/etc/gpu-cluster", "/etc/kubernetes", "/var/lib/gpu-cluster", "/var/log/gpu-cluster",
)


def _real_state() -> dict[str, object]:
    state: dict[str, object] = {}
    for p in map(Path, _REAL_WATCHED):
        if p.is_dir():
            state[str(p)] = snapshot(p)
        elif p.exists():
            state[str(p)] = (p.read_bytes(), p.stat().st_mode)
        else:
            state[str(p)] = None
    return state


@pytest.fixture
def real_machine_untouched():
    before = _real_state()
    yield
    assert _real_state() == before, "a test changed the real machine"


def _changed(a: dict, b: dict) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


APT_LOCK_WAIT = ["-o", "DPkg::Lock::Timeout=300"]


def _without_apt_options(call: list[str]) -> list[str]:
    """An apt-get call without its `-o NAME=VALUE` options, so tests match on the action."""
    if call[:1] != ["apt-get"]:
        return call
    out, args = [call[0]], iter(call[1:])
    for a in args:
        if a == "-o":
            next(args, None)
        else:
            out.append(a)
    return out


def _calls(calls: list[list[str]], *prefix: str) -> list[list[str]]:
    calls = [_without_apt_options(c) for c in calls]
    return [c for c in calls if c[: len(prefix)] == list(prefix)]


def _assert_apt_waits_for_the_lock(calls: list[list[str]]) -> None:
    apt = [c for c in calls if c[:1] == ["apt-get"]]
    for c in apt:
        assert c[1:3] == APT_LOCK_WAIT, f"apt-get without the dpkg lock wait: {c}"


def _installed_specs(calls: list[list[str]]) -> set[str]:
    return {a for c in _calls(calls, "apt-get", "install") for a in c[2:] if not a.startswith("-")}


def _run_all(sim: HostSim, steps: list[tuple[str, str]]) -> dict[str, str]:
    """Run (name, script) steps in order through as_root(); each must exit 0. Returns stdouts."""
    out = {}
    for name, script in steps:
        result = sim.run(scripts.as_root(script))
        assert result.returncode == 0, f"{name} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        out[name] = result.stdout
    return out


def _prep_steps(cfg: LabStack, host: Host) -> list[tuple[str, str, str | None]]:
    """(step, create, delete) in NodePrep's dependency order."""
    minor = cfg.kubernetes_minor
    drv = cfg.nvidia_driver
    steps: list[tuple[str, str, str | None]] = [("kernel", scripts.kernel_prep(), scripts.kernel_prep_delete())]
    if host.is_gpu:
        steps += [
            ("nvidia-driver", scripts.nvidia_driver(drv.branch, drv.version), scripts.nvidia_driver_delete(drv.branch)),
            ("driver-ready", scripts.driver_ready(host.gpus), None),
            ("nvidia-toolkit", scripts.nvidia_toolkit(versions.NVIDIA_CONTAINER_TOOLKIT), scripts.nvidia_toolkit_delete()),
        ]
    steps += [
        (
            "containerd",
            scripts.containerd(cfg.containerd_version, versions.PAUSE_IMAGE[minor], nvidia_default=host.is_gpu),
            scripts.containerd_delete(),
        ),
        (
            "kube-packages",
            scripts.kube_packages(cfg.kubernetes_version, minor, versions.KUBE_PACKAGE_REVISION),
            scripts.kube_packages_delete(),
        ),
    ]
    return steps


# ---------------------------------------------------------------------------------------------
# 2. node prep: idempotent, pinned, undone by delete

_VARIANTS = {
    "gpu": (lambda: lab_config(), "gpu-1"),
    "gpu-exact-driver": (lambda: lab_config(nvidiaDriver={"branch": "570", "version": DRIVER_EXACT}), "gpu-1"),
    "cpu": (lambda: lab_config(), "cpu-1"),
}


@needs_isolation
@pytest.mark.parametrize("variant", _VARIANTS)
def test_node_prep_twice_changes_nothing_and_delete_undoes_it(tmp_path, real_machine_untouched, variant):
    make_cfg, host_name = _VARIANTS[variant]
    cfg = make_cfg()
    host = _host(cfg, host_name)
    gpu = host.is_gpu
    sim = HostSim(tmp_path, fstab=FSTAB, gpus=host.gpus)
    steps = _prep_steps(cfg, host)
    creates = [(name, create) for name, create, _ in steps]
    deletes = [(name, delete) for name, _, delete in reversed(steps) if delete]
    original = sim.snapshot()

    # -- run 1: installs and configures
    start = sim.mark()
    out1 = _run_all(sim, creates)
    calls1 = sim.calls_since(start)
    after1 = sim.snapshot()

    kube = f"{cfg.kubernetes_version}-{versions.KUBE_PACKAGE_REVISION}"
    pinned = {f"kubelet={kube}", f"kubeadm={kube}", f"kubectl={kube}", f"containerd.io={cfg.containerd_version}"}
    assert "kubelet=1.34.2-1.1" in pinned and "containerd.io=1.7.27-1" in pinned  # the defaults lab_config uses
    driver_pkg = f"nvidia-driver-{cfg.nvidia_driver.branch}-server"
    if gpu:
        pinned |= {
            f"{p}={versions.NVIDIA_CONTAINER_TOOLKIT}"
            for p in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                      "libnvidia-container-tools", "libnvidia-container1")
        }
        assert "nvidia-container-toolkit=1.17.8-1" in pinned
        pinned.add(f"{driver_pkg}={cfg.nvidia_driver.version}" if cfg.nvidia_driver.version else driver_pkg)
    assert _installed_specs(calls1) == pinned
    _assert_apt_waits_for_the_lock(calls1)
    installed = sim.installed()
    for spec in pinned:
        pkg, _, ver = spec.partition("=")
        assert pkg in installed and (not ver or installed[pkg] == ver), spec
    assert sorted(sim.holds()) == sorted(spec.partition("=")[0] for spec in pinned)

    ctk = _calls(calls1, "nvidia-ctk", "runtime", "configure", "--runtime=containerd", "--set-as-default")
    assert len(ctk) == (1 if gpu else 0)
    assert not _calls(calls1, "nvidia-ctk") or gpu
    assert _calls(calls1, "sysctl", "--system") and _calls(calls1, "swapoff", "-a")
    assert _calls(calls1, "systemctl", "restart", "containerd")
    assert not _calls(calls1, "systemd-run") and not _calls(calls1, "reboot"), "no reboot needed here"
    if gpu:
        assert _calls(calls1, "update-initramfs", "-u")
        assert "driver loaded without reboot" in out1["nvidia-driver"]
        assert f"{host.gpus} GPU(s) visible" in out1["driver-ready"]
        blacklist = sim.path("/etc/modprobe.d/gpu-cluster-blacklist-nouveau.conf").read_text()
        assert "blacklist nouveau" in blacklist

    fstab1 = sim.path("/etc/fstab").read_text()
    assert fstab1 == FSTAB.replace("\n/swap.img", "\n#gpu-cluster# /swap.img")
    assert sim.path("/etc/modules-load.d/gpu-cluster-k8s.conf").read_text() == "overlay\nbr_netfilter\n"
    assert "net.ipv4.ip_forward" in sim.path("/etc/sysctl.d/99-gpu-cluster-k8s.conf").read_text()

    toml = sim.path("/etc/containerd/config.toml").read_text()
    assert "SystemdCgroup = true" in toml and "SystemdCgroup = false" not in toml
    assert f'sandbox_image = "{versions.PAUSE_IMAGE[cfg.kubernetes_minor]}"' in toml
    assert ('default_runtime_name = "nvidia"' in toml) == gpu
    assert ("runtimes.nvidia]" in toml) == gpu
    assert 'default_runtime_name = "runc"' in toml or gpu

    docker_list = sim.path("/etc/apt/sources.list.d/docker.list").read_text()
    assert "signed-by=/etc/apt/keyrings/docker.gpg" in docker_list and "arch=amd64" in docker_list
    assert "https://download.docker.com/linux/ubuntu jammy stable" in docker_list
    kube_list = sim.path(f"/etc/apt/sources.list.d/kubernetes-v{cfg.kubernetes_minor}.list").read_text()
    assert f"signed-by=/etc/apt/keyrings/kubernetes-v{cfg.kubernetes_minor}.gpg" in kube_list
    assert sim.path(f"/etc/apt/keyrings/kubernetes-v{cfg.kubernetes_minor}.gpg").stat().st_mode & 0o777 == 0o644

    # -- run 2: nothing left to do
    start = sim.mark()
    out2 = _run_all(sim, creates)
    calls2 = sim.calls_since(start)
    assert _changed(after1, sim.snapshot()) == [], "the second run changed files"
    assert sim.path("/etc/fstab").read_text() == fstab1
    assert not _calls(calls2, "apt-get"), "the second run called apt-get"
    assert not _calls(calls2, "apt-mark", "hold")
    for tool in ("curl", "gpg", "sysctl", "update-initramfs", "systemd-run", "reboot", "modprobe"):
        if tool == "modprobe":
            assert not _calls(calls2, "modprobe", "nvidia")
            continue
        if tool == "gpg":  # the keyrings in place are checked against their pins, nothing written
            assert all("--show-keys" in c for c in _calls(calls2, "gpg")), _calls(calls2, "gpg")
            continue
        assert not _calls(calls2, tool), f"the second run called {tool}"
    assert not _calls(calls2, "systemctl", "restart", "containerd")
    assert not any("updated " in out for out in out2.values()), out2
    if gpu:
        assert "driver ready" in out2["nvidia-driver"]

    # -- delete (reverse order), twice: the second finds nothing to undo
    start = sim.mark()
    _run_all(sim, deletes)
    calls_d1 = sim.calls_since(start)
    assert _calls(calls_d1, "apt-get", "purge")
    _assert_apt_waits_for_the_lock(calls_d1)
    after_delete = sim.snapshot()
    assert sim.path("/etc/fstab").read_text() == FSTAB
    assert _calls(calls_d1, "swapon", "-a") and _calls(calls_d1, "sysctl", "--system")
    for gone in (
        "/etc/modules-load.d/gpu-cluster-k8s.conf", "/etc/sysctl.d/99-gpu-cluster-k8s.conf",
        "/etc/containerd/config.toml", "/etc/apt/sources.list.d/docker.list", "/etc/apt/keyrings/docker.gpg",
        f"/etc/apt/sources.list.d/kubernetes-v{cfg.kubernetes_minor}.list",
        f"/etc/apt/keyrings/kubernetes-v{cfg.kubernetes_minor}.gpg",
        "/etc/apt/sources.list.d/nvidia-container-toolkit.list", "/etc/apt/keyrings/nvidia-container-toolkit.gpg",
    ):
        assert not sim.path(gone).exists(), gone
    assert sim.holds() == []
    # The driver stays installed (removing it needs a reboot), and so does its nouveau blacklist.
    assert set(sim.installed()) == ({driver_pkg} if gpu else set())
    left = {"etc/modprobe.d/gpu-cluster-blacklist-nouveau.conf"} if gpu else set()
    assert set(_changed(original, after_delete)) == left

    start = sim.mark()
    _run_all(sim, deletes)
    assert _changed(after_delete, sim.snapshot()) == []
    assert not _calls(sim.calls_since(start), "apt-get")


@needs_isolation
def test_failed_file_write_fails_the_step(tmp_path, real_machine_untouched):
    """put_file must not report success (or "updated") when it could not write."""
    sim = HostSim(tmp_path, fstab=FSTAB)
    # A regular file where a directory must be: install -D cannot create the target.
    modules = sim.path("/etc/modules-load.d")
    shutil.rmtree(modules, ignore_errors=True)
    modules.write_text("not a directory\n")
    result = sim.run(scripts.as_root(scripts.kernel_prep()))
    assert result.returncode != 0
    assert "updated /etc/modules-load.d" not in result.stdout
    # Same for a file written from a pipeline (the apt source of a repository).
    sources = sim.path("/etc/apt/sources.list.d")
    shutil.rmtree(sources, ignore_errors=True)
    sources.write_text("not a directory\n")
    start = sim.mark()
    cfg = lab_config()
    result = sim.run(scripts.as_root(
        scripts.kube_packages(cfg.kubernetes_version, cfg.kubernetes_minor, versions.KUBE_PACKAGE_REVISION)
    ))
    assert result.returncode != 0
    assert not _calls(sim.calls_since(start), "apt-get", "install"), "went on without its apt source"


# ---------------------------------------------------------------------------------------------
# 3. the driver's reboot path and the GPU count check


@needs_isolation
def test_nvidia_driver_reboots_when_nouveau_holds_the_gpus(tmp_path, real_machine_untouched):
    sim = HostSim(tmp_path, gpus=2)
    sim.flag("nouveau-loaded")  # nvidia-smi fails and modprobe nvidia cannot help until a reboot
    driver = scripts.as_root(scripts.nvidia_driver("570", None))

    start = sim.mark()
    result = sim.run(driver)
    assert result.returncode == 0, result.stderr
    assert "rebooting to load the NVIDIA driver" in result.stdout
    calls = sim.calls_since(start)
    assert _calls(calls, "apt-get", "install")
    _assert_apt_waits_for_the_lock(calls)
    stop = calls.index(["systemctl", "stop", "ssh.socket", "ssh.service"])
    reboot = calls.index(["systemd-run", "--on-active=5", "--unit=gpu-cluster-reboot", "systemctl", "reboot"])
    assert stop < reboot, "SSH must refuse new sessions before the reboot is scheduled"
    assert not _calls(calls, "reboot"), "the reboot is delayed through systemd-run, never immediate"
    marker = sim.path("/var/lib/gpu-cluster/reboot-requested")
    assert marker.read_text() == Path("/proc/sys/kernel/random/boot_id").read_text()

    # After the reboot: nouveau is gone and the driver is loaded.
    sim.flag("nouveau-loaded", False)
    sim.flag("nvidia-loaded")
    start = sim.mark()
    ready = sim.run(scripts.as_root(scripts.driver_ready(2)))
    assert ready.returncode == 0, ready.stderr
    assert "2 GPU(s) visible" in ready.stdout
    assert not marker.exists()
    assert not _calls(sim.calls_since(start), "sleep")

    start = sim.mark()
    again = sim.run(driver)
    assert again.returncode == 0 and "driver ready" in again.stdout
    assert not _calls(sim.calls_since(start), "systemd-run")
    assert not _calls(sim.calls_since(start), "apt-get")


@needs_isolation
@pytest.mark.parametrize("visible", [0, 1])
def test_driver_ready_fails_when_fewer_gpus_than_configured(tmp_path, real_machine_untouched, visible):
    sim = HostSim(tmp_path, gpus=visible)
    if visible:
        sim.flag("nvidia-loaded")  # else nvidia-smi fails outright: 0 GPUs
    began = time.monotonic()
    result = sim.run(scripts.as_root(scripts.driver_ready(2)))
    assert time.monotonic() - began < 30, "the retry loop must be bounded (sleep is a stand-in here)"
    assert result.returncode != 0
    assert f"nvidia-smi sees {visible} GPU(s) but the config says 2" in result.stderr
    sleeps = _calls(sim.calls(), "sleep")
    assert 0 < len(sleeps) <= 30 and all(s == ["sleep", "5"] for s in sleeps)


# ---------------------------------------------------------------------------------------------
# 3b. node_ready: on the joined host, with the kubelet's credentials; waits for the Node object
# before `kubectl wait`

KUBELET_CONF = "/etc/kubernetes/kubelet.conf"


def _joined(sim: HostSim) -> None:
    """What `kubeadm join` leaves behind: the kubelet's kubeconfig (its client identity)."""
    conf = sim.path(KUBELET_CONF)
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("apiVersion: v1\nkind: Config\n")


@needs_isolation
def test_node_ready_waits_for_the_node_to_register(tmp_path, real_machine_untouched):
    sim = HostSim(tmp_path)
    _joined(sim)
    sim.node_registers_after(2)  # NotFound twice, as while the kubelet has not registered yet
    start = sim.mark()
    result = sim.run(scripts.as_root(scripts.node_ready("gpu-1")))
    assert result.returncode == 0, result.stderr
    calls = sim.calls_since(start)
    kubectl = [c for c in calls if c[0] == "kubectl"]
    # The node's own credentials, never an admin kubeconfig (the host has none).
    assert kubectl and all(c[1:3] == ["--kubeconfig", KUBELET_CONF] for c in kubectl)
    gets = [c for c in kubectl if "get" in c]
    assert len(gets) == 3 and all(c[-3:] == ["get", "node", "gpu-1"] for c in gets)
    assert _calls(calls, "sleep") == [["sleep", str(scripts.NODE_REGISTER_INTERVAL)]] * 2
    # `kubectl wait` runs once, after the node exists.
    waits = [i for i, c in enumerate(calls) if c[0] == "kubectl" and "wait" in c]
    assert len(waits) == 1 and waits[0] > calls.index(gets[-1])
    assert calls[waits[0]][-3:] == ["--for=condition=Ready", "node/gpu-1", "--timeout=10m"]


@needs_isolation
def test_node_ready_gives_up_when_the_node_never_registers(tmp_path, real_machine_untouched):
    sim = HostSim(tmp_path)
    _joined(sim)
    sim.node_registers_after(10_000)
    began = time.monotonic()
    result = sim.run(scripts.as_root(scripts.node_ready("gpu-1")))
    assert time.monotonic() - began < TIMEOUT
    assert result.returncode != 0
    assert "node gpu-1 did not register" in result.stderr
    calls = sim.calls()
    assert len([c for c in calls if c[0] == "kubectl" and "get" in c]) == scripts.NODE_REGISTER_TRIES
    assert not [c for c in calls if c[0] == "kubectl" and "wait" in c]


@needs_isolation
def test_node_ready_refuses_a_host_that_has_not_joined(tmp_path, real_machine_untouched):
    sim = HostSim(tmp_path)
    result = sim.run(scripts.as_root(scripts.node_ready("gpu-1")))
    assert result.returncode != 0
    assert "gpu-1 has not joined" in result.stderr
    assert not _calls(sim.calls(), "kubectl")


# ---------------------------------------------------------------------------------------------
# 3c. drain_removed_nodes: on the control plane, one session for every host that leaves

MEMBERS = "/var/lib/gpu-cluster/cluster-members"


def _drains(calls: list[list[str]]) -> list[str]:
    return sorted(c[c.index("drain") + 1] for c in calls if c[0] == "kubectl" and "drain" in c)


def _deleted(calls: list[list[str]]) -> list[str]:
    return sorted(c[c.index("delete") + 2] for c in calls if c[0] == "kubectl" and "delete" in c)


@needs_isolation
def test_drain_removed_nodes_drains_only_what_left_or_moved(tmp_path, real_machine_untouched):
    sim = HostSim(tmp_path)
    three = [("gpu-1", "192.0.2.11"), ("gpu-2", "192.0.2.13"), ("cpu-1", "192.0.2.12")]

    def run(members: list[tuple[str, str]]) -> list[list[str]]:
        start = sim.mark()
        result = sim.run(scripts.as_root(scripts.drain_removed_nodes(members, "cp-1")))
        assert result.returncode == 0, result.stderr
        return sim.calls_since(start)

    # First run (a new cluster, or the first `up` with this layout): nothing to drain.
    calls = run(three)
    assert not _calls(calls, "kubectl")
    assert sim.path(MEMBERS).read_text().splitlines() == sorted(f"{n} {a}" for n, a in three)
    before = sim.snapshot()

    # Unchanged: nothing drained, nothing written.
    assert not _calls(run(three), "kubectl")
    assert _changed(before, sim.snapshot()) == []

    # gpu-2 removed, gpu-1 moved to a new address: both drained (in parallel) and deleted, with the
    # admin kubeconfig; cpu-1 untouched.
    moved = [("gpu-1", "192.0.2.21"), ("cpu-1", "192.0.2.12")]
    calls = run(moved)
    kubectl = _calls(calls, "kubectl")
    assert all(c[1:3] == ["--kubeconfig", "/etc/kubernetes/admin.conf"] for c in kubectl)
    assert _drains(calls) == ["gpu-1", "gpu-2"]
    for drain in (c for c in kubectl if "drain" in c):
        assert {"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m"} <= set(drain)
    assert _deleted(calls) == ["gpu-1", "gpu-2"]
    assert "cpu-1" not in " ".join(" ".join(c) for c in kubectl)
    assert sim.path(MEMBERS).read_text().splitlines() == ["cpu-1 192.0.2.12", "gpu-1 192.0.2.21"]

    # Every host removed (gpu-1 having joined again at its new address): the rest drained, the list
    # left empty.
    sim.k8s_node("gpu-1", deleted=False)
    calls = run([])
    assert _drains(calls) == ["cpu-1", "gpu-1"]
    assert sim.path(MEMBERS).read_text().strip() == ""


@needs_isolation
def test_drain_removed_nodes_skips_a_node_the_cluster_no_longer_has(tmp_path, real_machine_untouched):
    sim = HostSim(tmp_path)
    assert sim.run(scripts.as_root(scripts.drain_removed_nodes([("gpu-1", "192.0.2.11")], "cp-1"))).returncode == 0
    sim.node_registers_after(1)  # `get node gpu-1`: NotFound (deleted by hand, or a rebuilt cluster)
    start = sim.mark()
    result = sim.run(scripts.as_root(scripts.drain_removed_nodes([], "cp-1")))
    assert result.returncode == 0, result.stderr
    assert not _drains(sim.calls_since(start)) and not _deleted(sim.calls_since(start))


def test_drain_removed_nodes_refuses_what_is_not_a_node_and_address():
    with pytest.raises(ValueError):
        scripts.drain_removed_nodes([("gpu-1'; rm -rf /", "192.0.2.11")], "cp-1")
    with pytest.raises(ValueError):
        scripts.drain_removed_nodes([("gpu-1", "$(reboot)")], "cp-1")


# ---------------------------------------------------------------------------------------------
# 3d. ca_cert_hash: the real openssl on a real CA, against a hash computed here independently


def _der_children(der: bytes) -> list[bytes]:
    """The elements (tag, length and content) inside one DER SEQUENCE."""

    def header(at: int) -> tuple[int, int]:  # (content length, content offset) of the element at `at`
        first = der[at + 1]
        if first < 0x80:
            return first, at + 2
        n = first & 0x7F
        return int.from_bytes(der[at + 2:at + 2 + n], "big"), at + 2 + n

    assert der[0] == 0x30, "not a SEQUENCE"
    size, start = header(0)
    out, at = [], start
    while at < start + size:
        n, content = header(at)
        out.append(der[at:content + n])
        at = content + n
    return out


def _spki_sha256(cert_der: bytes) -> str:
    """sha256:<hex> of the certificate's SubjectPublicKeyInfo, found by walking the DER (RFC 5280:
    Certificate = SEQUENCE {tbsCertificate, ...}; tbsCertificate = SEQUENCE {[0] version, serial,
    signature, issuer, validity, subject, subjectPublicKeyInfo, ...})."""
    tbs = _der_children(_der_children(cert_der)[0])
    fields = tbs[1:] if tbs[0][0] == 0xA0 else tbs  # the explicit [0] version
    return "sha256:" + hashlib.sha256(fields[5]).hexdigest()


@needs_isolation
@pytest.mark.parametrize("key", [["-newkey", "rsa:2048"], ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]],
                         ids=["rsa", "ecdsa-p256"])
def test_ca_cert_hash_matches_the_ca_public_key(tmp_path, real_machine_untouched, key):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    work = tmp_path / "ca"
    work.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", *key, "-nodes", "-days", "1", "-subj", "/CN=kubernetes",
         "-keyout", str(work / "ca.key"), "-out", str(work / "ca.crt")],
        capture_output=True, timeout=TIMEOUT, check=True,
    )
    der = subprocess.run(["openssl", "x509", "-in", str(work / "ca.crt"), "-outform", "der"],
                         capture_output=True, timeout=TIMEOUT, check=True).stdout
    expected = _spki_sha256(der)

    sim = HostSim(tmp_path / "host", real_tools=("openssl",))
    ca = sim.path("/etc/kubernetes/pki/ca.crt")
    ca.parent.mkdir(parents=True)
    shutil.copy(work / "ca.crt", ca)
    result = sim.run(scripts.as_root(scripts.ca_cert_hash()))
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected + "\n"
    assert kubeadm.CA_HASH_PATTERN.fullmatch(result.stdout.strip())
    if key[1].startswith("rsa"):
        # ... and what kubeadm's documentation computes (kubeadm join, "--discovery-token-ca-cert-hash").
        documented = subprocess.run(
            f"openssl x509 -pubkey -in {work / 'ca.crt'} | openssl rsa -pubin -outform der 2>/dev/null "
            "| openssl dgst -sha256 -hex | sed 's/^.* //'",
            shell=True, capture_output=True, text=True, timeout=TIMEOUT, check=True,
        ).stdout.strip()
        assert result.stdout.strip() == "sha256:" + documented


@needs_isolation
def test_ca_cert_hash_fails_without_a_ca(tmp_path, real_machine_untouched):
    sim = HostSim(tmp_path, real_tools=("openssl",))
    result = sim.run(scripts.as_root(scripts.ca_cert_hash()))
    assert result.returncode != 0
    assert "no cluster CA" in result.stderr and result.stdout == ""
    # Something that is not a certificate: no hash of nothing.
    ca = sim.path("/etc/kubernetes/pki/ca.crt")
    ca.parent.mkdir(parents=True)
    ca.write_text("not a certificate\n")
    result = sim.run(scripts.as_root(scripts.ca_cert_hash()))
    assert result.returncode != 0 and "sha256:" not in result.stdout


# ---------------------------------------------------------------------------------------------
# 4. the join script: the complete JoinConfiguration on stdin, checked, removed after use

TOKEN = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "0123456789abcdef" * 4
CERT_KEY = "fedcba9876543210" * 4


def _join_stdin(host_name: str, token: str = TOKEN, ca_hash: str = CA_HASH) -> str:
    cfg = lab_config(
        hosts=[host("cp-1", "192.0.2.10", "control-plane"), host("gpu-1", "192.0.2.11", gpus=2),
               host("cp-2", "192.0.2.20", "control-plane"), host("cp-3", "192.0.2.30", "control-plane")],
        controlPlaneEndpoint="k8s-api.lab.example:6443",
    )
    h = _host(cfg, host_name)
    key = CERT_KEY if h.role.value == "control-plane" else None
    return kubeadm.join_config(kubeadm_settings(cfg), h, token, ca_hash, key)


@needs_isolation
@pytest.mark.parametrize("host_name", ["gpu-1", "cp-2"], ids=["worker", "control-plane"])
def test_kubeadm_join_writes_the_config_for_kubeadm_and_removes_it(tmp_path, real_machine_untouched, host_name):
    sim = HostSim(tmp_path)
    stdin = _join_stdin(host_name)
    join = scripts.as_root(scripts.kubeadm_join())

    result = sim.run(join, stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert "node joined" in result.stdout
    assert _calls(sim.calls(), "kubeadm", "join") == [["kubeadm", "join", "--config", JOIN_CONFIG]]
    seen = yaml.safe_load((sim.sim / "kubeadm-join-seen.yaml").read_text())
    assert seen == yaml.safe_load(stdin)
    assert seen["discovery"]["bootstrapToken"]["token"] == TOKEN
    assert seen["discovery"]["bootstrapToken"]["caCertHashes"] == [CA_HASH]
    if host_name == "cp-2":
        assert seen["controlPlane"]["certificateKey"] == CERT_KEY
    else:
        assert "controlPlane" not in seen
    assert (sim.sim / "kubeadm-join-seen.mode").read_text().strip() == "600"
    assert not sim.path(JOIN_CONFIG).exists(), "the join config holds the token and must be removed"
    assert sim.path("/etc/gpu-cluster").stat().st_mode & 0o777 == 0o700
    assert TOKEN not in result.stdout + result.stderr

    # Joined already (kubelet.conf exists): a rerun, as after an `up` that changed its stdin, does nothing.
    start = sim.mark()
    again = sim.run(join, stdin=stdin)
    assert again.returncode == 0 and "node already joined" in again.stdout
    assert not _calls(sim.calls_since(start), "kubeadm")


@needs_isolation
@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("", "no join token or CA hash"),
        (_join_stdin("gpu-1", token="abcdef.None"), "no join token or CA hash"),
        (_join_stdin("gpu-1", ca_hash=""), "no join token or CA hash"),
        (_join_stdin("gpu-1", ca_hash="sha256:abc"), "no join token or CA hash"),
        (_join_stdin("cp-2").replace(CERT_KEY, ""), "no certificate key"),
    ],
    ids=["empty", "bad-token", "no-hash", "short-hash", "control-plane-without-key"],
)
def test_kubeadm_join_refuses_an_incomplete_config(tmp_path, real_machine_untouched, stdin, message):
    sim = HostSim(tmp_path)
    result = sim.run(scripts.as_root(scripts.kubeadm_join()), stdin=stdin)
    assert result.returncode != 0
    assert message in result.stderr
    assert not _calls(sim.calls(), "kubeadm")
    assert not sim.path(JOIN_CONFIG).exists()
    assert TOKEN not in result.stdout + result.stderr


@needs_isolation
def test_kubeadm_join_failure_keeps_the_token_out_of_the_output(tmp_path, real_machine_untouched):
    sim = HostSim(tmp_path)
    sim.flag("kubeadm-join-fails")
    result = sim.run(scripts.as_root(scripts.kubeadm_join()), stdin=_join_stdin("gpu-1"))
    assert result.returncode == 3, "kubeadm's exit status is passed on"
    assert "port 10250 is in use" in result.stderr
    assert TOKEN not in result.stdout + result.stderr
    assert TOKEN.split(".")[1] not in result.stdout + result.stderr
    assert not sim.path(JOIN_CONFIG).exists()


# ---------------------------------------------------------------------------------------------
# 5. no secret in any command text


def test_no_host_command_text_contains_a_secret():
    canary = "CANARY-SECRET-7f3a"
    values, secret_keys = program.stack_config("lab", secret_value=canary)
    assert secret_keys and all(values[k] == canary for k in secret_keys), "the canary must reach the program"
    plan = program.run("lab", secret_value=canary)

    commands = plan.of_type("command:remote:Command")
    joins = [c for c in commands if c.name.endswith("-join")]
    assert commands and joins
    for cmd in commands:
        for field in ("create", "update", "delete"):
            text = cmd.inputs.get(field)
            if text is None:
                continue
            assert isinstance(text, str) and text != program.SECRET_MARKER, f"{cmd.name}.{field} is not plain text"
            assert canary not in text, f"{cmd.name}.{field}"
        stdin = cmd.inputs.get("stdin")
        if cmd in joins:
            assert stdin == program.SECRET_MARKER, f"{cmd.name}.stdin carries the join token: must be secret"
        elif stdin is not None:
            assert canary not in stdin, f"{cmd.name}.stdin"
        assert cmd.inputs["connection"]["privateKey"] == program.SECRET_MARKER
    assert canary not in json.dumps([r.inputs for r in plan.resources])
    assert canary not in json.dumps(plan.outputs, default=str)


# ---------------------------------------------------------------------------------------------
# 6. RDMA (network.roce): the NIC in a simulated /sys, the RDMA subsystem's mode in the `rdma` stand-in

ROCE_MODPROBE = "/etc/modprobe.d/gpu-cluster-rdma-exclusive.conf"
ROCE_MARKER = "/var/lib/gpu-cluster/rdma-packages.installed-by-gpu-cluster"
REBOOT_MARKER = "/var/lib/gpu-cluster/reboot-requested"
ROCE_PINNED = {f"{p}={v}" for p, v in versions.ROCE_HOST_PACKAGES}
_, IFACE, PCI, HCA, NIC_DRIVER = ROCE_NIC


def _roce_sim(tmp_path: Path, *, busy: bool, nic: bool = True) -> HostSim:
    """A GPU host after kube-packages: the E810 with irdma0, kubernetes-cni's host-device plugin;
    `busy`: other network namespaces exist, so the kernel refuses to switch the RDMA mode."""
    sim = HostSim(tmp_path, hardware=True)
    if nic:
        sim.add_pci_nic(IFACE, PCI, NIC_DRIVER, HCA)
    sim.add_file(scripts.HOST_DEVICE_CNI, "#!/bin/sh\n")
    (sim.state / "pkgs" / "kubernetes-cni").write_text("1.7.1-1.1\n")  # kubelet's dependency
    sim.flag("rdma-netns-busy", busy)
    return sim


def _rdma_mode(sim: HostSim) -> str:
    path = sim.state / "rdma-netns"
    return path.read_text().strip() if path.exists() else "shared"


ROCE_CREATE = scripts.as_root(scripts.roce_host(*ROCE_NIC, versions.ROCE_HOST_PACKAGES))
ROCE_READY = scripts.as_root(scripts.roce_ready(*ROCE_NIC))
ROCE_DELETE = scripts.as_root(scripts.roce_host_delete(versions.ROCE_HOST_PACKAGES))


@needs_isolation
def test_roce_host_reboots_into_exclusive_mode_when_the_kernel_refuses(tmp_path, real_machine_untouched):
    sim = _roce_sim(tmp_path, busy=True)
    original = sim.snapshot()

    start = sim.mark()
    result = sim.run(ROCE_CREATE)
    assert result.returncode == 0, result.stderr
    calls = sim.calls_since(start)
    assert "gpu-1: ens192 is PCI device 0000:3b:00.0 (ice) with RDMA device irdma0" in result.stdout
    assert f"gpu-1: {scripts.HOST_DEVICE_CNI} from kubernetes-cni 1.7.1-1.1" in result.stdout
    assert "gpu-1: rebooting for exclusive RDMA mode" in result.stdout
    assert "Device or resource busy" in result.stdout
    # Pinned jammy versions, held; what was missing noted for the delete.
    assert _installed_specs(calls) == ROCE_PINNED
    assert "rdma-core=39.0-1" in ROCE_PINNED and "perftest=4.4+0.37-1" in ROCE_PINNED
    _assert_apt_waits_for_the_lock(calls)
    assert set(sim.holds()) == {p for p, _ in versions.ROCE_HOST_PACKAGES}
    assert sim.path(ROCE_MARKER).read_text().split() == sorted(p for p, _ in versions.ROCE_HOST_PACKAGES)
    option = sim.path(ROCE_MODPROBE).read_text()
    assert "options ib_core netns_mode=0\n" in option and option.endswith("netns_mode=0\n")
    assert _calls(calls, "update-initramfs", "-u"), "ib_core may load from the initramfs"
    # Tried at once, refused; then the driver step's reboot: SSH stopped first, reboot delayed.
    assert _calls(calls, "rdma", "system", "set", "netns", "exclusive")
    stop = calls.index(["systemctl", "stop", "ssh.socket", "ssh.service"])
    reboot = calls.index(["systemd-run", "--on-active=5", "--unit=gpu-cluster-reboot", "systemctl", "reboot"])
    assert stop < reboot and not _calls(calls, "reboot")
    assert sim.path(REBOOT_MARKER).read_text() == Path("/proc/sys/kernel/random/boot_id").read_text()
    assert _rdma_mode(sim) == "shared"

    # Not yet rebooted, the ready step gives up: still shared.
    early = sim.run(ROCE_READY)
    assert early.returncode != 0
    assert "gpu-1: rdma system show says netns shared, not exclusive" in early.stderr

    # After the reboot ib_core has read netns_mode=0.
    (sim.state / "rdma-netns").write_text("exclusive\n")
    start = sim.mark()
    ready = sim.run(ROCE_READY)
    assert ready.returncode == 0, ready.stderr
    assert "gpu-1: RDMA subsystem exclusive; ens192 and irdma0 ready" in ready.stdout
    assert not _calls(sim.calls_since(start), "sleep")
    assert not sim.path(REBOOT_MARKER).exists()
    after1 = sim.snapshot()

    # The second run changes nothing: no apt, no initramfs, no mode switch, no reboot.
    start = sim.mark()
    again = sim.run(ROCE_CREATE)
    assert again.returncode == 0, again.stderr
    assert sim.run(ROCE_READY).returncode == 0
    calls2 = sim.calls_since(start)
    assert "gpu-1: RDMA subsystem in exclusive mode" in again.stdout
    assert _changed(after1, sim.snapshot()) == []
    for tool in ("apt-get", "update-initramfs", "systemd-run", "reboot"):
        assert not _calls(calls2, tool), f"the second run called {tool}"
    assert not _calls(calls2, "apt-mark", "hold") and not _calls(calls2, "rdma", "system", "set")
    assert "updated " not in again.stdout

    # Delete while other namespaces exist: shared from the next boot on, no reboot.
    start = sim.mark()
    deleted = sim.run(ROCE_DELETE)
    assert deleted.returncode == 0, deleted.stderr
    calls_d = sim.calls_since(start)
    assert "stays in exclusive mode until the next boot" in deleted.stdout
    assert not _calls(calls_d, "systemd-run") and not _calls(calls_d, "reboot")
    assert _calls(calls_d, "update-initramfs", "-u")
    assert _calls(calls_d, "apt-get", "purge")
    _assert_apt_waits_for_the_lock(calls_d)
    assert sim.holds() == [] and set(sim.installed()) == {"kubernetes-cni"}
    assert _changed(original, sim.snapshot()) == []
    after_delete = sim.snapshot()
    start = sim.mark()
    assert sim.run(ROCE_DELETE).returncode == 0
    assert _changed(after_delete, sim.snapshot()) == []
    assert not _calls(sim.calls_since(start), "apt-get") and not _calls(sim.calls_since(start), "update-initramfs")


@needs_isolation
def test_roce_host_switches_at_once_when_the_kernel_allows_and_delete_restores_shared(
    tmp_path, real_machine_untouched,
):
    sim = _roce_sim(tmp_path, busy=False)
    # The host had rdma-core already (same version): held while prepared, kept on delete.
    (sim.state / "pkgs" / "rdma-core").write_text(versions.RDMA_CORE_JAMMY + "\n")
    original = sim.snapshot()

    start = sim.mark()
    result = sim.run(ROCE_CREATE)
    assert result.returncode == 0, result.stderr
    calls = sim.calls_since(start)
    assert "gpu-1: RDMA subsystem switched to exclusive mode" in result.stdout
    assert _rdma_mode(sim) == "exclusive"
    assert not _calls(calls, "systemd-run") and not _calls(calls, "systemctl", "stop")
    assert not sim.path(REBOOT_MARKER).exists()
    assert _installed_specs(calls) == ROCE_PINNED - {f"rdma-core={versions.RDMA_CORE_JAMMY}"}
    assert "rdma-core" in sim.holds()
    assert "rdma-core" not in sim.path(ROCE_MARKER).read_text().split()
    # The ready step finds it at once (dialing through no reboot).
    start = sim.mark()
    ready = sim.run(ROCE_READY)
    assert ready.returncode == 0, ready.stderr
    assert not _calls(sim.calls_since(start), "sleep")

    start = sim.mark()
    deleted = sim.run(ROCE_DELETE)
    assert deleted.returncode == 0, deleted.stderr
    calls_d = sim.calls_since(start)
    assert "RDMA subsystem back in shared mode" in deleted.stdout
    assert _calls(calls_d, "rdma", "system", "set", "netns", "shared")
    assert _rdma_mode(sim) == "shared"
    assert not sim.path(ROCE_MODPROBE).exists() and not sim.path(ROCE_MARKER).exists()
    purged = {c[-1] for c in _calls(calls_d, "apt-get", "purge")}
    assert purged == {p for p, _ in versions.ROCE_HOST_PACKAGES} - {"rdma-core"}
    assert sim.installed() == {"kubernetes-cni": "1.7.1-1.1", "rdma-core": versions.RDMA_CORE_JAMMY}
    assert sim.holds() == []
    assert _changed(original, sim.snapshot()) == []


def _nic_other_pci(sim: HostSim) -> None:
    sim.add_pci_nic(IFACE, "0000:5e:00.0", NIC_DRIVER, HCA)  # ens192 is another port
    sim.add_pci_nic(None, PCI, NIC_DRIVER, HCA)


@needs_isolation
@pytest.mark.parametrize(
    ("build", "found"),
    [
        (_nic_other_pci, "is PCI device 0000:5e:00.0, not 0000:3b:00.0 (network.roce.pciAddress)"),
        (lambda sim: sim.add_pci_nic(IFACE, PCI, "i40e", HCA), "PCI device 0000:3b:00.0 is driven by i40e, not ice"),
        (lambda sim: sim.add_pci_nic(IFACE, PCI, None, HCA), "PCI device 0000:3b:00.0 has no driver bound"),
        (lambda sim: sim.add_pci_nic(IFACE, PCI, NIC_DRIVER, None),
         "PCI device 0000:3b:00.0 has no RDMA device irdma0 (network.roce.hca), it has: none"),
        (lambda sim: sim.add_pci_nic(IFACE, PCI, NIC_DRIVER, "irdma1"), "PCI device 0000:3b:00.0 has no RDMA device irdma0 (network.roce.hca), it has: irdma1 ("),
        (lambda sim: sim.add_pci_nic(IFACE, PCI, NIC_DRIVER, HCA, ports=0), "RDMA device irdma0 of PCI device 0000:3b:00.0 has no port"),
        (lambda sim: sim.add_pci_nic("ens1f0", PCI, NIC_DRIVER, HCA),
         "not found; PCI device 0000:3b:00.0 has ens1f0 (network.roce.interface)"),
        (lambda sim: None, "not found, and there is no PCI device 0000:3b:00.0"),
        # host-device and the rdma CNI moved it into a training pod's namespace
        (lambda sim: sim.add_pci_nic(None, PCI, NIC_DRIVER, None),
         "not in the host's network namespace, and PCI device 0000:3b:00.0 shows no interface: a training pod may hold it"),
    ],
    ids=["other-pci", "other-driver", "no-driver", "no-hca", "other-hca", "no-port", "other-interface", "no-nic",
         "in-a-pod"],
)
def test_roce_host_refuses_a_nic_unlike_the_config(tmp_path, real_machine_untouched, build, found):
    sim = _roce_sim(tmp_path, busy=False, nic=False)
    build(sim)
    original = sim.snapshot()
    for command in (ROCE_CREATE, ROCE_READY):
        if command is ROCE_READY:
            (sim.state / "rdma-netns").write_text("exclusive\n")  # so that the NIC is what fails
        result = sim.run(command)
        assert result.returncode != 0
        assert f"gpu-1: network.roce interface ens192: {found}" in result.stderr, result.stderr
    # Nothing changed before the check: no packages, no option, no mode switch, no reboot.
    assert not _calls(sim.calls(), "apt-get") and not _calls(sim.calls(), "rdma", "system", "set")
    assert not _calls(sim.calls(), "systemd-run")
    assert _changed(original, sim.snapshot()) == []


@needs_isolation
def test_roce_host_needs_the_host_device_plugin(tmp_path, real_machine_untouched):
    sim = _roce_sim(tmp_path, busy=False)
    (sim.root / "opt" / "cni" / "bin" / "host-device").unlink()
    result = sim.run(ROCE_CREATE)
    assert result.returncode != 0
    assert f"gpu-1: {scripts.HOST_DEVICE_CNI} is missing; it comes with the kubernetes-cni package" in result.stderr
    assert not _calls(sim.calls(), "apt-get")


@needs_isolation
def test_roce_host_never_reboots_a_joined_node(tmp_path, real_machine_untouched):
    """Adding network.roce to a running cluster: the node may run pods; it is not rebooted undrained."""
    sim = _roce_sim(tmp_path, busy=True)
    _joined(sim)
    result = sim.run(ROCE_CREATE)
    assert result.returncode != 0
    assert "this node has joined the cluster: drain it (kubectl drain gpu-1" in result.stderr
    assert not _calls(sim.calls(), "systemd-run") and not _calls(sim.calls(), "systemctl", "stop")
    # The option is in place: after the user's drained reboot the next `up` finds exclusive mode.
    assert "netns_mode=0" in sim.path(ROCE_MODPROBE).read_text()
    (sim.state / "rdma-netns").write_text("exclusive\n")
    again = sim.run(ROCE_CREATE)
    assert again.returncode == 0 and "gpu-1: RDMA subsystem in exclusive mode" in again.stdout
