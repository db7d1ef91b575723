"""HA lab control planes (config/control_planes.py): 1, 3 or 5 control planes, one API endpoint
(kubeVip or controlPlaneEndpoint) with more than one, the VIP in the address plan, and the quorum
rule on membership changes (LabStack.change_problems: etcd judges a removal, issue 34)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from config.lab import DeployedLab
from render import __main__ as render_main
from render import program
from tests.config.refusals import accepted, problems, reported
from tests.conftest import PROJECT_DIR, host, lab_config, lab_raw, stack_config_with

VIP = {"address": "192.0.2.100", "interface": "ens18"}


def cps(n: int, start: int = 1) -> list[dict[str, Any]]:
    return [host(f"cp-{i}", f"192.0.2.{10 * i}", "control-plane") for i in range(start, start + n)]


def ha(n: int = 3, **overrides: Any) -> dict[str, Any]:
    return lab_raw(hosts=[*cps(n), host("gpu-1", "192.0.2.11", gpus=2)], **({"kubeVip": VIP} | overrides))


@pytest.mark.parametrize("n", [2, 4])
def test_an_even_number_of_control_planes_is_refused_naming_the_quorum(n):
    reported(ha(n), "hosts", f"{n} hosts have role control-plane", "1, 3 or 5", "quorum")


@pytest.mark.parametrize("n", [1, 3, 5])
def test_one_three_or_five_control_planes_with_a_vip(n):
    cfg = accepted(ha(n))
    assert len(cfg.control_planes) == n
    assert cfg.api_endpoint == "192.0.2.100:6443"


def test_a_load_balancer_instead_of_the_vip():
    cfg = accepted(ha(3, kubeVip={}, controlPlaneEndpoint="k8s-api.lab.example:6443"))
    assert cfg.kube_vip is None and cfg.api_endpoint == "k8s-api.lab.example:6443"


def test_several_control_planes_need_one_endpoint_and_only_one():
    reported(ha(3, kubeVip={}), "controlPlaneEndpoint", "kubeVip", "load balancer")
    reported(ha(3, controlPlaneEndpoint="k8s-api.lab.example:6443"), "kubeVip", "not both")


@pytest.mark.parametrize(
    ("vip", "key", "words"),
    [
        ({"address": "192.0.2.20", "interface": "ens18"}, "kubeVip.address", ("hosts[1].address", "cp-2")),
        ({"address": "127.0.0.5", "interface": "ens18"}, "kubeVip.address", ("loopback",)),
        ({"address": "192.0.2.100", "interface": "lo"}, "kubeVip.interface", ("interface name",)),
        ({"address": "192.0.2.100", "interface": "a-name-too-long-for-linux"}, "kubeVip.interface", ("1-15",)),
        ({"address": "198.51.100.7", "interface": "ens18", "subnet": "192.0.2.0/24"}, "kubeVip.address",
         ("not a host address of kubeVip.subnet 192.0.2.0/24", "ARP")),
        ({"address": "192.0.2.255", "interface": "ens18", "subnet": "192.0.2.0/24"}, "kubeVip.address", ("subnet",)),
        ({"address": "192.0.2.5", "interface": "ens18", "subnet": "192.0.2.0/28"}, "hosts[1].address",
         ("cp-2 192.0.2.20 is outside kubeVip.subnet",)),
    ],
    ids=["a-host-address", "loopback", "lo", "long-interface", "outside-subnet", "broadcast", "cp-outside-subnet"],
)
def test_the_vip_is_a_free_address_in_the_control_planes_segment(vip, key, words):
    reported(ha(3, kubeVip=vip), key, *words)


def test_the_vip_is_in_the_address_plan():
    # inside the pod or service range: routed into the cluster
    reported(ha(3, kubeVip={"address": "10.244.3.4", "interface": "ens18"}), "podCidr", "kubeVip.address 10.244.3.4")
    reported(ha(3, kubeVip={"address": "10.96.0.50", "interface": "ens18"}), "serviceCidr", "kubeVip.address")
    # the control planes' subnet is a node network: no cluster range may overlap it
    reported(ha(3, podCidr="192.0.0.0/16", kubeVip={**VIP, "subnet": "192.0.2.0/24"}), "kubeVip.subnet",
             "overlaps podCidr")


def test_kube_vip_is_a_lab_key():
    raw = {"platform": "dev", "kubeVip": VIP}
    found = problems(raw)
    assert any(k == "kubeVip" and "lab" in m for k, m in found), found


def test_a_refused_control_plane_count_exits_2_naming_the_key(tmp_path, monkeypatch, capsys):
    """The real program: `python -m render` of the HA example with a fourth control plane."""
    hosts = yaml.safe_load((PROJECT_DIR / "Pulumi.lab-ha.yaml").read_text())["config"]["gpu-cluster:hosts"]
    values = stack_config_with("lab-ha", hosts=[*hosts, {**hosts[0], "name": "cp-4", "address": "192.0.2.40"}])
    real = program.stack_config
    monkeypatch.setattr(program, "stack_config",
                        lambda stack, *a, **k: values if stack == "lab-ha" else real(stack, *a, **k))
    rc = render_main.main(["lab-ha", "--no-check", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "gpu-cluster:hosts" in err and "4 hosts have role control-plane" in err


# ------------------------------------------------------------------------------------------------
# membership changes against what the previous `up` deployed

def deployed(control_planes: list[dict[str, Any]], **record: str) -> DeployedLab:
    first = control_planes[0]
    return DeployedLab.model_validate({
        "kubernetesVersion": "1.34.2", "podCidr": "10.244.0.0/16", "serviceCidr": "10.96.0.0/12",
        "controlPlaneEndpoint": "192.0.2.100:6443", "controlPlane": f"{first['name']} {first['address']}",
        "controlPlanes": ", ".join(f"{h['name']} {h['address']}" for h in control_planes), **record})


def change(was: list[dict[str, Any]], now: list[dict[str, Any]], **config: Any) -> dict[str, str]:
    cfg = lab_config(hosts=[*now, host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP, **config)
    return dict(cfg.change_problems(deployed(was)))


def test_the_record_lists_every_control_plane():
    cfg = lab_config(hosts=[*cps(3), host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP)
    record = cfg.deployed_record()
    assert record["controlPlanes"] == "cp-1 192.0.2.10, cp-2 192.0.2.20, cp-3 192.0.2.30"
    assert record["controlPlaneEndpoint"] == "192.0.2.100:6443"
    assert cfg.change_problems(DeployedLab.model_validate(record)) == []


@pytest.mark.parametrize(
    ("was", "now"),
    [
        (cps(1), cps(3)),  # grow: members join one after another
        (cps(3), cps(5)),
        (cps(3), [*cps(2), *cps(1, start=4)]),  # replace a dead one: one removal, one addition
        (cps(5), cps(3)),  # 3 of 5 stay: a majority of the old membership
        (cps(5), [*cps(3), *cps(2, start=6)]),  # two replaced at once, 3 of 5 stay
        # Issue 34: more than (n - 1) // 2 removed at once. Each removal commits while the removed
        # hosts are up; a dead one is marked hosts[].gone first, and etcd itself refuses a removal
        # that cannot commit (tests/components/lab/test_gone_hosts_real.py): 3 -> 1 has a path.
        (cps(3), cps(1)),
        (cps(3), [cps(1)[0], *cps(2, start=4)]),
        (cps(5), [*cps(2), *cps(3, start=6)]),
    ],
    ids=["1-to-3", "3-to-5", "replace-one-of-3", "5-to-3", "replace-two-of-5", "3-to-1", "replace-two-of-3",
         "replace-three-of-5"],
)
def test_changes_etcd_can_commit_are_accepted(was, now):
    assert change(was, now) == {}
    assert change(was, now, allowRebuild=True) == {}


def test_a_record_without_the_control_planes_is_not_judged():
    cfg = lab_config(hosts=[*cps(1), host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP)
    record = deployed(cps(3)).model_dump(by_alias=True) | {"controlPlanes": ""}
    assert cfg.change_problems(DeployedLab.model_validate(record)) == []


def test_a_rebuild_makes_membership_moot_and_the_endpoint_key_is_the_one_set():
    # a new first control plane with allowRebuild: a new cluster, nothing to keep a quorum of
    assert change(cps(3), cps(3, start=4), allowRebuild=True) == {}
    # a VIP where the first control plane's address was: named as kubeVip, refused without allowRebuild
    cfg = lab_config(hosts=[*cps(1), host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP)
    found = dict(cfg.change_problems(deployed(cps(1), controlPlaneEndpoint="192.0.2.10:6443")))
    assert "192.0.2.10:6443 -> 192.0.2.100:6443" in found["kubeVip"]


# no special first server (issue 34)

def test_the_first_control_plane_may_leave_while_a_deployed_one_stays():
    """cp-1 (where kubeadm init ran) replaced by cp-4, or marked gone: the cluster lives on in the
    etcd of cp-2 and cp-3, so it is a control-plane change, not a rebuild; the record carries the
    init host on, which the init step's triggers keep (nothing is replaced)."""
    replaced = [*cps(2, start=2), *cps(1, start=4)]
    assert change(cps(3), replaced) == {}
    cfg = lab_config(hosts=[*replaced, host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP)
    assert cfg.entry_point.name == "cp-2"
    assert cfg.init_identity(deployed(cps(3))) == ("cp-1", "192.0.2.10")
    record = cfg.deployed_record(deployed(cps(3)))
    assert record["controlPlane"] == "cp-1 192.0.2.10"
    assert record["controlPlanes"] == "cp-2 192.0.2.20, cp-3 192.0.2.30, cp-4 192.0.2.40"
    gone = [{**cps(1)[0], "gone": True}, *cps(2, start=2)]
    assert change(cps(3), gone) == {}


def test_no_deployed_control_plane_staying_is_a_rebuild():
    found = change(cps(3), cps(3, start=4))
    assert "needs a new cluster" in found["hosts[0].name"] and "no deployed control plane" in found["hosts[0].name"]
    # with allowRebuild it is one: the new cluster's identity is its own first control plane
    cfg = lab_config(hosts=[*cps(3, start=4), host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP, allowRebuild=True)
    assert cfg.init_identity(deployed(cps(3))) == ("cp-4", "192.0.2.40")
    # so is a new pod range: the init host recorded (cp-0, long gone) gives way to the entry point
    was = deployed(cps(3), controlPlane="cp-0 192.0.2.5")
    kept = lab_config(hosts=[*cps(3), host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP)
    assert kept.init_identity(was) == ("cp-0", "192.0.2.5")
    rebuilt = lab_config(hosts=[*cps(3), host("gpu-1", "192.0.2.11", gpus=2)], kubeVip=VIP, podCidr="10.245.0.0/16",
                         allowRebuild=True)
    assert rebuilt.init_identity(was) == ("cp-1", "192.0.2.10")
