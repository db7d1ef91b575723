"""Kubernetes quantities read as apimachinery's resource.Quantity reads them (config/quantities.py),
and the floors of a training pod's resources (config/training.py says why each)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

import config
from config.quantities import parse_quantity
from tests.conftest import lab_raw

# Values as quantity.go's grammar and suffix.go's suffixes define them (its tests parse each).
READ = {
    "500m": Decimal("0.5"), "4": Decimal(4), "16Gi": Decimal(16 * 2**30), "1.5G": Decimal(1_500_000_000),
    "1e3": Decimal(1000), "1E-3": Decimal("0.001"), ".5": Decimal("0.5"), "5.": Decimal(5), "+4": Decimal(4),
    "100n": Decimal("1E-7"), "5u": Decimal("0.000005"), "1Ki": Decimal(1024), "1.Gi": Decimal(2**30),
    "2Ei": Decimal(2 * 2**60), "1k": Decimal(1000), "1e+2": Decimal(100), "-1": Decimal(-1),
}
# Not quantities: no such suffix (Gb, ki, K), whitespace, a second point, a fractional exponent.
NOT_QUANTITIES = ["", "Gi", "1Gb", "1ki", "1K", "1 Gi", " 1", "1.5.5", "1e", "1e1.5", "--1", "1Gi\n", "lots",
                  "0x10", "1_000", "nan", "inf", "１"]


@pytest.mark.parametrize("text", sorted(READ))
def test_quantities_read_as_kubernetes_reads_them(text: str) -> None:
    assert parse_quantity(text) == READ[text]


@pytest.mark.parametrize("text", NOT_QUANTITIES)
def test_what_kubernetes_does_not_read_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["9223372036854775808", "8Ei", "1e19", "1e99999999999"])
def test_beyond_what_a_quantity_holds(text: str) -> None:
    """quantity.go: no quantity may represent a number greater than 2^63-1."""
    with pytest.raises(ValueError):
        parse_quantity(text)


def problems(**training: Any) -> dict[str, str]:
    with pytest.raises(config.ConfigError) as err:
        config.parse(lab_raw(training=training), {"sshPrivateKey"})
    return dict(err.value.problems)


# (training keys, the key refused, words of the refusal)
REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "memory one byte": ({"memoryLimit": "1"}, "training.memoryLimit", "below 1Gi"),
    "memory request 64Mi": ({"memoryRequest": "64Mi"}, "training.memoryRequest", "below 1Gi"),
    "cpu limit zero": ({"cpuLimit": "0"}, "training.cpuLimit", "more than zero"),
    "cpu request zero": ({"cpuRequest": "0"}, "training.cpuRequest", "more than zero"),
    "cpu limit 0.0": ({"cpuLimit": "0.0"}, "training.cpuLimit", "more than zero"),
    "cpu limit 1m": ({"cpuLimit": "1m", "cpuRequest": "1m"}, "training.cpuLimit", "below 10m"),
    "cpu negative": ({"cpuRequest": "-1"}, "training.cpuRequest", "more than zero"),
    "shm one byte": ({"shmSize": "1"}, "training.shmSize", "below 64Mi"),
    "shm leaves no memory": ({"memoryLimit": "8Gi", "shmSize": "7.5Gi", "memoryRequest": "1Gi"},
                             "training.memoryLimit", "leaves 512Mi"),
    "request over limit, exponent": ({"cpuRequest": "1e1", "cpuLimit": "8"}, "training.cpuRequest", "more than"),
    "request over limit, units": ({"memoryRequest": "33G", "memoryLimit": "30Gi"}, "training.memoryRequest", "more than"),
    "shm over limit": ({"shmSize": "64Gi"}, "training.shmSize", "exceeds training.memoryLimit"),
    "boolean": ({"cpuLimit": True}, "training.cpuLimit", "quantity"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_training_resources_refused_naming_the_key(case: str) -> None:
    training, key, words = REFUSED[case]
    found = problems(**training)
    assert key in found, found
    assert words in found[key], found[key]


@pytest.mark.parametrize("training", [
    {"cpuRequest": "10m", "cpuLimit": "10m", "memoryRequest": "1Gi", "memoryLimit": "1Gi", "shmSize": "64Mi"}
    | {"memoryLimit": "1088Mi"},  # exactly 1Gi besides /dev/shm
    {"cpuRequest": 4, "cpuLimit": 8},  # a YAML number
    {"cpuRequest": "4", "cpuLimit": "8e0", "memoryRequest": "17179869184", "memoryLimit": "32Gi", "shmSize": "8G"},
])
def test_training_resources_at_their_floors_are_taken(training: dict[str, Any]) -> None:
    cfg = config.parse(lab_raw(training=training), {"sshPrivateKey"})
    assert cfg.training.cpu_limit == str(training.get("cpuLimit", "8"))


def test_storage_size_zero_is_refused() -> None:
    with pytest.raises(config.ConfigError) as err:
        config.parse(lab_raw(storage={"provision": True, "size": "0"}), {"sshPrivateKey"})
    assert "more than zero" in dict(err.value.problems)["storage.size"]


# apimachinery's own table (pkg/api/resource/quantity_test.go, TestQuantityParse): each input and
# the value it parses to, decQuantity(m, e) = m * 10^e, rounding to the nano included.
KUBERNETES_PARSES = {
    "0": "0", "0n": "0", "0u": "0", "0m": "0", "0Ki": "0", "0k": "0", "0Mi": "0", "0M": "0", "0Gi": "0",
    "0G": "0", "0Ti": "0", "0T": "0", "1": "1", "1Ki": "1024", "8Ki": "8192", "7Mi": str(7 * 2**20),
    "6Gi": str(6 * 2**30), "5Ti": str(5 * 2**40), "4Pi": str(4 * 2**50), "3Ei": str(3 * 2**60),
    "10Ti": str(10 * 2**40), "100Ti": str(100 * 2**40), "5n": "5e-9", "4u": "4e-6", "3m": "3e-3", "9": "9",
    "8k": "8e3", "50k": "5e4", "7M": "7e6", "6G": "6e9", "5T": "5e12", "40T": "4e13", "300T": "3e14",
    "2P": "2e15", "1E": "1e18", "1E-3": "1e-3", "1e3": "1e3", "1E6": "1e6", "1e9": "1e9", "1E12": "1e12",
    "1e15": "1e15", "1E18": "1e18", "1e14": "1e14", "1e13": "1e13", "100.035k": "100035",
    "0.001": "1e-3", "0.0005k": "5e-1", "0.005": "5e-3", "0.05": "5e-2", "0.5": "5e-1", "0.00050k": "5e-1",
    "0.00500": "5e-3", "0.05000": "5e-2", "0.50000": "5e-1", "0.5e0": "5e-1", "0.5e-1": "5e-2",
    "0.5e-2": "5e-3", "10.035M": "10035e3", "1.2e3": "12e2", "1.3E+6": "13e5", "1.40e9": "14e8",
    "1.53E12": "153e10", "1.6e15": "16e14", "1.7E18": "17e17", "9.01": "901e-2", "8.1k": "81e2",
    "7.123456M": "7123456", "6.987654321G": "6987654321", "5.444T": "5444e9", "40.1T": "401e11",
    "300.2T": "3002e11", "2.5P": "25e14", "1.01E": "101e16",
    # things that saturate or round: up to the next nano
    "3.001n": "4e-9", "1.1E-9": "2e-9", "0.0000000001": "1e-9", "0.0000000005": "1e-9",
    "0.00000000050": "1e-9", "0.5e-9": "1e-9", "0.9n": "1e-9", "0.00000012345": "124e-9",
    "0.00000012354": "124e-9",
    # fractional binary, and "things written by trolls"
    "100.035Ki": "10243584e-2", "0.5Mi": str(2**19), "0.05Gi": "536870912e-1", "0.025Ti": "274877906944e-1",
    "0.000000000001Ki": "2e-9", ".001": "1e-3", ".0001k": "100e-3", "1.": "1", "1.G": "1e9",
}
# The same table's invalid strings.
KUBERNETES_REFUSES = ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 "]


@pytest.mark.parametrize("text", sorted(KUBERNETES_PARSES))
def test_kubernetes_own_examples_parse_to_its_values(text: str) -> None:
    """TestQuantityParse also parses each with a leading '-' (the negative value) and '+'."""
    value = Decimal(KUBERNETES_PARSES[text])
    assert parse_quantity(text) == value
    assert parse_quantity("-" + text) == -value
    assert parse_quantity("+" + text) == value


@pytest.mark.parametrize("text", KUBERNETES_REFUSES)
def test_kubernetes_own_invalid_examples_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["9Ei", "9223372036854775807Ki", "12E"])
def test_what_kubernetes_saturates_or_holds_beyond_int64_is_refused(text: str) -> None:
    """ParseQuantity caps 9Ei at 2^63-1 and keeps 12E as it is; neither is a quota or a size anyone means."""
    with pytest.raises(ValueError, match="2\\^63-1"):
        parse_quantity(text)
