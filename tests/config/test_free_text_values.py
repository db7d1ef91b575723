"""Free-text and formatted values that go into an API object or a kubeconfig lookup: refused with the
key named when they hold a newline or a form GKE does not take (the boundary sweep found these
accepted, or raising from the capacity sum after validation)."""

from __future__ import annotations

import copy

import pytest

import config
from tests.config.test_inert_keys import A100, dev, gke  # the stacks those refusals start from


def refused_keys(raw: dict) -> list[str]:
    with pytest.raises(config.ConfigError) as info:
        config.parse(copy.deepcopy(raw), set())
    return [key for key, _ in info.value.problems]


@pytest.mark.parametrize("context", ["minikube\nrm -rf /", "x" * 254, "tab\there"])
def test_dev_kube_context_is_one_printable_line(context: str) -> None:
    assert "kubeContext" in refused_keys(dev(kubeContext=context))


def test_dev_kube_context_of_a_real_kubeconfig_is_accepted() -> None:
    config.parse(dev(kubeContext="arn:aws:eks:eu-west-1:123:cluster/gpu@admin"), set())


@pytest.mark.parametrize("name", ["office\nvpn", "x" * 101])
def test_gke_authorized_network_name_is_one_printable_line(name: str) -> None:
    raw = gke()
    raw["gke"]["authorizedNetworks"] = [{"cidr": "203.0.113.0/24", "name": name}]
    assert "gke.authorizedNetworks[0].name" in refused_keys(raw)


@pytest.mark.parametrize("size", ["x" * 300, "g.5gb", "8g.80gb", "1g.5GB", "0g.5gb"])
def test_gke_mig_partition_size_of_another_form_is_refused_naming_the_key(size: str) -> None:
    raw = gke()
    raw["gke"]["gpuPools"] = [{**A100, "migPartitionSize": size}]
    assert "gke.gpuPools[0].migPartitionSize" in refused_keys(raw)
