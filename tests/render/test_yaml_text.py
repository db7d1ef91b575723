"""render/yaml_text.py: render's YAML files come from libyaml's emitter, byte for byte what PyYAML's
Python emitter (`yaml.safe_dump`, what render used before) writes, and they parse back to the value.

The reference is PyYAML itself: every object of the committed stacks' plans, and values generated
to hit what the two emitters treat differently (quoting, folding, long keys, indicators)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import yaml

from render import program, yaml_text
from render.__main__ import kubernetes_objects

pytestmark = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML is built without libyaml here")


@pytest.fixture(scope="module", params=("lab", "dev", "gke"))
def written_values(request: pytest.FixtureRequest) -> list[Any]:
    """Every value render writes as YAML for a committed stack: its Kubernetes objects, Helm releases."""
    plan = program.run(request.param)
    releases = plan.of_type("kubernetes:helm.sh/v3:Release") + plan.of_type("kubernetes:helm.sh/v4:Chart")
    values = kubernetes_objects(plan) + [r.inputs for r in releases]
    assert len(values) >= 10, f"{request.param}: only {len(values)} values"
    return values


def test_every_kubernetes_object_written_by_libyaml_parses_back_equal(written_values: list[Any]) -> None:
    for value in written_values:
        text = yaml.dump(value, Dumper=yaml.CSafeDumper, sort_keys=False)
        assert yaml.safe_load(text) == value, text[:400]


def test_render_yaml_is_byte_for_byte_the_python_emitters(written_values: list[Any]) -> None:
    for value in written_values:
        assert yaml_text.dump(value) == yaml.safe_dump(value, sort_keys=False)


def test_libyaml_writes_nearly_every_object(written_values: list[Any]) -> None:
    """The speed is real: the Python emitter is left only the few values holding a scalar it folds
    differently (the ConfigMaps carrying a script or a dashboard)."""
    python_emitted = [v for v in written_values if yaml_text._needs_python_emitter(v)]
    assert len(python_emitted) <= max(3, len(written_values) // 10), [
        (v.get("kind"), v.get("metadata", {}).get("name")) for v in python_emitted if isinstance(v, dict)
    ]


# What the fallback exists for: libyaml folds a long double-quoted scalar at other points and writes a
# long key as a simple key. If libyaml ever writes these like PyYAML, the fallback can go.
@pytest.mark.parametrize("value", [
    {"data": {"script.py": "def f():\n    return 1\n" + "x = 'a long line of words' \n" * 6}},
    {"k": "tab\tseparated words " * 8},
    {"k" * 127: 1},  # libyaml: a simple key up to 128 characters; PyYAML: below 128, counted otherwise
])
def test_the_two_emitters_differ_where_the_fallback_says(value: dict[str, Any]) -> None:
    assert yaml.dump(value, Dumper=yaml.CSafeDumper, sort_keys=False) != yaml.safe_dump(value, sort_keys=False)
    assert yaml_text._needs_python_emitter(value)
    assert yaml_text.dump(value) == yaml.safe_dump(value, sort_keys=False)


_PIECES = ["a", "bb", "word", "longerword", " ", " ", "  ", "\n", "\n\n", "'", '"', ":", ": ", " #", "#", "-", "- ",
           "{", "}", "[", "]", ",", "\\", "%", "!", "&", "*", "?", "|", ">", "@", "`", "0", "1.5", "true", "~",
           "null", "yes", "=", "x" * 30, "\t", "é", "\u2028"]


def _text(rnd: random.Random, longest: int) -> str:
    return "".join(rnd.choice(_PIECES) for _ in range(rnd.randint(0, longest)))


def _value(rnd: random.Random, depth: int) -> Any:
    kind = rnd.random()
    if depth <= 0 or kind < 0.3:
        if rnd.random() < 0.1:
            return rnd.choice([0, 7, -3, 2.5, 1e20, None, True, False])
        return _text(rnd, rnd.choice([4, 30, 120]))
    if kind < 0.65:
        return {(_text(rnd, rnd.choice([8, 30, 160])) or "k"): _value(rnd, depth - 1) for _ in range(rnd.randint(0, 4))}
    return [_value(rnd, depth - 1) for _ in range(rnd.randint(0, 4))]


def test_generated_values_come_out_as_the_python_emitter_writes_them() -> None:
    rnd = random.Random(23)
    by_libyaml = 0
    for _ in range(3000):
        value = {"root": _value(rnd, rnd.randint(1, 6))}
        assert yaml_text.dump(value) == yaml.safe_dump(value, sort_keys=False), repr(value)
        by_libyaml += not yaml_text._needs_python_emitter(value)
    assert by_libyaml > 500  # the generated values exercise the libyaml path, not only the fallback
