"""What the kubelet does to a container's env and command before it starts: fieldRefs resolved,
`$(VAR)` references expanded from the variables defined before (`$$` escapes a `$`). Shared by the
tests that run a rendered pod's command as a local process or read its env."""

from __future__ import annotations

import re
from typing import Any

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """$(VAR) references in a command, arg or env value; an unknown one stays as written."""
    return _REFERENCE.sub(lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)


def container_env(container: dict[str, Any], fields: dict[str, str]) -> dict[str, str]:
    """The container's env in order: a fieldRef from `fields` (fieldPath -> value), a value with
    its references to earlier variables expanded."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(str(e["value"]), env)
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in fields, f"env {e['name']}: no stand-in for fieldRef {path}"
            env[e["name"]] = fields[path]
    return env
