"""The HA example stack (Pulumi.lab-ha.yaml: three control planes behind kubeVip, two GPU workers),
evaluated by the real program under the recording mocks:

  - the whole-cluster check models all three control planes alike (role label, NoSchedule taint),
    and what tolerates them (the DaemonSets that run on every node) lands on each;
  - kube-vip's static pod is written before `kubeadm init` on the first control plane and after
    `kubeadm join` on the others, and is a valid Pod for the API server (kubernetes-validate);
  - the control planes join one after another, each with the one certificate upload of this `up`;
  - the endpoint every node and the kubeconfig use is the VIP, recorded in `deployed` with the
    control planes the next `up` compares against.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components import versions
from render import cluster, program
from render.cluster.nodes import CONTROL_PLANE_ROLE

COMMAND = "command:remote:Command"
CONTROL_PLANES = ("cp-1", "cp-2", "cp-3")


@pytest.fixture(scope="module")
def plan() -> program.Plan:
    return program.run("lab-ha")


def command(plan: program.Plan, name: str) -> program.Registration:
    (r,) = [r for r in plan.of_type(COMMAND) if r.name == name]
    return r


def deps(plan: program.Plan, name: str) -> set[str]:
    return {u.split("::")[-1] for u in command(plan, name).dependencies}


def test_the_whole_cluster_check_models_every_control_plane(plan, upstream_dir: Path, monkeypatch):
    monkeypatch.setenv("GPU_CLUSTER_UPSTREAM", str(upstream_dir))
    report = cluster.check(plan, plan.config, upstream_dir)
    assert report.ok, report.problems
    control_planes = [n for n in report.modelled if n.group == "control-plane"]
    assert [n.name for n in control_planes] == list(CONTROL_PLANES)
    for node in control_planes:
        assert CONTROL_PLANE_ROLE in node.labels
        assert node.taints == [{"key": CONTROL_PLANE_ROLE, "value": "", "effect": "NoSchedule"}]
    # What tolerates the control planes is placed on all three, not on the first alone.
    on_control_planes = [p for p in report.placements if p.workload.daemon and "cp-1" in p.nodes]
    assert on_control_planes, "no DaemonSet tolerates the control planes"
    for p in on_control_planes:
        assert set(CONTROL_PLANES) <= set(p.nodes), (p.workload, p.nodes)


def test_kube_vip_goes_on_before_init_on_the_first_and_after_join_on_the_others(plan):
    assert "control-plane-kube-vip" in deps(plan, "control-plane-init")
    for name in ("cp-2", "cp-3"):
        assert f"{name}-join" in deps(plan, f"{name}-kube-vip")
        assert f"{name}-kube-vip" not in deps(plan, f"{name}-join")
    for name in ("control-plane-kube-vip", "cp-2-kube-vip", "cp-3-kube-vip"):
        step = command(plan, name)
        pod = yaml.safe_load(step.inputs["stdin"])
        assert kubernetes_validate.validate(pod, "1.34", strict=True) == "1.34"
        (container,) = pod["spec"]["containers"]
        assert container["image"] == versions.KUBE_VIP_IMAGE
        env = {e["name"]: e.get("value") for e in container["env"]}  # vip_nodename: valueFrom
        assert env["address"] == "192.0.2.100" and env["vip_interface"] == "ens18" and env["vip_arp"] == "true"
        assert pod["spec"]["hostNetwork"] is True
        assert "rm -f /etc/kubernetes/manifests/kube-vip.yaml" in step.inputs["delete"]
    assert not [r for r in plan.of_type(COMMAND) if r.name.startswith("gpu-") and r.name.endswith("-kube-vip")]


def test_control_planes_join_one_after_another_with_this_ups_certificates(plan):
    assert "membership-certs" in deps(plan, "cp-2-join")
    assert "cp-2-ready" in deps(plan, "cp-3-join")  # etcd: one new member at a time
    assert "cp-3-ready" not in deps(plan, "gpu-1-join")  # workers do not wait for them
    certs = command(plan, "membership-certs")
    assert certs.inputs["connection"]["host"] == "192.0.2.10" and certs.inputs["stdin"] == program.SECRET_MARKER
    assert "membership-drain" in deps(plan, "membership-certs")


def test_the_endpoint_is_the_vip_and_deployed_lists_the_control_planes(plan):
    assert plan.config.api_endpoint == "192.0.2.100:6443"
    assert plan.outputs["apiEndpoint"] == "192.0.2.100:6443"
    deployed = plan.outputs["deployed"]
    assert deployed["controlPlaneEndpoint"] == "192.0.2.100:6443"
    assert deployed["controlPlanes"] == "cp-1 192.0.2.10, cp-2 192.0.2.20, cp-3 192.0.2.30"
