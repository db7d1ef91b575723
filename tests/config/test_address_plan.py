"""The address plan (config/address_plan.py): every range the program hands out against every
address and range the cluster uses, on lab and dev, each collision named by both its keys, before
anything is registered; dev's service and node ranges are keys with minikube's defaults."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
import yaml

import config
from config.address_plan import Address, Range, overlap_problems
from render import program
from tests.config.refusals import accepted, problems, reported
from tests.conftest import PROJECT_DIR, SEED_002_ROCE, lab_raw, stack_config_with

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"


def roce(range_: str) -> dict[str, Any]:
    return {"linkGbps": 25, "rdma": True, "roce": {**SEED_002_ROCE, "range": range_}}


def lab(**overrides: Any) -> dict[str, Any]:
    return lab_raw(training={"image": IMAGE}, **overrides)


def dev(**overrides: Any) -> dict[str, Any]:
    return {"platform": "dev", "kubeContext": "minikube", "gpuNodes": ["minikube"],
            "training": {"image": IMAGE}, **overrides}


# --- lab: the RoCE range against the machines ------------------------------------------------------


def test_lab_roce_range_containing_the_nfs_server_is_refused() -> None:
    raw = lab(network=roce("10.20.0.0/24"), storage={"nfs": {"server": "10.20.0.5", "path": "/export"}})
    reported(raw, "network.roce.range", "10.20.0.0/24", "storage.nfs.server 10.20.0.5")


def test_lab_roce_range_containing_the_api_endpoint_is_refused() -> None:
    raw = lab(network=roce("10.30.0.0/24"), controlPlaneEndpoint="10.30.0.9:6443")
    reported(raw, "network.roce.range", "controlPlaneEndpoint 10.30.0.9")


def test_lab_every_collision_is_reported_with_both_keys() -> None:
    """One range colliding with a host, the endpoint, the NFS server and the pod range: five problems,
    each naming the other key."""
    raw = lab(network=roce("10.0.0.0/8"), podCidr="10.244.0.0/16", serviceCidr="172.16.0.0/12",
              hosts=[{**h, "address": f"10.1.0.{10 + i}"} for i, h in enumerate(lab_raw()["hosts"])],
              controlPlaneEndpoint="10.2.0.1:6443", storage={"nfs": {"server": "10.3.0.1", "path": "/x"}})
    messages = [m for k, m in problems(raw) if k == "network.roce.range"]
    for other in ("overlaps podCidr 10.244.0.0/16", "hosts[0].address 10.1.0.10", "hosts[2].address 10.1.0.12",
                  "controlPlaneEndpoint 10.2.0.1", "storage.nfs.server 10.3.0.1"):
        assert any(other in m for m in messages), (other, messages)


def test_lab_nfs_server_by_name_and_clear_ranges_are_accepted() -> None:
    accepted(lab(network=roce("10.20.0.0/24"), storage={"nfs": {"server": "nas.lab.example", "path": "/export"}}))
    accepted(lab(network=roce("10.20.0.0/24"), controlPlaneEndpoint="192.0.2.10:6443"))


# --- dev: the existing cluster's service and node ranges -------------------------------------------


def test_dev_ranges_default_to_minikubes() -> None:
    from config.dev import MINIKUBE_NODE_CIDR, MINIKUBE_SERVICE_CIDR

    cfg = accepted(dev())
    assert isinstance(cfg, config.DevStack)
    assert (cfg.service_cidr, cfg.node_cidr) == (MINIKUBE_SERVICE_CIDR, MINIKUBE_NODE_CIDR)
    # Pulumi.yaml declares the same, so a stack that sets neither gets them.
    declared = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"]
    assert ipaddress.IPv4Network(declared["serviceCidr"]["default"]) == MINIKUBE_SERVICE_CIDR
    assert ipaddress.IPv4Network(declared["nodeCidr"]["default"]) == MINIKUBE_NODE_CIDR


@pytest.mark.parametrize(("range_", "key"), [
    ("10.96.0.0/24", "serviceCidr"),   # minikube's service range
    ("10.100.0.0/16", "serviceCidr"),  # inside 10.96.0.0/12
    ("192.168.49.0/24", "nodeCidr"),   # minikube's docker network
    ("192.168.0.0/16", "nodeCidr"),    # containing it
])
def test_dev_roce_range_inside_the_clusters_ranges_is_refused(range_: str, key: str) -> None:
    reported(dev(network=roce(range_)), "network.roce.range", f"overlaps {key}")


def test_dev_ranges_follow_the_keys() -> None:
    """A kind cluster: its own service range and docker network (172.18.0.0/16)."""
    kind = {"serviceCidr": "10.112.0.0/12", "nodeCidr": "172.18.0.0/16"}
    accepted(dev(network=roce("192.168.49.0/24"), **kind))
    reported(dev(network=roce("172.18.5.0/24"), **kind), "network.roce.range", "overlaps nodeCidr 172.18.0.0/16")
    reported(dev(network=roce("10.112.0.0/24"), **kind), "network.roce.range", "overlaps serviceCidr")


def test_dev_nfs_server_on_the_node_network_is_accepted_but_not_in_the_service_range() -> None:
    # The committed dev file's alternative: the host's export at minikube's gateway.
    accepted(dev(storage={"nfs": {"server": "192.168.49.1", "path": "/srv/nfs/kubedata"}}))
    reported(dev(storage={"nfs": {"server": "10.96.0.10", "path": "/srv"}}), "serviceCidr",
             "storage.nfs.server 10.96.0.10")
    reported(dev(network=roce("10.20.0.0/24"), storage={"nfs": {"server": "10.20.0.1", "path": "/srv"}}),
             "network.roce.range", "storage.nfs.server 10.20.0.1")


def test_dev_service_range_sizes_are_kube_apiservers() -> None:
    reported(dev(serviceCidr="10.0.0.0/11"), "serviceCidr", "/12 to /28")
    reported(dev(nodeCidr="not-a-network"), "nodeCidr")


def test_dev_range_keys_are_refused_on_gke() -> None:
    raw = {"platform": "gke", "gcp:project": "my-gpu-project", "gcp:region": "us-central1",
           "nodeCidr": "172.18.0.0/16",
           "gke": {"zone": "us-central1-a", "gpuPools": [{
               "name": "l4", "machineType": "g2-standard-8", "accelerator": {"type": "nvidia-l4", "count": 1},
               "zones": ["us-central1-a"]}]}}
    reported(raw, "nodeCidr", "is a dev key")


def test_dev_refusal_registers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    plans: list[program.Plan] = []
    real = program.Plan

    def recording(*args: Any, **kwargs: Any) -> program.Plan:
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(program, "Plan", recording)
    values, secret_keys = stack_config_with("dev", network=roce("10.96.64.0/24"))
    with pytest.raises(config.ConfigError) as info:
        program.run("dev", config=(values, secret_keys))
    assert "gpu-cluster:network.roce.range" in str(info.value) and "serviceCidr" in str(info.value)
    assert len(plans) == 1 and plans[0].resources == []


def test_dev_ranges_reach_the_egress_policy_of_the_download() -> None:
    """The cluster's own ranges are left out of the dataset download's internet egress, as on lab."""
    values, secret_keys = stack_config_with(
        "dev", nodeCidr="198.51.100.0/24", training={"dataset": "cifar10", "prepareData": True})
    plan = program.run("dev", config=(values, secret_keys))
    policies = [r for r in plan.resources if r.type == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
                and "198.51.100.0/24" in str(r.inputs)]
    assert policies, "nodeCidr is not excluded from any egress policy"


# --- the rule itself ---------------------------------------------------------------------------------


def test_overlap_problems_names_both_keys_once_per_pair() -> None:
    net = ipaddress.IPv4Network
    ranges = [Range("a", net("10.0.0.0/16")), Range("b", net("10.0.1.0/24")),
              Range("nodes", net("10.0.0.0/8"), holds_hosts=True)]
    found = overlap_problems(ranges, [Address("host", ipaddress.IPv4Address("10.0.1.7"))])
    assert [k for k, _ in found] == ["b", "nodes", "nodes", "a", "b"]
    assert "overlaps a 10.0.0.0/16" in found[0][1]
    # The node network holds hosts: the host inside it is reported only under a and b.
    assert [m.split(" contains ")[1].split(";")[0] for k, m in found[3:]] == ["host 10.0.1.7"] * 2
