"""Kubelet serving certificates on lab (components/lab/kubelet_serving.py): every kubelet asks for
one (serverTLSBootstrap; the real kubeadm keeps it in the kubelet config it writes:
test_kubeadm_real.py) and kubelet-csr-approver approves the requests of the configured hosts only.

The approver is held to its own sources at the pinned tag (tests/components/lab/upstream/
kubelet-csr-approver-v1.2.14/, SOURCE.md says why copied): the same RBAC as its deploy/k8s
ClusterRole, bound as its ClusterRoleBinding, and only flags its cmd.go defines, set as the
environment variables its flag parser (ff.WithEnvVars) reads; the regex it is given matches the
hosts' names and nothing else, as Go's regexp would (the pattern uses only syntax Python's re reads
the same way: anchors, alternation, escaped literals)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import yaml

from components import versions
from components.lab import kubeadm, kubelet_serving
from config.lab import Host
from render import program
from stacks.lab import kubeadm_settings
from tests.conftest import host, lab_config

UPSTREAM = Path(__file__).parent / "upstream" / "kubelet-csr-approver-v1.2.14"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def _upstream(name: str) -> dict:
    return yaml.safe_load((UPSTREAM / name).read_text())


def _flags() -> set[str]:
    """The flags internal/cmd/cmd.go defines on its FlagSet."""
    return set(re.findall(r'fs\.(?:Int|String|Bool)\("([a-z-]+)"', (UPSTREAM / "cmd.go.txt").read_text()))


def _env_name(flag: str) -> str:
    # peterbourgon/ff WithEnvVars: upper case, '-' to '_' (no prefix: cmd.go sets none)
    return flag.upper().replace("-", "_")


def _plan_objects(stack: str = "lab-ha") -> dict[str, program.Registration]:
    plan = program.run(stack)
    return {r.name: r for r in plan.resources if r.name.startswith("kubelet-serving")}


def test_the_rbac_is_upstreams() -> None:
    objs = _plan_objects()
    role = objs["kubelet-serving-role"].inputs
    assert role["rules"] == _upstream("clusterrole.yaml")["rules"]
    binding, upstream_binding = objs["kubelet-serving-binding"].inputs, _upstream("rolebinding.yaml")
    assert binding["roleRef"] == upstream_binding["roleRef"]
    assert binding["subjects"] == upstream_binding["subjects"]
    assert objs["kubelet-serving-account"].inputs["metadata"] == _upstream("serviceaccount.yaml")["metadata"]


def test_the_deployment_uses_only_flags_the_binary_reads() -> None:
    spec = _plan_objects()["kubelet-serving-deployment"].inputs["spec"]
    upstream = _upstream("deployment.yaml")["spec"]["template"]["spec"]["containers"][0]
    (container,) = spec["template"]["spec"]["containers"]
    flags = _flags()
    assert {"provider-regex", "provider-ip-prefixes", "bypass-dns-resolution", "leader-election"} <= flags
    assert {e["name"] for e in container["env"]} <= {_env_name(f) for f in flags}
    assert {a.lstrip("-") for a in container["args"] if a.startswith("-")} <= flags
    assert container["args"] == upstream["args"]  # metrics :8080, probe :8081, leader election
    assert container["livenessProbe"] == upstream["livenessProbe"]
    assert container["image"] == versions.KUBELET_CSR_APPROVER_IMAGE
    assert versions.KUBELET_CSR_APPROVER_IMAGE.endswith(":" + UPSTREAM.name.rsplit("-", 1)[1])
    # a cluster add-on: tolerates the control plane's taint as upstream does, and runs two replicas
    ours = {(t["key"], t["effect"]) for t in spec["template"]["spec"]["tolerations"]}
    theirs = {(t["key"], t["effect"]) for t in _upstream("deployment.yaml")["spec"]["template"]["spec"]["tolerations"]}
    assert theirs <= ours
    assert spec["replicas"] == _upstream("deployment.yaml")["spec"]["replicas"]


def _host(name: str, address: str) -> Host:
    return Host.model_validate(host(name, address))


def test_only_the_configured_hosts_are_approved() -> None:
    hosts = (_host("gpu-1", "192.0.2.11"), _host("gpu-2", "192.0.2.12"), _host("cp-1", "192.0.2.10"))
    env = kubelet_serving.provider_env(hosts)
    regex = re.compile(env["PROVIDER_REGEX"])
    for name in ("gpu-1", "gpu-2", "cp-1"):
        assert regex.search(name), name
    for name in ("gpu-10", "xgpu-1", "gpu-3", "cp-1.example.org", "gpu-1\nx", ""):
        assert not regex.search(name), name
    prefixes = [ipaddress.ip_network(p) for p in env["PROVIDER_IP_PREFIXES"].split(",")]
    assert {str(p) for p in prefixes} == {"192.0.2.10/32", "192.0.2.11/32", "192.0.2.12/32"}
    assert not any(ipaddress.ip_address("192.0.2.13") in p for p in prefixes)
    assert env["BYPASS_DNS_RESOLUTION"] == "true"


def test_the_lab_stack_approves_its_own_hosts() -> None:
    spec = _plan_objects("lab")["kubelet-serving-deployment"].inputs["spec"]
    env = {e["name"]: e["value"] for e in spec["template"]["spec"]["containers"][0]["env"]}
    cfg_hosts = program.run("lab").outputs["nodes"]
    regex = re.compile(env["PROVIDER_REGEX"])
    assert all(regex.search(n) for n in cfg_hosts)
    assert len(env["PROVIDER_IP_PREFIXES"].split(",")) == len(cfg_hosts)


def test_every_kubelet_asks_for_a_serving_certificate() -> None:
    cfg = lab_config()
    _, _, kubelet = yaml.safe_load_all(kubeadm.init_config(kubeadm_settings(cfg), cfg.control_planes[0]))
    assert kubelet["serverTLSBootstrap"] is True


def test_dev_and_gke_get_no_approver() -> None:
    for stack in ("dev",):
        assert not _plan_objects(stack)
