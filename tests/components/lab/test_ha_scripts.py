"""The host steps of a highly available lab (three control planes behind kubeVip) run in the host
sandbox (tests/hostsim.py), each twice, the second run changing nothing:

  - kube-vip's static pod on the first control plane mounts super-admin.conf until `kubeadm init`
    is done and admin.conf after (kube-vip issue #684); on a joined control plane admin.conf at once;
    both variants are valid Pods for the API server's schema (kubernetes-validate);
  - the certificate upload takes the cluster's key from stdin, never prints it, refuses a bad one;
  - a control plane joins with its certificate key, then gets kube-vip;
  - a removed control plane's etcd member is removed from the first control plane, after its drain,
    one at a time, and a rerun removes nothing; a removed worker has no member to remove;
  - a joined control plane upgrades itself (`kubeadm upgrade node`) holding the one control-plane slot.
"""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from components.lab import kube_vip, kubeadm, scripts
from config.control_planes import KubeVip
from stacks.lab import kubeadm_settings
from tests.components.lab.test_host_scripts import _calls, needs_isolation, real_machine_untouched  # noqa: F401
from tests.components.lab.test_upgrade_scripts import JOIN_STDIN, REV, index, joined, kubectl, run, run_twice
from tests.conftest import host, lab_config
from tests.hostsim import HostSim

pytestmark = [needs_isolation, pytest.mark.usefixtures("real_machine_untouched")]

VIP = KubeVip(address="192.0.2.100", interface="ens18")
MANIFEST = scripts.KUBE_VIP_MANIFEST
CERT_KEY = "5e" * 32
CFG = lab_config(hosts=[host("cp-1", "192.0.2.10", "control-plane"), host("cp-2", "192.0.2.20", "control-plane"),
                        host("cp-3", "192.0.2.30", "control-plane"), host("gpu-1", "192.0.2.11", gpus=2)],
                 kubeVip={"address": "192.0.2.100", "interface": "ens18"})


def on_host(sim: HostSim) -> dict:
    text = sim.path(MANIFEST).read_text()
    pod = yaml.safe_load(text)
    assert kubernetes_validate.validate(pod, "1.34", strict=True) == "1.34"
    return pod


def kubeconfig_path(pod: dict) -> str:
    (volume,) = pod["spec"]["volumes"]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": volume["name"], "mountPath": kube_vip.ADMIN_CONF}]
    return str(volume["hostPath"]["path"])


def test_first_control_plane_kube_vip_mounts_super_admin_until_init(tmp_path):
    sim = HostSim(tmp_path)
    # before kubeadm init: no cluster on the host yet
    run_twice(sim, scripts.kube_vip_manifest(), stdin=kube_vip.manifest(VIP))
    pod = on_host(sim)
    assert kubeconfig_path(pod) == kube_vip.SUPER_ADMIN_CONF
    assert sim.path(MANIFEST).stat().st_mode & 0o777 == 0o600

    # kubeadm init (the stand-in writes nothing): the init step switches kube-vip back to admin.conf
    init_stdin = kubeadm.init_config(kubeadm_settings(CFG), CFG.control_planes[0])
    result = run(sim, scripts.kubeadm_init(), stdin=init_stdin)
    assert "control plane initialised" in result.stdout
    assert sim.path(MANIFEST).read_text() == kube_vip.manifest(VIP)
    assert kubeconfig_path(on_host(sim)) == kube_vip.ADMIN_CONF
    # initialised (admin.conf written by init): init and kube-vip again change nothing
    sim.path("/etc/kubernetes/admin.conf").write_text("apiVersion: v1\nkind: Config\n")
    _, calls1, second, _ = run_twice(sim, scripts.kubeadm_init(), stdin=init_stdin)
    assert not _calls(calls1, "kubeadm") and "already initialised" in second.stdout
    run_twice(sim, scripts.kube_vip_manifest(), stdin=kube_vip.manifest(VIP))
    assert kubeconfig_path(on_host(sim)) == kube_vip.ADMIN_CONF


def test_a_joined_control_plane_joins_then_gets_kube_vip_on_admin_conf(tmp_path):
    sim = HostSim(tmp_path)
    cp2 = next(h for h in CFG.hosts if h.name == "cp-2")
    join_stdin = kubeadm.join_config(kubeadm_settings(CFG), cp2, "abcdef.0123456789abcdef", "sha256:" + "0f" * 32,
                                     CERT_KEY)
    _, calls1, second, calls2 = run_twice(sim, scripts.kubeadm_join(), stdin=join_stdin)
    assert _calls(calls1, "kubeadm", "join") and not _calls(calls2, "kubeadm")
    seen = yaml.safe_load((sim.sim / "kubeadm-join-seen.yaml").read_text())
    assert seen["controlPlane"]["certificateKey"] == CERT_KEY
    assert seen["discovery"]["bootstrapToken"]["apiServerEndpoint"] == "192.0.2.100:6443"
    assert "node already joined" in second.stdout

    run_twice(sim, scripts.kube_vip_manifest(), stdin=kube_vip.manifest(VIP))
    assert kubeconfig_path(on_host(sim)) == kube_vip.ADMIN_CONF
    run(sim, scripts.kube_vip_manifest_delete())
    assert not sim.path(MANIFEST).exists()


def test_kube_vip_step_refuses_what_is_not_a_manifest(tmp_path):
    sim = HostSim(tmp_path)
    result = run(sim, scripts.kube_vip_manifest(), stdin="", rc=1)
    assert "no kube-vip manifest on stdin" in result.stderr
    assert not sim.path(MANIFEST).exists()


