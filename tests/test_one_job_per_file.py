"""One job per file (docs/architecture.md): no Python file of the project over ~450 lines, the
long functions the layout names split into named phases, and nothing outside tests/ importing
the tests (a benchmark that needs test data imports trainer.dataset_files, as the tests do)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import PROJECT_DIR

# The house style's "~450 lines": a few lines over is tolerated, a second job in the file is not.
MAX_LINES = 460
# Functions that are wiring: they call named phases and hold no inline resource code of their own.
WIRING = {
    ("stacks/addons.py", "deploy"): 40,
    ("components/lab/node_join.py", "NodeJoin.__init__"): 30,
    ("components/lab/node_join.py", "Membership.__init__"): 40,
}


def _project_files() -> list[Path]:
    skip = {".venv", "tests", ".git", "out", "node_modules"}
    return sorted(p for p in PROJECT_DIR.rglob("*.py")
                  if not skip & set(p.relative_to(PROJECT_DIR).parts) and not p.name.startswith("."))


def _rel(path: Path) -> str:
    return path.relative_to(PROJECT_DIR).as_posix()


def test_no_python_file_outside_tests_is_over_the_limit() -> None:
    files = _project_files()
    assert len(files) > 50  # the walk sees the project
    too_long = {_rel(p): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert too_long == {}


def test_nothing_outside_tests_imports_the_tests() -> None:
    offenders = []
    for path in _project_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{_rel(path)}: {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert offenders == []


def _function_lengths(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    tree = ast.parse(path.read_text())
    for node in tree.body:
        items = [(f"{node.name}.", n) for n in node.body] if isinstance(node, ast.ClassDef) else [("", node)]
        for prefix, item in items:
            if isinstance(item, ast.FunctionDef) and item.end_lineno is not None:
                out[prefix + item.name] = item.end_lineno - item.lineno + 1
    return out


def test_the_wiring_functions_call_named_phases() -> None:
    for (file, function), limit in WIRING.items():
        lengths = _function_lengths(PROJECT_DIR / file)
        assert function in lengths, f"{file}: {function} is gone; update WIRING"
        assert lengths[function] <= limit, f"{file}: {function} is {lengths[function]} lines (at most {limit})"
