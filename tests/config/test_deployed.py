"""What the previous `up` deployed against the new config (LabStack.change_problems): kubeadm
upgrades one minor at a time and never down, and CIDRs, the endpoint and the first control plane
are fixed at `kubeadm init`, so changing them is refused unless allowRebuild says it is meant.
The same checks on the real program (exit 2 from `python -m render`) are tests/stacks/test_upgrades.py."""

from __future__ import annotations

from typing import Any

import pytest

from config.lab import DeployedLab
from tests.conftest import host, lab_config

DEPLOYED = {
    "kubernetesVersion": "1.34.2", "podCidr": "10.244.0.0/16", "serviceCidr": "10.96.0.0/12",
    "controlPlaneEndpoint": "192.0.2.10:6443", "controlPlane": "cp-1 192.0.2.10", "controlPlanes": "cp-1 192.0.2.10",
    "nfsServer": "",  # no provisioned export (storage.provision off)
}


def deployed(**changes: str) -> DeployedLab:
    return DeployedLab.model_validate({**DEPLOYED, **changes})


def problems(was: DeployedLab | None, **config: Any) -> dict[str, str]:
    return dict(lab_config(**config).change_problems(was))


def test_the_record_is_what_change_problems_reads():
    cfg = lab_config()
    record = cfg.deployed_record()
    assert record == DEPLOYED
    assert all(isinstance(v, str) for v in record.values())  # a plain stack output
    assert cfg.change_problems(DeployedLab.model_validate(record)) == []
    # A later version may record more; the keys this one knows still count.
    assert DeployedLab.model_validate({**record, "somethingNew": "x"}) == deployed()


@pytest.mark.parametrize("version", ["1.34.2", "1.34.3", "1.34.10", "1.35.0", "1.35.4"])
def test_same_patch_and_one_minor_up_are_upgrades(version):
    assert problems(deployed(), kubernetesVersion=version) == {}


def test_nothing_deployed_yet_nothing_to_compare():
    assert problems(None, kubernetesVersion="1.31.0", podCidr="10.32.0.0/16") == {}


@pytest.mark.parametrize(("was", "now", "words"), [
    ("1.33.5", "1.35.0", "1.33.5 -> 1.35.0 skips minor 1.34: kubeadm upgrades one minor at a time; deploy 1.34.x first"),
    ("1.31.0", "1.34.2", "skips minor 1.32"),
    ("1.34.3", "1.34.2", "1.34.2 is older than the deployed 1.34.3: kubeadm cannot downgrade"),
    ("1.35.0", "1.34.9", "older than the deployed 1.35.0"),
])
def test_skipped_minor_and_downgrade_are_refused(was, now, words):
    found = problems(deployed(kubernetesVersion=was), kubernetesVersion=now)
    assert list(found) == ["kubernetesVersion"]
    assert words in found["kubernetesVersion"]


@pytest.mark.parametrize(("key", "value", "record_key"), [
    ("podCidr", "10.245.0.0/16", "podCidr"),
    ("serviceCidr", "10.100.0.0/16", "serviceCidr"),
    ("controlPlaneEndpoint", "k8s-api.lab.example:6443", "controlPlaneEndpoint"),
])
def test_a_change_that_needs_a_new_cluster_is_refused_unless_allowed(key, value, record_key):
    found = problems(deployed(), **{key: value})
    assert list(found) == [key]
    assert f"{DEPLOYED[record_key]} -> {value} needs a new cluster" in found[key]
    assert "gpu-cluster:allowRebuild: true" in found[key]
    assert problems(deployed(), allowRebuild=True, **{key: value}) == {}


def test_the_first_control_plane_is_part_of_the_cluster():
    moved = [host("cp-1", "192.0.2.20", "control-plane"), host("gpu-1", "192.0.2.11", gpus=2)]
    found = problems(deployed(), hosts=moved, controlPlaneEndpoint="192.0.2.10:6443")
    assert list(found) == ["hosts[0].address"]
    assert "was cp-1 192.0.2.10, now cp-1 192.0.2.20" in found["hosts[0].address"]
    renamed = [host("gpu-1", "192.0.2.11", gpus=2), host("cp-a", "192.0.2.10", "control-plane")]
    assert list(problems(deployed(), hosts=renamed)) == ["hosts[1].name"]
    assert problems(deployed(), hosts=moved, controlPlaneEndpoint="192.0.2.10:6443", allowRebuild=True) == {}


def test_allow_rebuild_does_not_lift_the_version_rules():
    found = problems(deployed(kubernetesVersion="1.35.0"), kubernetesVersion="1.34.2", podCidr="10.245.0.0/16",
                     allowRebuild=True)
    assert list(found) == ["kubernetesVersion"]
