"""Every config key at its boundary values, run through the real program (tests/config/test_value_bounds.py).

The keys come from walking the stack types' pydantic models (config/*.py); each key gets its bounds
(ge/gt/le), one past them, every enum member and one that is none, empty, a huge string, a string
with a newline and the host scripts' here-document terminator, the terminator alone, and a wrong
type. Each value replaces the key in a base config (a committed stack file with the optional
sections on, so the code that reads the key runs) and goes through config.load, as `pulumi up`
reads it. What load takes is then rendered by render.program.run, the program `python -m render`
runs, without the whole-cluster check. Rendering is the slow part (1-2.5 s a plan), so the values
load takes are rendered together, many keys at once; a plan that raises is split until the value
that raises is found alone.
"""

from __future__ import annotations

import copy
import enum
import ipaddress
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pulumi.runtime.config import set_all_config
from pydantic import BaseModel
from pydantic.fields import FieldInfo

import config
from components.lab.scripts import HEREDOC_END
from config.walk import Key, Path, model_of, walk
from render import program

HUGE = "a" * 10_000
SECRET = "[secret]"


@dataclass(frozen=True)
class Case:
    """One value of one key; `bad` when it is wrong whatever the other keys say (the key itself must
    be named when it is refused)."""

    key: Key
    label: str
    value: Any
    bad: bool = False

    @property
    def switches_off(self) -> bool:
        """A value that turns code off: rendered apart, so it never hides another key's value."""
        return self.value in (False, "", None) or self.value == [] or self.value == {}


def optional_sections(model: type[BaseModel], prefix: Path = ()) -> set[Path]:
    """The paths of sections that may be absent (bastion, network.roce): a base without one
    cannot reach the keys under it."""
    out: set[Path] = set()
    for key in walk(model, prefix):
        sub, optional, _ = model_of(key.annotation)
        if sub is not None and optional:
            out.add(key.path)
    return out


def _bound(info: FieldInfo, *names: str) -> Any:
    for meta in info.metadata:
        for attr in names:
            if getattr(meta, attr, None) is not None:
                return getattr(meta, attr)
    return None


def _scalar(annotation: Any) -> Any:
    """The annotation without None."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) in (typing.Union, type(int | None)) and len(args) == 1 else annotation


def cases(key: Key, current: Any) -> list[Case]:
    """The boundary values of `key`; `current`: its value in the base config (a valid one)."""
    ann, info = _scalar(key.annotation), key.info
    out = [Case(key, "base value", current)] if current is not None else []
    add = lambda label, value, bad=False: out.append(Case(key, label, value, bad))  # noqa: E731
    sub, _, many = model_of(key.annotation)
    origin = typing.get_origin(ann)
    if sub is not None:
        add("wrong type", "not-an-object", True)
        if many:
            add("empty list", [])
        return out
    if ann is bool:
        add("true", True), add("false", False), add("wrong type", "sometimes", True)
    elif ann is int or ann is float:
        low, high = _bound(info, "ge", "gt"), _bound(info, "le", "lt")
        step = 1 if ann is int else 0.001
        if low is not None:
            add("min", low if _bound(info, "ge") is not None else low + step)
            add("min-1", low - step if _bound(info, "ge") is not None else low, True)
        else:
            add("zero", 0), add("negative", -1)
        if high is not None:
            add("max", high), add("max+1", high + step, True)
        else:
            add("huge", 2**63 if ann is int else 1e308)
        add("wrong type", "many", True)
        if ann is float:
            add("nan", "nan", True), add("infinity", "inf", True)
    elif isinstance(ann, type) and issubclass(ann, enum.Enum):
        for member in ann:
            add(f"enum {member.value}", member.value)
        add("not a member", "no-such-value", True)
    elif origin is typing.Literal:
        for member in typing.get_args(ann):
            add(f"literal {member}", getattr(member, "value", member))
        add("not a member", "no-such-value", True)
    elif ann is ipaddress.IPv4Network:
        for net in ("0.0.0.0/0", "10.0.0.0/8", "255.255.255.255/32", "100.64.0.0/29"):
            add(f"network {net}", net)
        add("host bits set", "10.0.0.1/8", True), add("not a network", "10.0.0.0/33", True)
    elif ann is ipaddress.IPv4Address:
        for addr in ("0.0.0.0", "255.255.255.255", "127.0.0.1", "10.0.0.1"):
            add(f"address {addr}", addr)
        add("not an address", "10.0.0.256", True)
    elif origin is dict:
        add("empty", {}), add("terminator key", {HEREDOC_END: "1"}, True)
        add("newline value", {"NCCL_X": "1\n" + HEREDOC_END}, True)
        add("huge key", {HUGE: "1"}), add("wrong type", ["x"], True)
    elif origin is tuple:  # of strings (gpuNodes, zones)
        add("empty list", []), add("terminator", [HEREDOC_END], True), add("newline", ["a\n" + HEREDOC_END], True)
        add("huge", [HUGE]), add("wrong type", "not-a-list", True)
    else:  # strings (a top-level one is always text: Pulumi hands every value over as text)
        add("empty", ""), add("huge", HUGE), add("terminator", HEREDOC_END, True)
        add("newline and terminator", f"x\n{HEREDOC_END}\nreboot", True)
        if isinstance(current, str):
            add("terminator in the value", f"{current}/{HEREDOC_END}", True)
        if len(key.path) > 1:
            add("wrong type", ["not", "text"], True)
    return out


# --- base configs -------------------------------------------------------------------------------

@dataclass
class Base:
    """A committed stack file with keys overridden: `raw` holds the values (objects decoded)."""

    stack: str
    label: str
    raw: dict[str, Any]
    secrets: list[str] = field(default_factory=list)

    def values(self, raw: dict[str, Any] | None = None) -> tuple[dict[str, str], list[str]]:
        """program.run's config: strings as given, everything else as JSON (as Pulumi hands it over)."""
        items = (raw if raw is not None else self.raw).items()
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in items}, list(self.secrets)


