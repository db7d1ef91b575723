"""The stack config models (config/), the project file's typed config block and the
committed stack files: every user error is a ConfigError naming the key and what is allowed, raised
before anything is registered."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pulumi
import pytest
import yaml
from jsonschema import Draft202012Validator
from pulumi.runtime.config import set_all_config
from pydantic import ValidationError

import config
from components import versions
from config.addons import Addons
from config.fields import check_host_key
from config.lab import Cni, NvidiaDriver
from render import program
from tests.conftest import ED25519, PROJECT_DIR, host, lab_config, lab_raw

NS = config.NAMESPACE
PLAINTEXT_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAtopsecretvalue\n-----END OPENSSH PRIVATE KEY-----"
BASTION = {"host": "bastion.lab.example", "sshUser": "jump", "sshPort": 2222, "hostKey": ED25519}


def problems_of(raw: dict[str, Any], secret_keys: set[str] | frozenset[str] = frozenset({"sshPrivateKey"})) -> config.ConfigError:
    with pytest.raises(config.ConfigError) as info:
        config.parse(raw, secret_keys)
    return info.value


def assert_problem(err: config.ConfigError, key: str, *words: str) -> str:
    """`key` is reported (in .problems and as gpu-cluster:<key> in the text) with all `words`."""
    messages = [message for k, message in err.problems if k == key]
    assert messages, f"{key} not reported; problems: {err.problems}"
    assert f"{NS}:{key}: " in str(err)
    joined = " | ".join(messages)
    for word in words:
        assert word in joined, f"{word!r} not in message for {key}: {joined}"
    return joined


@pytest.fixture
def clean_runtime_config(monkeypatch):
    """No PULUMI_CONFIG from the environment; the runtime config map is emptied afterwards."""
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_SECRET_KEYS", raising=False)
    yield
    set_all_config({}, [])


# ---------------------------------------------------------------------------------------------
# Bad configs: one key each


def test_no_control_plane():
    err = problems_of(lab_raw(hosts=[host("w-1", "192.0.2.11"), host("w-2", "192.0.2.12")]))
    assert_problem(err, "hosts", "control-plane")


def test_no_hosts_at_all_on_lab():
    err = problems_of({"platform": "lab"})
    assert_problem(err, "hosts", "control-plane")


def test_three_control_planes_need_an_endpoint():
    hosts = [host(f"cp-{i}", f"192.0.2.1{i}", "control-plane") for i in (1, 2, 3)]
    err = problems_of(lab_raw(hosts=hosts))
    assert_problem(err, "controlPlaneEndpoint", "host:port")

    cfg = lab_config(hosts=hosts, controlPlaneEndpoint="k8s-api.lab.example:6443")
    assert len(cfg.control_planes) == 3
    assert cfg.api_endpoint == "k8s-api.lab.example:6443"


def test_malformed_control_plane_endpoint():
    err = problems_of(lab_raw(controlPlaneEndpoint="https://k8s-api.lab.example"))
    assert_problem(err, "controlPlaneEndpoint", "host:port")


def test_duplicate_host_names():
    hosts = [host("cp-1", "192.0.2.10", "control-plane"), host("cp-1", "192.0.2.11")]
    err = problems_of(lab_raw(hosts=hosts))
    assert_problem(err, "hosts[1].name", "duplicates hosts[0].name", "cp-1")


def test_duplicate_addresses():
    hosts = [host("cp-1", "192.0.2.10", "control-plane"), host("gpu-1", "192.0.2.10", gpus=1)]
    err = problems_of(lab_raw(hosts=hosts))
    assert_problem(err, "hosts[1].address", "duplicates hosts[0].address", "192.0.2.10")


def test_pod_cidr_containing_a_host_address():
    err = problems_of(lab_raw(podCidr="192.0.2.0/24"))
    assert_problem(err, "podCidr", "192.0.2.0/24", "hosts[0].address", "no host")


def test_pod_cidr_overlapping_service_cidr():
    err = problems_of(lab_raw(podCidr="10.96.0.0/16", serviceCidr="10.96.0.0/12"))
    assert_problem(err, "podCidr", "overlaps serviceCidr", "10.96.0.0/12")


def test_pod_cidr_too_small():
    err = problems_of(lab_raw(podCidr="10.244.0.0/25"))
    assert_problem(err, "podCidr", "/24")


def test_service_cidr_containing_a_host_address():
    err = problems_of(lab_raw(serviceCidr="192.0.2.0/24"))
    assert_problem(err, "serviceCidr", "192.0.2.0/24", "hosts[0].address", "no host")


def test_invalid_cidr():
    err = problems_of(lab_raw(podCidr="10.244.0.0/33"))
    assert_problem(err, "podCidr")


def test_unknown_cni():
    err = problems_of(lab_raw(cni="weave"))
    assert_problem(err, "cni", "flannel", "calico", "weave")


def test_unsupported_kubernetes_minor():
    err = problems_of(lab_raw(kubernetesVersion="1.20.0"))
    message = assert_problem(err, "kubernetesVersion", "1.20", "allowed")
    for minor in versions.KUBERNETES_SUPPORTED_MINORS:
        assert minor in message


@pytest.mark.parametrize("version", ["1.34", "latest", "1.34.2-rc.0", ""])
def test_malformed_kubernetes_version(version):
    err = problems_of(lab_raw(kubernetesVersion=version))
    assert_problem(err, "kubernetesVersion", "full version", "1.34.2")


def test_kubernetes_version_leading_v_is_dropped():
    assert lab_config(kubernetesVersion="v1.33.5").kubernetes_version == "1.33.5"
    assert lab_config(kubernetesVersion="v1.33.5").kubernetes_minor == "1.33"


def test_negative_gpus():
    hosts = [host("cp-1", "192.0.2.10", "control-plane"), host("gpu-1", "192.0.2.11", gpus=-1)]
    err = problems_of(lab_raw(hosts=hosts))
    assert_problem(err, "hosts[1].gpus", "0 or more")


def test_lab_without_ssh_key_secret():
    err = problems_of(lab_raw(), secret_keys=set())
    assert_problem(err, "sshPrivateKey", "secret", "--secret")
    assert f"{NS}:sshPrivateKey: " in str(err)


def test_ssh_private_key_as_plaintext_is_reported_without_its_value():
    err = problems_of(lab_raw(sshPrivateKey=PLAINTEXT_KEY), secret_keys=set())
    assert_problem(err, "sshPrivateKey", "secret")
    text = str(err) + repr(err) + repr(err.problems) + repr(err.args)
    assert PLAINTEXT_KEY not in text
    assert "topsecretvalue" not in text
    assert "BEGIN OPENSSH" not in text


def test_kubeconfig_as_plaintext_is_reported_without_its_value():
    err = problems_of({"platform": "dev", "kubeContext": "minikube", "kubeconfig": "apiVersion: v1 topsecret"})
    assert_problem(err, "kubeconfig", "secret")
    assert "topsecret" not in str(err) + repr(err.problems)


@pytest.mark.parametrize(
    "key",
    [
        "not-a-key",
        "ssh-ed25519 AAAA",  # base64 part too short
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE8N2wz1xVb2cNQv7m4s1M8pC1xq2mC5yY0d3x7lW9eJ extra",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA!E8N2wz1xVb2cNQv7m4s1M8pC1xq2mC5yY0d3x7lW9eJ",
        "192.0.2.10 " + ED25519,  # with the host column of ssh-keyscan
    ],
)
def test_malformed_host_key(key):
    hosts = [host("cp-1", "192.0.2.10", "control-plane", hostKey=key)]
    err = problems_of(lab_raw(hosts=hosts))
    assert_problem(err, "hosts[0].hostKey", "ssh-keyscan", "ssh-ed25519")


def test_host_key_of_unsupported_type():
    dss = "ssh-dss AAAAB3NzaC1kc3MAAACBAP1/U4EddRIpUt9KnC7s5Of2EbdSPO9EAMMeP4C2USZpRV1AIlH7WT2NWPq"
    hosts = [host("cp-1", "192.0.2.10", "control-plane", hostKey=dss)]
    err = problems_of(lab_raw(hosts=hosts))
    assert_problem(err, "hosts[0].hostKey", "types:", "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256")


def test_missing_host_key():
    bare = {"name": "cp-1", "address": "192.0.2.10", "role": "control-plane"}
    err = problems_of(lab_raw(hosts=[bare]))
    assert_problem(err, "hosts[0].hostKey", "required")


def test_bastion_host_key_is_checked():
    err = problems_of(lab_raw(bastion={**BASTION, "hostKey": "ssh-dss AAAA"}))
    assert_problem(err, "bastion.hostKey", "ssh-ed25519")


@pytest.mark.parametrize("name", ["CP-1", "cp_1", "-cp", "cp-", "a" * 64, "cp.1"])
def test_bad_host_name(name):
    err = problems_of(lab_raw(hosts=[host(name, "192.0.2.10", "control-plane")]))
    assert_problem(err, "hosts[0].name", "lowercase", "RFC 1123")


def test_unknown_key_is_not_a_known_key():
    err = problems_of(lab_raw(podCIDR="10.244.0.0/16"))
    assert_problem(err, "podCIDR", "not a known key")


def test_unknown_nested_key_is_not_a_known_key():
    hosts = [host("cp-1", "192.0.2.10", "control-plane", sshport=22)]
    err = problems_of(lab_raw(hosts=hosts))
    assert_problem(err, "hosts[0].sshport", "not a known key")


def test_unknown_platform():
    err = problems_of(lab_raw(platform="eks"))
    assert_problem(err, "platform", "lab", "dev", "gke", "eks")


def test_missing_platform():
    raw = lab_raw()
    del raw["platform"]
    err = problems_of(raw)
    assert_problem(err, "platform", "required")


def test_unknown_host_role():
    err = problems_of(lab_raw(hosts=[host("cp-1", "192.0.2.10", "master")]))
    assert_problem(err, "hosts[0].role", "control-plane", "worker")


@pytest.mark.parametrize("port", [0, 65536, 70000, -22])
def test_ssh_port_out_of_range(port):
    err = problems_of(lab_raw(hosts=[host("cp-1", "192.0.2.10", "control-plane", sshPort=port)]))
    assert_problem(err, "hosts[0].sshPort", "65535" if port > 0 else "1")


def test_bastion_ssh_port_out_of_range():
    err = problems_of(lab_raw(bastion={**BASTION, "sshPort": 0}))
    assert_problem(err, "bastion.sshPort", "1")


@pytest.mark.parametrize("address", ["192.0.2.300", "192.0.2", "cp-1.lab.example", "2001:db8::1", ""])
def test_invalid_ipv4_address(address):
    err = problems_of(lab_raw(hosts=[host("cp-1", address, "control-plane")]))
    assert_problem(err, "hosts[0].address", "IPv4")


def test_dev_without_kube_context_and_kubeconfig():
    err = problems_of({"platform": "dev"}, secret_keys=set())
    assert_problem(err, "kubeContext", "gpu-cluster:kubeconfig", "kubeContext")


def test_dev_with_empty_kube_context_and_no_kubeconfig():
    # "" is what Pulumi injects from the project default when the stack does not set it.
    err = problems_of({"platform": "dev", "kubeContext": ""}, secret_keys=set())
    assert_problem(err, "kubeContext", "kubeconfig")


def test_dev_with_kubeconfig_secret_only_is_fine():
    cfg = config.parse({"platform": "dev"}, {"kubeconfig"})
    assert cfg.platform is config.Platform.DEV
    assert cfg.kube_context is None


def test_dev_with_kube_context_only_is_fine():
    cfg = config.parse({"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"]})
    assert cfg.kube_context == "minikube"
    assert cfg.gpu_nodes == ("minikube",)


def test_gpu_nodes_on_lab_rejected():
    err = problems_of(lab_raw(gpuNodes=["gpu-1"]))
    assert_problem(err, "gpuNodes", "dev", "hosts[].gpus")


@pytest.mark.parametrize("branch", ["57", "570-server", "latest", "5700"])
def test_bad_nvidia_driver_branch(branch):
    err = problems_of(lab_raw(nvidiaDriver={"branch": branch}))
    assert_problem(err, "nvidiaDriver.branch", "branch number", "570")


def test_bad_nvidia_driver_version():
    err = problems_of(lab_raw(nvidiaDriver={"branch": "570", "version": "latest; rm -rf /"}))
    assert_problem(err, "nvidiaDriver.version", "Debian package version")


def test_bad_containerd_version():
    err = problems_of(lab_raw(containerdVersion="1.7.27 && reboot"))
    assert_problem(err, "containerdVersion", "Debian package version")


@pytest.mark.parametrize("version", ["2.0.5-1", "2.1.3-1", "1.5.11-1"])
def test_containerd_outside_1_6_and_1_7_is_refused(version):
    err = problems_of(lab_raw(containerdVersion=version))
    assert_problem(err, "containerdVersion", "2.x is not supported yet")


@pytest.mark.parametrize("version", ["1.6.33-1", "1.7.27-1"])
def test_containerd_1_6_and_1_7_are_accepted(version):
    cfg = config.parse(lab_raw(containerdVersion=version), {"sshPrivateKey"})
    assert cfg.containerd_version == version


def test_several_problems_in_one_error():
    hosts = [
        host("CP_1", "192.0.2.300", "control-plane", sshPort=0),
        host("gpu-1", "192.0.2.11", gpus=-2, hostKey="nope"),
    ]
    err = problems_of(lab_raw(hosts=hosts, cni="weave", podCIDR="10.0.0.0/8",
                              kubernetesVersion="1.20.0", sshPrivateKey=PLAINTEXT_KEY), secret_keys=set())
    keys = {k for k, _ in err.problems}
    assert keys >= {
        "sshPrivateKey", "hosts[0].name", "hosts[0].address", "hosts[0].sshPort", "hosts[1].gpus",
        "hosts[1].hostKey", "cni", "podCIDR", "kubernetesVersion",
    }
    lines = str(err).splitlines()
    assert lines[0] == "invalid stack configuration:"
    assert len(lines) == 1 + len(err.problems)
    assert all(line.startswith(f"  {NS}:") for line in lines[1:])
    assert PLAINTEXT_KEY not in str(err)


def test_several_cross_field_problems_in_one_error():
    hosts = [
        host("cp-1", "192.0.2.10", "control-plane"),
        host("cp-1", "192.0.2.10", "control-plane"),
    ]
    err = problems_of(lab_raw(hosts=hosts, serviceCidr="192.0.2.0/24", gpuNodes=["x"]), secret_keys=set())
    keys = [k for k, _ in err.problems]
    for key in ("controlPlaneEndpoint", "sshPrivateKey", "hosts[1].name", "hosts[1].address",
                "serviceCidr", "gpuNodes"):
        assert key in keys


# ---------------------------------------------------------------------------------------------
# Valid configs


def test_minimal_lab():
    raw = {"platform": "lab", "hosts": [host("cp-1", "192.0.2.10", "control-plane")]}
    cfg = config.parse(raw, {"sshPrivateKey"})
    assert cfg.platform is config.Platform.LAB
    assert [h.name for h in cfg.control_planes] == ["cp-1"]
    assert cfg.workers == ()
    assert cfg.hosts[0].ssh_user == "ubuntu"
    assert cfg.hosts[0].ssh_port == 22
    assert cfg.hosts[0].gpus == 0 and not cfg.hosts[0].is_gpu
    assert cfg.hosts[0].address == ipaddress.IPv4Address("192.0.2.10")


def test_lab_builder_config():
    cfg = lab_config()
    assert [h.name for h in cfg.workers] == ["gpu-1", "cpu-1"]
    assert [h.is_gpu for h in cfg.hosts] == [False, True, False]


def test_lab_with_bastion():
    cfg = lab_config(bastion=BASTION)
    assert cfg.bastion is not None
    assert cfg.bastion.host == "bastion.lab.example"
    assert cfg.bastion.ssh_user == "jump"
    assert cfg.bastion.ssh_port == 2222
    assert cfg.bastion.host_key == ED25519


def test_bastion_defaults():
    cfg = lab_config(bastion={"host": "192.0.2.1", "hostKey": ED25519})
    assert cfg.bastion.ssh_user == "ubuntu" and cfg.bastion.ssh_port == 22


def test_defaults():
    cfg = lab_config()
    assert cfg.kubernetes_version == versions.KUBERNETES_DEFAULT
    assert cfg.kubernetes_minor in versions.KUBERNETES_SUPPORTED_MINORS
    assert cfg.pod_cidr == ipaddress.IPv4Network("10.244.0.0/16")
    assert cfg.service_cidr == ipaddress.IPv4Network("10.96.0.0/12")
    assert cfg.cni is Cni.CALICO  # it enforces the NetworkPolicies (docs/network-policies.md)
    assert cfg.containerd_version == versions.CONTAINERD_DEFAULT
    assert cfg.nvidia_driver == NvidiaDriver(branch=versions.NVIDIA_DRIVER_BRANCH_DEFAULT)
    assert cfg.nvidia_driver.version is None and not cfg.nvidia_driver.preinstalled
    assert cfg.gpu_taint is True
    assert cfg.bastion is None and cfg.control_plane_endpoint is None
    assert cfg.storage == config.LabStack.model_fields["storage"].get_default(call_default_factory=True)


def test_api_endpoint_defaults_to_first_control_plane():
    hosts = [
        host("w-1", "192.0.2.20"),
        host("cp-a", "192.0.2.21", "control-plane"),
        host("cp-b", "192.0.2.22", "control-plane"),
    ]
    assert lab_config().api_endpoint == "192.0.2.10:6443"
    # "" is the project default: the first control plane (not the first host) on port 6443.
    assert lab_config(hosts=hosts[:2], controlPlaneEndpoint="").api_endpoint == "192.0.2.21:6443"
    # Two control planes and the "" default: still an error, not a silent first-host endpoint.
    err = problems_of(lab_raw(hosts=hosts, controlPlaneEndpoint=""))
    assert_problem(err, "controlPlaneEndpoint", "host:port")


def test_project_defaults_empty_values_become_none():
    cfg = lab_config(controlPlaneEndpoint="", bastion={})
    assert cfg.control_plane_endpoint is None
    assert cfg.bastion is None
    dev = config.parse({"platform": "dev", "kubeContext": ""}, {"kubeconfig"})
    assert isinstance(dev, config.DevStack) and dev.kube_context is None


def test_each_platform_type_holds_only_its_keys():
    lab, dev, gke = config.LabStack.keys(), config.DevStack.keys(), config.GkeStack.keys()
    shared = Addons.keys()
    assert shared == lab & gke == dev & gke
    assert lab & dev == shared | {"storage", "serviceCidr"}  # each its own storage section; both a service range
    assert lab - shared == {"hosts", "controlPlaneEndpoint", "kubeVip", "podCidr", "serviceCidr", "cni", "containerdVersion",
                            "nvidiaDriver", "gpuTaint", "bastion", "storage", "maxUnavailable", "allowRebuild",
                            "hardening", "etcdBackup"}
    assert dev - shared == {"kubeContext", "gpuNodes", "gpuNodeGpus", "serviceCidr", "nodeCidr", "storage", "clusterCni"}
    assert gke - shared == {"gke", "gcp:project", "gcp:region"}
    # The two storage sections share the size and an existing NFS export.
    assert set(config.LabStack.model_fields["storage"].annotation.model_fields) == {
        "size", "nfs", "provision", "export_path", "server"}
    assert set(config.DevStack.model_fields["storage"].annotation.model_fields) == {
        "size", "host_path", "use_default_class", "nfs"}


_GKE_BASE = {
    "platform": "gke", "gcp:project": "my-gpu-project", "gcp:region": "us-central1",
    "gke": {"zone": "us-central1-a", "gpuPools": [{
        "name": "l4", "machineType": "g2-standard-8", "accelerator": {"type": "nvidia-l4", "count": 1},
        "zones": ["us-central1-a"]}]},
}
# platform -> (a valid config of it, the secret it needs)
_BASES: dict[str, tuple[dict[str, Any], set[str]]] = {
    "lab": (lab_raw(), {"sshPrivateKey"}),
    "dev": ({"platform": "dev"}, {"kubeconfig"}),
    "gke": (_GKE_BASE, set()),
}


@pytest.mark.parametrize(("platform", "raw", "secret", "key", "owner"), [
    ("lab", {"kubeContext": "minikube"}, None, "kubeContext", "dev"),
    ("lab", {"gke": {"zone": "us-central1-a"}}, None, "gke", "gke"),
    ("lab", {}, "kubeconfig", "kubeconfig", "dev"),
    ("dev", {"hosts": [host("cp-1", "192.0.2.10", "control-plane")]}, None, "hosts", "lab"),
    ("dev", {"containerdVersion": "1.6.33-1"}, None, "containerdVersion", "lab"),
    ("dev", {}, "sshPrivateKey", "sshPrivateKey", "lab"),
    ("gke", {"gpuNodes": ["n-1"]}, None, "gpuNodes", "dev"),
    ("gke", {"bastion": BASTION}, None, "bastion", "lab"),
    ("gke", {"storage": {"useDefaultClass": True}}, None, "storage", "lab/dev"),
    ("gke", {}, "kubeconfig", "kubeconfig", "dev"),
])
def test_a_key_of_another_platform_names_its_platform(platform, raw, secret, key, owner):
    base, secrets = _BASES[platform]
    config.parse(base, secrets)  # the base is valid: the refusal comes from the key
    err = problems_of({**base, **raw}, secrets | ({secret} if secret else set()))
    assert_problem(err, key, f"is a {owner} key; this stack's platform is {platform}")


def test_model_is_frozen():
    cfg = lab_config()
    with pytest.raises(ValidationError):
        cfg.cni = Cni.CALICO  # type: ignore[misc]


def test_config_error_is_a_pulumi_run_error():
    assert issubclass(config.ConfigError, pulumi.RunError)
    err = problems_of(lab_raw(cni="weave"))
    assert isinstance(err, pulumi.RunError)
    assert err.problems == [("cni", "must be one of 'flannel' or 'calico' (got 'weave')")]
    assert str(err) == ("invalid stack configuration:\n  gpu-cluster:cni: must be one of 'flannel' or 'calico' "
                        "(got 'weave') (docs/network-policies.md#who-enforces-them)")


# ---------------------------------------------------------------------------------------------
# load(): the running Pulumi config


def _full(raw: dict[str, Any]) -> dict[str, str]:
    return {f"{NS}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}


@pulumi.runtime.test
def test_load_returns_model_and_secret_key(mocks, clean_runtime_config):
    values = _full(lab_raw(bastion=BASTION, gpuTaint=False))
    values[f"{NS}:sshPrivateKey"] = PLAINTEXT_KEY
    values["other-project:ignored"] = "not ours"
    set_all_config(values, secret_keys=[f"{NS}:sshPrivateKey"])

    cfg, secrets = config.load()
    assert isinstance(cfg, config.LabStack)
    assert cfg == lab_config(bastion=BASTION, gpuTaint=False)
    assert cfg.gpu_taint is False
    assert secrets.kubeconfig is None
    assert isinstance(secrets.ssh_private_key, pulumi.Output)

    async def check() -> None:
        assert await secrets.ssh_private_key.is_secret()
        assert await secrets.ssh_private_key.future() == PLAINTEXT_KEY

    return check()


@pulumi.runtime.test
def test_load_dev_kubeconfig_secret(mocks, clean_runtime_config):
    set_all_config(
        {f"{NS}:platform": "dev", f"{NS}:kubeContext": "", f"{NS}:gpuNodes": "[]",
         f"{NS}:kubeconfig": "apiVersion: v1"},
        secret_keys=[f"{NS}:kubeconfig"],
    )
    cfg, secrets = config.load()
    assert cfg.platform is config.Platform.DEV and cfg.kube_context is None
    assert secrets.ssh_private_key is None

    def check(args: list[Any]) -> None:
        assert args == ["apiVersion: v1"]

    return pulumi.Output.all(secrets.kubeconfig).apply(check)


def test_load_plaintext_ssh_key_raises(mocks, clean_runtime_config):
    values = _full(lab_raw())
    values[f"{NS}:sshPrivateKey"] = PLAINTEXT_KEY
    set_all_config(values, secret_keys=[])
    with pytest.raises(config.ConfigError) as info:
        config.load()
    assert_problem(info.value, "sshPrivateKey", "secret")
    assert PLAINTEXT_KEY not in str(info.value)
    assert "topsecretvalue" not in str(info.value)
    assert mocks.plan.resources == []


def test_load_reports_bad_keys(mocks, clean_runtime_config):
    values = _full(lab_raw(cni="weave"))
    values[f"{NS}:sshPrivateKey"] = "x"
    set_all_config(values, secret_keys=[f"{NS}:sshPrivateKey"])
    with pytest.raises(config.ConfigError) as info:
        config.load()
    assert_problem(info.value, "cni", "flannel", "calico")


# ---------------------------------------------------------------------------------------------
# A bad config registers nothing


def _bad_lab_values() -> tuple[dict[str, str], list[str]]:
    values, secret_keys = program.stack_config("lab")
    values = dict(values)
    values[f"{NS}:cni"] = "weave"
    return values, secret_keys


def _recording_plans(monkeypatch) -> list[program.Plan]:
    """Every Plan program.run creates (and so every RecordingMonitor's registrations)."""
    plans: list[program.Plan] = []
    real = program.Plan

    def make(*args: Any, **kwargs: Any) -> program.Plan:
        plan = real(*args, **kwargs)
        plans.append(plan)
        return plan

    monkeypatch.setattr(program, "Plan", make)
    return plans


def test_bad_config_registers_nothing(monkeypatch, clean_runtime_config):
    plans = _recording_plans(monkeypatch)
    with pytest.raises(config.ConfigError) as info:
        program.run("lab", config=_bad_lab_values())
    assert_problem(info.value, "cni", "flannel", "calico")
    assert len(plans) == 1
    assert plans[0].resources == []

    # Control: the same recording sees the good stack's resources.
    good = program.run("lab", config=program.stack_config("lab"))
    assert plans[-1] is good and good.resources


def test_bad_config_registers_nothing_under_own_monitor(clean_runtime_config):
    plan = program.Plan(stack="lab")
    mocks = program.ProgramMocks()
    values, secret_keys = _bad_lab_values()
    set_all_config(values, secret_keys)
    pulumi.runtime.set_mocks(mocks, project=program.PROJECT, stack="lab", preview=False,
                             monitor=program.RecordingMonitor(mocks, plan))
    if str(PROJECT_DIR) not in sys.path:
        sys.path.insert(0, str(PROJECT_DIR))

    @pulumi.runtime.test
    def evaluate():
        import runpy

        runpy.run_path(str(PROJECT_DIR / "__main__.py"), run_name="__main__")

    with pytest.raises(config.ConfigError):
        evaluate()
    assert plan.resources == []


# ---------------------------------------------------------------------------------------------
# python -m render with a bad config


def test_render_cli_bad_config_exits_2(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", project / "Pulumi.yaml")
    shutil.copy(PROJECT_DIR / "__main__.py", project / "__main__.py")
    for name in ("config", "components", "stacks", "render"):
        (project / name).symlink_to(PROJECT_DIR / name, target_is_directory=True)
    (project / "Pulumi.bad.yaml").write_text(yaml.safe_dump({"config": {
        f"{NS}:platform": "lab",
        f"{NS}:cni": "weave",
        f"{NS}:podCIDR": "10.244.0.0/16",
        f"{NS}:sshPrivateKey": PLAINTEXT_KEY,
        f"{NS}:hosts": [host("cp-1", "192.0.2.10", "control-plane")],
    }}))
    out = tmp_path / "X"
    env = {**os.environ, "PYTHONPATH": str(project)}
    env.pop("PULUMI_CONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "render", "bad", "--out", str(out)],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert f"{NS}:cni:" in result.stderr and "flannel" in result.stderr
    assert f"{NS}:podCIDR: is not a known key" in result.stderr
    assert f"{NS}:sshPrivateKey:" in result.stderr
    assert "Pulumi.bad.yaml" not in result.stderr  # the stack file was found
    assert PLAINTEXT_KEY not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# The project file's typed config block


def _project() -> dict[str, Any]:
    return yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())


def test_project_file_validates_against_upstream_schema(upstream_dir):
    schema = json.loads((upstream_dir / "pulumi" / "project.json").read_text())
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(_project())]
    assert errors == []
    # The schema has teeth: a mistyped declaration is rejected.
    broken = _project()
    broken["config"]["cni"] = {"type": "str", "default": "flannel"}
    assert list(validator.iter_errors(broken))


STACK_TYPES = (config.LabStack, config.DevStack, config.GkeStack)


def _declarable(stack_type: type[Addons]) -> set[str]:
    """The keys of `stack_type` in the gpu-cluster: namespace (gcp:project, gcp:region are the provider's)."""
    return {key for key in stack_type.keys() if not key.startswith("gcp:")}


def test_project_config_keys_match_model_fields():
    declared = set(_project()["config"])
    fields = set().union(*(_declarable(t) for t in STACK_TYPES))
    assert Addons.keys() <= fields
    assert declared - fields == set(), "declared keys that are no platform type's fields"
    assert fields - declared == set(), "platform type fields not declared in Pulumi.yaml"
    for secret in config.SECRET_KEYS:
        assert secret not in declared, f"{secret} must not be declared (a secret has no default)"
        assert f"{NS}:{secret}" not in declared


def test_project_config_declarations_are_complete():
    for key, decl in _project()["config"].items():
        assert isinstance(decl, dict), key
        assert decl.get("type") in ("string", "integer", "boolean", "array", "object"), key
        assert "default" in decl, key
        assert isinstance(decl.get("description"), str) and decl["description"].strip(), key
        if decl["type"] == "array":
            assert "items" in decl, key


def test_platform_is_described_with_every_platform():
    for description in (_project()["config"]["platform"]["description"],
                        *(t.model_fields["platform"].description for t in (Addons, *STACK_TYPES))):
        assert description and all(p.value in description for p in config.Platform), description


# What each platform needs besides the project defaults to parse (and the secret it needs).
_REQUIRED: dict[str, tuple[dict[str, Any], set[str]]] = {
    "lab": ({"hosts": [host("cp-1", "192.0.2.10", "control-plane")]}, {"sshPrivateKey"}),
    "dev": ({}, {"kubeconfig"}),
    "gke": ({k: v for k, v in _GKE_BASE.items() if k != "platform"}, set()),
}


@pytest.mark.parametrize("stack_type", STACK_TYPES, ids=lambda t: t.__name__)
def test_project_defaults_parse_to_model_defaults(stack_type):
    """Every stack receives every declared default: its own keys parse to the model's defaults, the
    other platforms' keys are ignored."""
    decls = _project()["config"]
    defaults = {key: decl["default"] for key, decl in decls.items()}
    types = {"string": str, "boolean": bool, "integer": int, "array": list, "object": dict}
    for key, value in defaults.items():
        assert isinstance(value, types[decls[key]["type"]]), key

    platform = stack_type.model_fields["platform"].default
    required, secrets = _REQUIRED[platform.value]
    cfg = config.parse({**defaults, "platform": platform.value, **required}, secrets)
    assert type(cfg) is stack_type
    # Field by field, against the model's own defaults (through parse, so "" and {} become None).
    aliases = {(f.alias or name): name for name, f in stack_type.model_fields.items()}
    for key in _declarable(stack_type) - {"platform"} - set(required):
        field = stack_type.model_fields[aliases[key]]
        assert getattr(cfg, aliases[key]) == field.get_default(call_default_factory=True), key
    assert defaults["platform"] == "dev"
    assert defaults["nvidiaDriver"] == {"branch": versions.NVIDIA_DRIVER_BRANCH_DEFAULT, "preinstalled": False}
    assert defaults["kubernetesVersion"] == versions.KUBERNETES_DEFAULT


# ---------------------------------------------------------------------------------------------
# Committed stack files


STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in PROJECT_DIR.glob("Pulumi.*.yaml"))


