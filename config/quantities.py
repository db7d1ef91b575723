"""Kubernetes quantities (cpu, memory, sizes) read as the API server reads them.

The grammar is apimachinery's resource.Quantity (k8s.io/apimachinery/pkg/api/resource/quantity.go
and suffix.go): an optionally signed decimal number, then a binary suffix (Ki Mi Gi Ti Pi Ei), a
decimal one (n u m "" k M G T P E) or a decimal exponent (e/E and a signed integer). A quantity
"may not represent a number greater than 2^63-1", and what has more than three decimal places is
rounded up (0.1m is 1m): the value is exact here (Decimal), so a comparison never rounds the
wrong way.
"""

from __future__ import annotations

import re
from decimal import Decimal

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])"
    r"|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Quantity's bound (quantity.go: "no quantity may represent a number greater than 2^63-1").
MAX_QUANTITY = Decimal(2**63 - 1)
EXAMPLES = "e.g. '500m' or '4' (cpu), '16Gi' or '1.5G' (bytes)"


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity (cpu in cores, memory in bytes); ValueError if the API
    server would not read it, or it lies beyond Quantity's bound of 2^63-1."""
    m = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"{str(text)[:80]!r} is not a Kubernetes quantity ({EXAMPLES})")
    exponent = m["exponent"]
    # suffix.go reads the exponent as a 32-bit integer; far smaller bounds already decide here.
    if exponent is not None and abs(int(exponent)) > 40:
        raise ValueError(f"{text[:80]!r}: the exponent is outside what a quantity holds ({EXAMPLES})")
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
    return value


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
