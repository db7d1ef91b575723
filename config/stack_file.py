"""Reading Pulumi.yaml and Pulumi.<stack>.yaml: the one reader every stack file goes through.

A stack file is YAML anyone may hand the planner, so it is read as data and nothing more:
  - one pass over the parser's events (iterative: no recursion, nothing built yet) refuses, before
    any value is constructed, an alias bomb (aliases that expand to more than ALIAS_BUDGET values
    and characters: "billion laughs", 3 KB of text that grows exponentially once a consumer walks
    it), an alias inside its own anchor, nesting deeper than MAX_DEPTH (libyaml's composer
    recurses and crashes the process on deep enough nesting), an explicit tag other than YAML's
    plain types (`!!python/object/apply:...` and the like), a key that is not plain text and a key
    given twice in one mapping (Pulumi's own reader, gopkg.in/yaml.v3, refuses it: "mapping key
    ... already defined");
  - bytes that are not UTF-8 and characters YAML does not allow are refused with their line;
  - a tab in the indentation, which YAML forbids, is named as such rather than as libyaml's
    "cannot start any token";
  - the file and its `config:` must be mappings; a date-like value stays text, as Pulumi reads it
    (yaml.v3 hands a timestamp to an untyped value as its string).
Every refusal is a StackFileError (a ConfigError: ./plan exits 2) naming the file, the line and
what is wrong; no traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import yaml

from config.errors import ConfigError

# What aliases may add once expanded, counted as one per value plus its characters: the committed
# stack files hold under 10 thousand in all, an alias bomb billions.
ALIAS_BUDGET = 1_000_000
MAX_DEPTH = 64
_PLAIN_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")} | {"!"}
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it


class StackFileError(ConfigError):
    """A stack file the planner will not read: the file, the line and what is wrong."""

    def __init__(self, path: Path, line: int | None, what: str):
        self.problems = []
        self.path, self.line, self.what = path, line, what
        where = f"{path}, line {line}" if line is not None else str(path)
        pulumi.RunError.__init__(self, f"{where}: {what}")


class _Loader(_BaseLoader):
    """The safe loader without implicit timestamps (they stay text, as Pulumi reads them)."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }


def _line(mark: Any) -> int | None:
    return mark.line + 1 if mark is not None else None


class _Frame:
    """An open mapping or sequence: its expanded size so far and, for a mapping, its keys."""

    def __init__(self, anchor: str | None, is_mapping: bool):
        self.anchor, self.is_mapping = anchor, is_mapping
        self.size = 1
        self.keys: set[str] = set()
        self.expect_key = is_mapping


def _check_events(text: str, path: Path) -> None:
    """Refuse, from the parser's events alone, what must never be built (module docstring)."""
    anchors: dict[str, int] = {}  # anchor -> its expanded size, once its node is complete
    stack: list[_Frame] = []
    alias_units = documents = 0

    def add(size: int, event: Any) -> None:
        if not stack:
            return
        frame = stack[-1]
        frame.size += size
        if frame.is_mapping:
            frame.expect_key = not frame.expect_key

    def key_check(event: Any) -> None:
        if not (stack and stack[-1].is_mapping and stack[-1].expect_key):
            return
        if not isinstance(event, yaml.ScalarEvent):
            raise StackFileError(path, _line(event.start_mark), "a key must be plain text, not a list, mapping or alias")
        if event.value in stack[-1].keys:
            raise StackFileError(path, _line(event.start_mark), f"the key {event.value!r} is given twice in one "
                                 "mapping (Pulumi refuses it too): keep one")
        stack[-1].keys.add(event.value)

    def tag_check(event: Any) -> None:
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _PLAIN_TAGS:
            shown = tag.replace("tag:yaml.org,2002:", "!!")
            raise StackFileError(path, _line(event.start_mark), f"the tag {shown} is not allowed: a stack file "
                                 "holds plain values (text, numbers, booleans, lists, mappings) only")

    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            key_check(event)
            if event.anchor not in anchors:
                loop = any(f.anchor == event.anchor for f in stack)
                what = "inside its own anchor (a loop)" if loop else "to an anchor not defined before it"
                raise StackFileError(path, _line(event.start_mark), f"the alias *{event.anchor} is {what}")
            alias_units += anchors[event.anchor]
            if alias_units > ALIAS_BUDGET:
                raise StackFileError(path, _line(event.start_mark), (
                    f"its aliases (*{event.anchor} and the ones before it) expand to more than {ALIAS_BUDGET:,} "
                    "values and characters, a YAML alias bomb: write the values out or use fewer aliases"))
            add(anchors[event.anchor], event)
        elif isinstance(event, yaml.ScalarEvent):
            key_check(event)
            tag_check(event)
            size = 1 + len(event.value)
            if event.anchor is not None:
                anchors[event.anchor] = size
            add(size, event)
        elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            key_check(event)
            tag_check(event)
            if len(stack) >= MAX_DEPTH:
                raise StackFileError(path, _line(event.start_mark), f"nested more than {MAX_DEPTH} levels deep")
            stack.append(_Frame(event.anchor, isinstance(event, yaml.MappingStartEvent)))
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            done = stack.pop()
            if done.anchor is not None:
                anchors[done.anchor] = done.size
            add(done.size, event)
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise StackFileError(path, _line(event.start_mark), "a second YAML document (`---`): a stack file "
                                     "is one")