def _parse_stack(stack: str) -> config.StackConfig:
    values, secret_full_keys = program.stack_config(stack)
    prefix = f"{NS}:"
    secret_keys = {k[len(prefix):] for k in secret_full_keys if k.startswith(prefix)}
    raw: dict[str, Any] = {k: v for k, v in values.items() if k in config.GCP_KEYS}
    for full_key, value in values.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix):]
        if key in secret_keys:
            continue
        try:
            raw[key] = json.loads(value)
        except ValueError:
            raw[key] = value
    return config.parse(raw, secret_keys)


def test_stack_files_exist():
    assert {"lab", "dev"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_stack_file_parses(stack):
    cfg = _parse_stack(stack)
    assert cfg.platform.value in ("lab", "dev", "gke")
    raw = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())["config"]
    for key, value in raw.items():
        if cfg.platform is config.Platform.GKE and key in ("gcp:project", "gcp:region"):
            continue  # the Google Cloud provider's own keys (config/gke.py reads them)
        assert key.startswith(f"{NS}:"), key
        if key[len(NS) + 1:] in config.SECRET_KEYS:
            assert isinstance(value, dict) and set(value) == {"secure"}, f"{key} must be secure"


def test_lab_stack_file():
    cfg = _parse_stack("lab")
    assert isinstance(cfg, config.LabStack)
    docs = ipaddress.IPv4Network("192.0.2.0/24")
    assert cfg.hosts
    for h in cfg.hosts:
        assert h.address in docs, f"{h.name}: {h.address} is not a documentation address"
        check_host_key(h.host_key)  # well formed (raises otherwise)
        assert h.host_key.startswith("ssh-ed25519 ")
    if cfg.bastion is not None:
        check_host_key(cfg.bastion.host_key)
    assert len({h.host_key for h in cfg.hosts}) == len(cfg.hosts), "each host has its own key"
    assert len(cfg.control_planes) == 1
    assert any(h.is_gpu for h in cfg.workers)


def test_dev_stack_file():
    cfg = _parse_stack("dev")
    assert isinstance(cfg, config.DevStack)
    assert cfg.kube_context or "kubeconfig" in {
        k.split(":", 1)[1] for k in program.stack_config("dev")[1]
    }
    assert cfg.gpu_nodes


def test_gke_stack_file():
    cfg = _parse_stack("gke")
    assert isinstance(cfg, config.GkeStack)
    assert cfg.project and cfg.region and cfg.gke.gpu_pools
