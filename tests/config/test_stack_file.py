"""The stack-file reader (config/stack_file.py) as a user meets it: `python -m render` on a stack
file of the test's own. Each bad file exits 2 naming the file, the line and what is wrong, with no
traceback; an alias bomb is refused before anything expands it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from config import stack_file
from render import program
from tests.conftest import PROJECT_DIR
from tests.render_cli import render_text

GOOD = b"config:\n  gpu-cluster:platform: dev\n"
# "Billion laughs": nine levels of nine aliases, 1.3 KB of text; 9^9 strings once expanded.
LEVELS = "abcdefghi"
BOMB = ("config:\n  gpu-cluster:platform: dev\n  gpu-cluster:lol:\n    a: &a [" + ", ".join(['"lol"'] * 9) + "]\n"
        + "".join(f"    {n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]\n" for p, n in zip(LEVELS, LEVELS[1:], strict=False))).encode()

BAD_FILES = {
    "tab": (GOOD + b"\tgpu-cluster:kubeContext: minikube\n", 3, "a tab in the indentation"),
    "not UTF-8": (GOOD + b"  gpu-cluster:kubeContext: caf\xe9\n", 3, "the byte 0xe9 is not UTF-8"),
    "python tag": (GOOD + b"  gpu-cluster:kubeContext: !!python/object/apply:os.system ['touch /tmp/pwned']\n", 3,
                   "the tag !!python/object/apply:os.system is not allowed"),
    "duplicate key": (GOOD + b"  gpu-cluster:platform: lab\n", 3, "'gpu-cluster:platform' is given twice"),
    "file a list": (b"- config\n", 1, "the file must be a mapping"),
    "file a scalar": (b"gpu-cluster:platform dev\n", 1, "the file must be a mapping"),
    "config a list": (b"config:\n  - gpu-cluster:platform: dev\n", 2, "`config:` must be a mapping"),
    "config a scalar": (b"config: dev\n", 1, "`config:` must be a mapping"),
    "config key a number": (GOOD + b"  1: one\n", 3, "the key '1' under `config:` must be text"),
    "alias loop": (b"config: &x\n  gpu-cluster:platform: dev\n  gpu-cluster:y: *x\n", 3, "inside its own anchor"),
    "control character": (GOOD + b"  gpu-cluster:kubeContext: a\x01b\n", 3, "is not allowed in YAML"),
    "two documents": (GOOD + b"---\nconfig: {}\n", 3, "a second YAML document"),
    "broken flow": (GOOD + b"  gpu-cluster:kubeContext: [unclosed\n", 4, "not valid YAML"),
    "deep nesting": (GOOD + b"  gpu-cluster:x: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", 3, "nested more than"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_bad_stack_file_exits_2_naming_file_line_and_problem(tmp_path: Path, name: str) -> None:
    text, line, what = BAD_FILES[name]
    result = render_text(tmp_path, "dev", text, timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert f"Pulumi.dev.yaml, line {line}: " in result.stderr, result.stderr[-2000:]
    assert what in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    assert len(BOMB) < 2000
    started = time.monotonic()
    result = render_text(tmp_path, "dev", BOMB, timeout=60)  # today: out of memory after minutes
    assert time.monotonic() - started < 10
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "alias bomb" in result.stderr and "Pulumi.dev.yaml, line " in result.stderr


@pytest.mark.parametrize(("text", "what"), [(BOMB, "alias bomb"), (BAD_FILES["not UTF-8"][0], "line 3: the byte 0xe9")],
                         ids=["bomb", "not UTF-8"])
def test_an_older_stack_file_goes_through_the_same_reader(tmp_path: Path, text: bytes, what: str) -> None:
    older = tmp_path / "Pulumi.dev.old.yaml"
    older.write_bytes(text)
    result = render_text(tmp_path, "dev", (PROJECT_DIR / "Pulumi.dev.yaml").read_bytes(), timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    project = tmp_path / "project"
    again = subprocess.run([sys.executable, "-m", "render", "dev", "--no-check", "--against", str(older),
                            "--out", str(tmp_path / "out")], cwd=project, capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert "the older config" in again.stderr and what in again.stderr


def test_anchors_within_the_budget_and_dates_read_as_pulumi_reads_them(tmp_path: Path) -> None:
    """Anchors are YAML: a modest use is read (expanded) as written; a date-like value stays the text
    Pulumi hands the program (yaml.v3 gives an untyped timestamp as its string)."""
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("config:\n  gpu-cluster:a: &labels {team: a, tier: gold}\n  gpu-cluster:b: [*labels, *labels]\n"
                    "  gpu-cluster:when: 2024-01-01\n")
    values = stack_file.read(path)["config"]
    assert values["gpu-cluster:b"] == [{"team": "a", "tier": "gold"}] * 2
    assert values["gpu-cluster:when"] == "2024-01-01"


@pytest.mark.parametrize("name", ["Pulumi.yaml", *sorted(p.name for p in PROJECT_DIR.glob("Pulumi.*.yaml"))])
def test_the_committed_files_read_as_plain_yaml_reads_them(name: str) -> None:
    """The reader refuses nothing the committed files hold and reads them value for value."""
    path = PROJECT_DIR / name
    assert stack_file.read(path) == yaml.safe_load(path.read_text())


def test_stack_config_reads_a_good_file_through_the_reader(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.yaml").symlink_to(PROJECT_DIR / "Pulumi.yaml")
    (tmp_path / "Pulumi.dev.yaml").write_text("config:\n  gpu-cluster:platform: dev\n  gpu-cluster:x: &n 3\n"
                                              "  gpu-cluster:y: *n\n")
    values, _ = program.stack_config("dev", tmp_path)
    assert json.loads(values["gpu-cluster:y"]) == 3
