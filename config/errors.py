"""ConfigError: every bad key of a stack config, each named as `pulumi config` names it.

Keys of this program's namespace are shown as `gpu-cluster:<path>` (`gpu-cluster:hosts[1].address`);
the Google Cloud provider's own keys (`gcp:project`, `gcp:region`) as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

NAMESPACE = "gpu-cluster"

# (key without the namespace, what is wrong with it), in the order found.
Problems = list[tuple[str, str]]


class ConfigError(pulumi.RunError):
    """A stack config error: one line per bad key, each naming the key. Pulumi prints it without a
    traceback (it is a `pulumi.RunError`)."""

    def __init__(self, problems: Problems):
        self.problems = problems
        lines = [f"{self.qualified_key(key)}: {message}" for key, message in problems]
        super().__init__("invalid stack configuration:\n  " + "\n  ".join(lines))

    @staticmethod
    def qualified_key(key: str) -> str:
        """The key as `pulumi config` names it: gcp: keys as they are, every other under gpu-cluster:."""
        return key if key.startswith("gcp:") else f"{NAMESPACE}:{key}"


def key_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a config key path: ('hosts', 1, 'address') -> hosts[1].address."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def describe(err: Mapping[str, Any]) -> str:
    """What a pydantic error says, in the words of a config message."""
    kind = err.get("type", "")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known key (see docs/reference/config.md)"
    if kind == "enum":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"must be one of {allowed} (got {err.get('input')!r})"
    msg = str(err.get("msg", "is invalid"))
    return msg.removeprefix("Value error, ")