def _parse_error(err: yaml.YAMLError, text: str, path: Path) -> StackFileError:
    """libyaml's error, with a tab in the indentation named as such."""
    if isinstance(err, yaml.reader.ReaderError):
        return StackFileError(path, text.count("\n", 0, err.position) + 1, f"the character {chr(err.character)!r} (#x{err.character:04x}) is not "
                              "allowed in YAML: remove it")
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    line = _line(mark)
    if mark is not None:
        lines = text.split("\n")
        source = lines[mark.line].rstrip("\r") if mark.line < len(lines) else ""
        indent = source[:len(source) - len(source.lstrip(" \t"))]
        if "\t" in indent or (mark.column < len(source) and source[mark.column] == "\t"):
            return StackFileError(path, line, "a tab in the indentation: YAML indents with spaces only")
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    return StackFileError(path, line, f"not valid YAML: {f'{context}, ' if context else ''}{problem}")


def _text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise StackFileError(path, None, f"cannot read it ({err.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise StackFileError(path, line, f"the byte 0x{raw[err.start]:02x} is not UTF-8: save the file as "
                             "UTF-8") from None


def read(path: Path) -> dict[str, Any]:
    """The mapping a stack file (or Pulumi.yaml) holds; its `config:` is a mapping ({} when the file
    or the section is empty). Raises StackFileError (module docstring)."""
    return parse(_text(path), path)[0]


def parse(text: str, path: Path) -> tuple[dict[str, Any], yaml.MappingNode | None]:
    """read() of `text` (what `path` holds or would hold), with the mapping's node (its marks place
    each key and value: config/reference.py rewrites lines by them); None for an empty file."""
    try:
        _check_events(text, path)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return {"config": {}}, None
            if not isinstance(node, yaml.MappingNode):
                raise StackFileError(path, _line(node.start_mark), "the file must be a mapping (`config:` and its "
                                     "keys), not a list or a single value")
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        raise _parse_error(err, text, path) from None
    section = next((v for k, v in node.value if k.value == "config"), None)
    if data.get("config") is None:
        data["config"] = {}
    elif not isinstance(data["config"], dict) or not isinstance(section, yaml.MappingNode):
        raise StackFileError(path, _line(section.start_mark if section else None),
                             "`config:` must be a mapping of keys to values (`  gpu-cluster:platform: lab`)")
    else:
        for key_node, _ in section.value:
            if key_node.tag != "tag:yaml.org,2002:str" and key_node.value != "<<":
                raise StackFileError(path, _line(key_node.start_mark), f"the key {key_node.value!r} under `config:` "
                                     "must be text (a key such as gpu-cluster:platform), not a number, boolean or null")
    return data, node