def base(stack: str, label: str, secrets: tuple[str, ...] = (), **overrides: Any) -> Base:
    values, secret_keys = program.stack_config(stack)
    raw: dict[str, Any] = {}
    for key, value in values.items():
        try:
            raw[key] = json.loads(value) if value.startswith(("{", "[")) else value
        except ValueError:
            raw[key] = value
    for key, value in overrides.items():
        full = key if ":" in key else f"{config.NAMESPACE}:{key}"
        raw[full] = {**raw[full], **value} if isinstance(value, dict) and isinstance(raw.get(full), dict) else value
    for secret in secrets:
        raw[f"{config.NAMESPACE}:{secret}"] = SECRET
    return Base(stack, label, raw, [*secret_keys, *(f"{config.NAMESPACE}:{s}" for s in secrets)])


def _full(key: str) -> str:
    return key if ":" in key else f"{config.NAMESPACE}:{key}"


def current(raw: dict[str, Any], path: Path, optional: set[Path]) -> tuple[bool, Any]:
    """(whether `path` can be set in `raw`, its value there or None): its parents exist, or are
    sections with defaults (an optional section must be there)."""
    node: Any = raw.get(_full(str(path[0])))
    if len(path) == 1:
        return True, node
    if node in ("", None):
        if path[:1] in optional:
            return False, None
        node = {}  # a section the stack file leaves to its defaults
    for i, part in enumerate(path[1:-1], start=2):
        if isinstance(part, int):
            if not isinstance(node, list) or len(node) <= part:
                return False, None
            node = node[part]
        elif isinstance(node, dict) and node.get(part) not in (None, ""):
            node = node[part]
        elif isinstance(node, dict) and path[:i] not in optional:
            node = {}
        else:
            return False, None
    return isinstance(node, dict), node.get(path[-1]) if isinstance(node, dict) else None


def with_values(raw: dict[str, Any], cases_: list[Case]) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    for case in cases_:
        path = case.key.path
        top = _full(str(path[0]))
        if len(path) == 1:
            out[top] = case.value
            continue
        if out.get(top) in ("", None):
            out[top] = {}
        node = out[top]
        for part in path[1:-1]:
            if isinstance(part, str) and node.get(part) in (None, ""):
                node[part] = {}
            node = node[part]
        node[path[-1]] = case.value
    return out


# --- running ------------------------------------------------------------------------------------

@dataclass
class Outcome:
    refused: dict[str, str] | None = None  # problem key -> message
    error: str | None = None  # a traceback: the exception load or the render raised


def load(base_: Base, cases_: list[Case]) -> Outcome:
    values, secrets = base_.values(with_values(base_.raw, cases_))
    set_all_config(values, secrets)
    try:
        config.load()
    except config.ConfigError as err:
        return Outcome(refused=dict(err.problems))
    except Exception as err:  # noqa: BLE001 (what the test looks for)
        return Outcome(error=f"config.load raised {type(err).__name__}: {err}"[:500])
    return Outcome()


def render(base_: Base, cases_: list[Case]) -> str | None:
    """None when the plan renders; else what it raised."""
    try:
        program.run(base_.stack, config=base_.values(with_values(base_.raw, cases_)))
    except Exception as err:  # noqa: BLE001 (what the test looks for)
        return f"{type(err).__name__}: {err}"[:500]
    return None


def batches(base_: Base, taken: list[Case], loads: Callable[[Base, list[Case]], Outcome]) -> list[list[Case]]:
    """`taken` (each loads alone) in as few groups as load still takes together: no two values of
    one key, or of a key and a key under it, and values that switch code off apart from the rest."""
    groups: list[list[Case]] = []
    for case in taken:
        for group in groups:
            if group[0].switches_off != case.switches_off or any(_overlap(c.key.path, case.key.path) for c in group):
                continue
            outcome = loads(base_, [*group, case])
            if outcome.refused is None and outcome.error is None:
                group.append(case)
                break
        else:
            groups.append([case])
    return groups


def _overlap(a: Path, b: Path) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def culprits(base_: Base, group: list[Case]) -> list[tuple[Case, str]]:
    """The values of `group` that raise when rendered (the group raised): found by halving."""
    half = len(group) // 2
    found: list[tuple[Case, str]] = []
    for part in (group[:half], group[half:]) if len(group) > 1 else ():
        error = render(base_, part)
        if error:
            found += culprits(base_, part) if len(part) > 1 else [(part[0], error)]
    return found or [(case, "raises only with the other values rendered with it") for case in group]
