"""Kubernetes quantities (cpu, memory, sizes) read as the API server reads them.

The grammar is apimachinery's resource.Quantity (k8s.io/apimachinery/pkg/api/resource/quantity.go
and suffix.go): an optionally signed decimal number, then a binary suffix (Ki Mi Gi Ti Pi Ei), a
decimal one (n u m "" k M G T P E) or a decimal exponent (e/E and a signed integer). A quantity
"may not represent a number greater than 2^63-1" (ParseQuantity saturates a binary one at that
bound, 9Ei, and keeps a larger decimal one, 12E: both are refused here, as no quota or size that
large is meant), and a value finer than a nano is rounded up to the next nano, away from zero, as
ParseQuantity does (3.001n is 4n, 0.5e-9 is 1n). Values are exact (Decimal), so a comparison never
rounds the wrong way. One parser for the config and the whole-cluster check (render/cluster/
scheduling.py), so a quantity the config takes is one the check reads; tests/config/
test_quantities.py holds it to apimachinery's own examples (quantity_test.go, TestQuantityParse).
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Decimal, localcontext

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])"
    r"|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Quantity's bound (quantity.go: "no quantity may represent a number greater than 2^63-1").
MAX_QUANTITY = Decimal(2**63 - 1)
_NANO = Decimal("1e-9")  # quantity.go: values are rounded up to Nano, the finest scale it keeps
EXAMPLES = "e.g. '500m' or '4' (cpu), '16Gi' or '1.5G' (bytes)"


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity (cpu in cores, memory in bytes); ValueError if the API
    server would not read it, or it lies beyond Quantity's bound of 2^63-1."""
    m = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"{str(text)[:80]!r} is not a Kubernetes quantity ({EXAMPLES})")
    exponent = m["exponent"]
    # suffix.go reads the exponent as a 32-bit integer.
    if exponent is not None and not -(2**31) <= int(exponent) < 2**31:
        raise ValueError(f"{text[:80]!r}: the exponent is outside what a quantity holds ({EXAMPLES})")
    # Exact arithmetic: enough digits for the number and 2^60, any exponent.
    with localcontext(prec=len(m["number"]) + 40, Emax=MAX_EMAX, Emin=MIN_EMIN):
        value = Decimal(m["number"])
        if m["binary"]:
            value *= 2 ** _BINARY[m["binary"]]
        elif m["decimal"]:
            value = value.scaleb(_DECIMAL[m["decimal"]])
        elif exponent is not None:
            value = value.scaleb(int(exponent))
        if m["sign"] == "-":
            value = -value
        if abs(value) > MAX_QUANTITY:
            raise ValueError(f"{text[:80]!r} is more than a Kubernetes quantity holds (2^63-1)")
        return value.quantize(_NANO, rounding=ROUND_UP)  # away from zero, as inf.RoundUp on |value|


def check_positive_quantity(value: object) -> str:
    """A quantity above zero, as text (a YAML number such as `cpuLimit: 8` comes as one)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"must be a Kubernetes quantity ({EXAMPLES})")
    text = value if isinstance(value, str) else str(value)
    if parse_quantity(text) <= 0:
        raise ValueError(f"{text!r} must be more than zero ({EXAMPLES})")
    return text


def format_bytes(value: Decimal) -> str:
    """A byte count in the largest binary unit that shows it to two decimals."""
    for suffix, shift in sorted(_BINARY.items(), key=lambda s: -s[1]):
        if value >= 2**shift:
            return f"{value / 2**shift:.2f}".rstrip("0").rstrip(".") + suffix
    return f"{value:f}"
