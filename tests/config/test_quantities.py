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
