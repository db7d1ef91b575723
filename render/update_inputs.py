"""One resource's inputs as an update sees them (render/update.py): the plan entry (Resource), a
changed input (Change), the value unknown at preview (UNKNOWN), Pulumi property paths, the leaf
by leaf diff of two input values, and the engine's ignoreChanges."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from render import program

PathT = tuple[str | int, ...]


class _Unknown:
    """An input computed from a resource created or replaced in this update: unknown at preview."""

    def __repr__(self) -> str:
        return "<unknown>"

    def __copy__(self) -> _Unknown:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Unknown:
        return self


UNKNOWN: Any = _Unknown()
_MISSING: Any = object()

@dataclass(frozen=True)
class Resource:
    """One plan entry as the update sees it (program.Registration.entry(), or a plan.json entry)."""

    urn: str
    type: str
    name: str
    parent: str = ""
    custom: bool = True
    provider: str = ""  # "<provider urn>::<id>", "" for the default provider
    inputs: dict[str, Any] = field(default_factory=dict)
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    options_recorded: bool = True  # False for a plan.json written before options were recorded

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> Resource:
        type_ = entry["type"]
        return cls(
            urn=entry["urn"],
            type=type_,
            name=entry["name"],
            parent=entry.get("parent", ""),
            # Older plan.json entries have no "custom": components are the project's own types.
            custom=entry.get("custom", not type_.startswith("gpucluster:")),
            provider=entry.get("provider", ""),
            inputs=entry.get("inputs") or {},
            dependencies=list(entry.get("dependencies") or []),
            property_dependencies=dict(entry.get("propertyDependencies") or {}),
            options=dict(entry.get("options") or {}),
            options_recorded="options" in entry,
        )

    @classmethod
    def from_plan(cls, plan: program.Plan) -> list[Resource]:
        return [cls.from_entry(r.entry()) for r in plan.resources]

    @property
    def provider_urn(self) -> str:
        return self.provider.rsplit("::", 1)[0] if self.provider else ""

    def option(self, name: str, default: Any = None) -> Any:
        value = self.options.get(name)
        return default if value is None else value


@dataclass(frozen=True)
class Change:
    path: str  # a Pulumi property path: spec.template.spec.containers[0].image
    kind: str  # add | delete | update
    replaces: str = ""  # the rule that makes this change a replacement ("" when it does not)
    unknown: bool = False  # the new value is unknown at preview

# ------------------------------------------------------------------------------------------------
# property paths and value diffs


_PATH_TOKEN = re.compile(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+|\*)\]|\.?([^.\[\]]+)')


def parse_path(text: str) -> PathT:
    """A Pulumi property path (`triggers[*]`, `metadata.annotations["a.b/c"]`) or a provider's
    JSONPath (`.spec.containers[*].image`) as a tuple of keys and indices; `*` matches any."""
    out: list[str | int] = []
    pos = 0
    text = text.lstrip(".")
    while pos < len(text):
        m = _PATH_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"bad property path {text!r}")
        quoted, index, key = m.groups()
        if quoted is not None:
            out.append(quoted.replace('\\"', '"'))
        elif index is not None:
            out.append("*" if index == "*" else int(index))
        else:
            out.append(key)
        pos = m.end()
    return tuple(out)


def format_path(path: PathT) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_$][\w$-]*", part):
            out += f".{part}" if out else part
        else:
            out += '["' + part.replace('"', '\\"') + '"]'
    return out


def contains(pattern: PathT, path: PathT) -> bool:
    """PropertyPath.Contains (sdk/go/common/resource/properties_path.go): `path` is `pattern` or
    under it, `*` matching any key or index."""
    if len(path) < len(pattern):
        return False
    return all(p == "*" or (type(p) is type(q) and p == q) for p, q in zip(pattern, path, strict=False))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def _present(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


def leaf_changes(old: Any, new: Any, path: PathT = ()) -> list[tuple[PathT, str]]:
    """Every changed leaf between two input values, as (path, add | delete | update); lists
    element by element, as Pulumi's ObjectDiff and the providers' patch converters do."""
    if new is UNKNOWN:
        return [(path, "update")]
    if isinstance(old, dict) and isinstance(new, dict):
        old, new = _present(old), _present(new)
        out: list[tuple[PathT, str]] = []
        for key in sorted(set(old) | set(new)):
            if key not in new:
                out.append(((*path, key), "delete"))
            elif key not in old:
                out.append(((*path, key), "add"))
            else:
                out += leaf_changes(old[key], new[key], (*path, key))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            if i >= len(new):
                out.append(((*path, i), "delete"))
            elif i >= len(old):
                out.append(((*path, i), "add"))
            else:
                out += leaf_changes(old[i], new[i], (*path, i))
        return out
    return [] if _same(old, new) else [(path, "update")]


def _get(value: Any, path: PathT) -> Any:
    for part in path:
        if isinstance(part, int) and isinstance(value, list) and part < len(value):
            value = value[part]
        elif isinstance(part, str) and isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


def _expand(pattern: PathT, value: Any, prefix: PathT = ()) -> list[PathT]:
    """The concrete paths a pattern with `*` names in `value`."""
    if not pattern:
        return [prefix]
    head, rest = pattern[0], pattern[1:]
    if head != "*":
        return _expand(rest, _get(value, (head,)), (*prefix, head))
    if isinstance(value, dict):
        keys: Iterable[str | int] = list(value)
    elif isinstance(value, list):
        keys = range(len(value))
    else:
        keys = []
    return [p for k in keys for p in _expand(rest, _get(value, (k,)), (*prefix, k))]


def _reset(old: Any, new: Any, path: PathT) -> None:
    """PropertyPath.Reset: the new value at `path` becomes the old one (removed when old has none)."""
    parent = _get(new, path[:-1])
    last = path[-1]
    before = _get(old, path)
    if isinstance(parent, dict) and isinstance(last, str):
        if before is _MISSING:
            parent.pop(last, None)
        else:
            parent[last] = copy.deepcopy(before)
    elif isinstance(parent, list) and isinstance(last, int) and last < len(parent) and before is not _MISSING:
        parent[last] = copy.deepcopy(before)


def ignore_changes(old: dict[str, Any], new: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """processIgnoreChanges (step_generator.go): each ignored path keeps its old value."""
    out = copy.deepcopy(new)
    for text in paths:
        try:
            pattern = parse_path(text)
        except ValueError:
            continue
        if not pattern:
            continue
        for path in _expand(pattern, old) + _expand(pattern, out):
            _reset(old, out, path)
    return out
