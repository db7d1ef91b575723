"""The prepare-data Job and its internet egress policy as pure manifests (the rendered plans are
tests/stacks/test_training_data.py)."""

from __future__ import annotations

import ipaddress

import pytest

from components.storage_contract import MOUNTS, SharedClaim
from components.training import network_policy, prepare
from config.scheduling_contract import JOB_LABEL
from config.training import Dataset

IMAGE = "registry.example.com/gpu-cluster/trainer:0.1.0"


def test_the_component_and_the_config_know_the_same_datasets() -> None:
    assert set(prepare.DATASETS) == {d.value for d in Dataset if d.downloadable}
    assert set(prepare.LAYOUT) == set(prepare.DATASETS)


@pytest.mark.parametrize("dataset", ["auto", "synthetic", "imagenet"])
def test_only_a_downloadable_dataset_is_prepared(dataset: str) -> None:
    with pytest.raises(ValueError, match="dataset"):
        prepare.PrepareDataArgs(image=IMAGE, dataset=dataset, claim=SharedClaim(ready=[]))


def test_internet_except_keeps_each_range_once() -> None:
    # lab's default ranges lie inside 10.0.0.0/8; one outside the private ranges is added
    out = network_policy.internet_except(("10.244.0.0/16", "10.96.0.0/12", "198.18.0.0/15", "198.18.0.0/15"))
    assert out == [*network_policy.NON_PUBLIC_IPV4, "198.18.0.0/15"]
    nets = [ipaddress.ip_network(n) for n in out]
    for addr in ("10.96.0.1", "169.254.169.254", "172.17.0.1", "192.168.49.1", "100.64.0.10"):
        assert any(ipaddress.ip_address(addr) in n for n in nets), addr
    assert not any(ipaddress.ip_address("151.101.1.1") in n for n in nets)  # a public mirror stays reachable


def test_policy_selects_only_its_job() -> None:
    policy = network_policy.job_internet("prepare-data")
    assert policy["spec"]["podSelector"] == {"matchLabels": {JOB_LABEL: "prepare-data"}}
    assert policy["spec"]["policyTypes"] == ["Egress"] and "ingress" not in policy["spec"]
    (rule,) = policy["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 80}]
    assert prepare.labels("prepare-data")[JOB_LABEL] == "prepare-data"


def test_the_job_writes_where_the_trainer_reads() -> None:
    manifest = prepare.job_manifest("prepare-data", prepare.PrepareDataArgs(
        image=IMAGE, dataset="cifar10", claim=SharedClaim(ready=[])))
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    data_dir = container["command"][container["command"].index("--data-dir") + 1]
    assert data_dir == MOUNTS["data"][1]
    assert {"subPath": MOUNTS["data"][0], "mountPath": data_dir, "name": prepare.SHARED_VOLUME} in container["volumeMounts"]