def test_certificates_are_uploaded_under_the_key_on_stdin_at_every_up(tmp_path):
    sim = HostSim(tmp_path)
    stdin = f"{CERT_KEY}\n# 2026-11-26T08:00:00+00:00\n"
    first, calls1, second, calls2 = run_twice(sim, scripts.upload_control_plane_certs(), stdin=stdin)
    for calls in (calls1, calls2):
        assert _calls(calls, "kubeadm") == [
            ["kubeadm", "init", "phase", "upload-certs", "--upload-certs", "--certificate-key", CERT_KEY]]
    assert CERT_KEY not in first.stdout + first.stderr + second.stdout + second.stderr
    start = sim.mark()
    bad = run(sim, scripts.upload_control_plane_certs(), stdin="not-a-key\n", rc=1)
    assert "no certificate key on stdin" in bad.stderr and not _calls(sim.calls_since(start), "kubeadm")


def test_a_removed_control_plane_loses_its_etcd_member_after_its_drain_one_at_a_time(tmp_path):
    sim = HostSim(tmp_path)
    five = [("cp-2", "192.0.2.20"), ("cp-3", "192.0.2.30"), ("cp-4", "192.0.2.40"), ("cp-5", "192.0.2.50"),
            ("gpu-1", "192.0.2.11")]
    run(sim, scripts.drain_removed_nodes(five, "cp-1"))
    sim.etcd_members(("8e9e05c52164694d", "cp-1", "192.0.2.10"), ("91bc3c398fb3c146", "cp-2", "192.0.2.20"),
                     ("fd422379fda50e48", "cp-3", "192.0.2.30"), ("a8266ecf031671f3", "cp-4", "192.0.2.40"),
                     ("b2c5a7c2d1e0f3a4", "cp-5", "192.0.2.50"))

    # 5 -> 3 control planes and the worker gone: drained first, then each member removed in turn
    stay = [("cp-2", "192.0.2.20"), ("cp-3", "192.0.2.30")]
    result, calls, second, calls2 = run_twice(sim, scripts.drain_removed_nodes(stay, "cp-1"))
    assert [m["name"] for m in sim.k8s()["etcdMembers"]] == ["cp-1", "cp-2", "cp-3"]
    removes = [c for c in kubectl(calls, "exec") if "remove" in c]
    assert [c[-1] for c in removes] == ["a8266ecf031671f3", "b2c5a7c2d1e0f3a4"]
    assert all(c[:3] == ["exec", "etcd-cp-1", "--"] for c in kubectl(calls, "exec"))
    last_drain = max(index(calls, "kubectl", "drain", n) for n in ("cp-4", "cp-5", "gpu-1"))
    assert last_drain < index(calls, "kubectl", "exec", "etcd-cp-1", "--", "etcdctl")
    assert "removing cp-4's etcd member a8266ecf031671f3" in result.stdout
    # the rerun finds nothing removed: no API call at all
    assert not _calls(calls2, "kubectl") and "removing" not in second.stdout


def test_a_joined_control_plane_upgrades_itself_holding_the_one_slot(tmp_path):
    sim = HostSim(tmp_path)
    joined(sim)
    sim.k8s_node("cp-2", kubeletVersion="v1.34.2", unschedulable=False, bootID="boot-1",
                 labels={"node-role.kubernetes.io/control-plane": ""})
    script = scripts.node_self_upgrade("cp-2", "1.35.0", REV, control_plane=True, driver=None, slots=1, slot_tries=2)
    start = sim.mark()
    run(sim, script, stdin=JOIN_STDIN)
    calls = sim.calls_since(start)
    assert index(calls, "kubectl", "drain", "cp-2") < index(calls, "kubeadm", "upgrade", "node")
    assert sim.k8s()["configmaps"] == {"gpu-cluster-upgrade-slot-0": {"node": "cp-2"}}
    assert sim.installed()["kubelet"] == f"1.35.0-{REV}"
    # the kubelet reports the new version: a rerun (the step retried) upgrades nothing again
    sim.k8s_node("cp-2", kubeletVersion="v1.35.0")
    _, calls1, _, _ = run_twice(sim, script, stdin=JOIN_STDIN)
    assert not _calls(calls1, "kubeadm", "upgrade")


def test_a_new_entry_point_drains_and_removes_the_former_first_control_plane(tmp_path):
    """Issue 34: cp-1 (where kubeadm init ran) left the config; cp-2 is the entry point now and
    holds no member list of its own, so the drain learns cp-1 from `former` (the deployed record):
    drained, its Node deleted, its etcd member removed through cp-2's etcd pod; a rerun is quiet."""
    sim = HostSim(tmp_path)
    sim.etcd_members(("8e9e05c52164694d", "cp-1", "192.0.2.10"), ("91bc3c398fb3c146", "cp-2", "192.0.2.20"),
                     ("fd422379fda50e48", "cp-3", "192.0.2.30"))
    stay = [("cp-2", "192.0.2.20"), ("cp-3", "192.0.2.30"), ("gpu-1", "192.0.2.11")]
    result, calls, _, calls2 = run_twice(sim, scripts.drain_removed_nodes(stay, "cp-2", former=("cp-1",)))
    assert [m["name"] for m in sim.k8s()["etcdMembers"]] == ["cp-2", "cp-3"]
    assert index(calls, "kubectl", "drain", "cp-1") < index(calls, "kubectl", "exec", "etcd-cp-2", "--", "etcdctl")
    assert all(c[:3] == ["exec", "etcd-cp-2", "--"] for c in kubectl(calls, "exec"))
    assert "removing cp-1's etcd member 8e9e05c52164694d" in result.stdout
    assert not [c for c in kubectl(calls, "drain") if c[1] != "cp-1"]  # nothing that stays
    # the rerun: cp-1's Node is gone and so is its member
    assert not [c for c in kubectl(calls2, "exec") if "remove" in c]
