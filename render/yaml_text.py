"""The YAML text of render's output files: exactly `yaml.safe_dump(value, sort_keys=False)`, fast.

PyYAML's pure-Python emitter took ~4 s of a 128-worker lab's `./plan` (684 Kubernetes objects);
libyaml's (yaml.CSafeDumper: the same SafeRepresenter and resolver, the emitter in C) takes a
sixth of that and writes the same bytes, except in two cases found by comparing the two emitters
on the rendered stacks and on generated values (tests/render/test_yaml_text.py):
- a scalar written double-quoted, i.e. holding a character outside printable ASCII (a tab, a
  non-ASCII letter) or a line break next to a space (an indented script or JSON document in a
  ConfigMap), is folded at other points when it is longer than the line;
- a mapping key of more than 128 characters is written as a complex key (`? key`) by one and not
  the other (keys that are not one short line of text are left to Python altogether).
A value holding either goes through the Python emitter, so render's files stay byte for byte what
they were (3 of 684 objects at 128 workers: the ConfigMaps carrying record.py and the dashboards).
Without libyaml (a PyYAML built without it), everything does.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# What makes PyYAML's Emitter.analyze_scalar pick double quotes, or more: any character but a line
# break outside printable ASCII (allow_unicode is off), a space before a break, a break before one.
_DOUBLE_QUOTED = re.compile(r"[^\n\x20-\x7e]|\n | \n")
# The Python emitter's limit for a simple key is 128 characters; anything near it goes to Python.
_LONG_KEY = 100

_C_DUMPER: type | None = getattr(yaml, "CSafeDumper", None) if yaml.__with_libyaml__ else None


def _needs_python_emitter(value: Any) -> bool:
    """Whether `value` holds a scalar or key the two emitters would write differently."""
    if isinstance(value, str):
        return _DOUBLE_QUOTED.search(value) is not None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or len(key) > _LONG_KEY or "\n" in key or _DOUBLE_QUOTED.search(key):
                return True
            if _needs_python_emitter(item):
                return True
        return False
    if isinstance(value, list):
        return any(_needs_python_emitter(item) for item in value)
    return False


def dump(value: Any) -> str:
    """`yaml.safe_dump(value, sort_keys=False)`, with libyaml's emitter wherever it writes the same."""
    if _C_DUMPER is None or _needs_python_emitter(value):
        return yaml.safe_dump(value, sort_keys=False)
    return yaml.dump(value, Dumper=_C_DUMPER, sort_keys=False)
