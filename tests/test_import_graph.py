"""The import graph of the whole tree (docs/architecture.md "Which way the imports point"), read
from every module's own imports with ast: at module level, under TYPE_CHECKING and inside functions.

* no import circle anywhere: production code, bench/, e2e/ and tests/ alike (a circle in the tests
  is as fragile as one in the program: which module loads first decides what breaks);
* no function-local import of a project module, outside bench/ and tests/ (LOCAL_NOT_JUDGED says
  why): such an import is how a circle gets dodged, and it hides the dependency from the reader (a
  heavy third-party library loaded late stays fine);
* render/ imports nothing of stacks/ (the check reads the plan, not the wiring);
* the floors: each floor imports only from the floors below it, with one exception: config/ may
  read components/versions.py (the pinned versions are its defaults) and nothing else of components/.

How an import counts: `import a.b` is an edge to `a.b`; `from a import b` an edge to `a` and, when
`a.b` is a module, to `a.b` too (it reads the package `a`'s namespace first). That Python runs
`a/__init__.py` before `a.b` is loading order, not a dependency `a.b` names: not an edge. The
training image's code imports itself from workloads/ (`trainer.args`): those names count too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import PROJECT_DIR

# Folders that hold no project module: the environment, build outputs, git's own.
NOT_SOURCE = {".venv", ".git", ".ci", "out", "site", "node_modules", "__pycache__"}
# docs/architecture.md's floors, lowest first; tests/ stands beside them (it may import any floor).
FLOORS = {"config": 1, "workloads": 1, "components": 2, "stacks": 3, "__main__": 4, "render": 4,
          "bench": 5, "e2e": 5}
# Folders that are import roots of their own: the training image puts workloads/ on its path, so its
# code (and the tests and benchmarks of it) import `trainer.args`, meaning workloads/trainer/args.py.
PATH_ROOTS = ("workloads",)
# The one import allowed to point up a floor: config/ reads the pinned versions (its defaults).
UPWARD_ALLOWED = {("config", "components.versions")}
# Function-local imports of project modules allowed, each with its reason. None today.
LOCAL_ALLOWED: dict[tuple[str, str], str] = {}
# Folders whose function-local imports are not judged: no circle runs through them (the first test
# holds that), and nothing of the program imports them. bench/ imports the program inside functions
# on purpose: the import's cost is part of what a benchmark times or keeps out of its clock
# (bench/plan_scale.py _warm_imports), and a missing optional module is a result (bench/plan_graph.py).
# A test imports inside a test to build what that test alone needs.
LOCAL_NOT_JUDGED = {"bench", "tests"}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    in_function: bool
    via_package: bool = False  # the edge to `a` of `from a import b` where `a.b` is a module


def modules(root: Path) -> dict[str, Path]:
    """Every module under `root` by its dotted name (`a/b/__init__.py` is `a.b`)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in NOT_SOURCE or part.startswith(".") for part in rel.parts[:-1]):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts:
            found[".".join(parts)] = path
    return found


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def import_names(found: dict[str, Path]) -> dict[str, str]:
    """Each name a module is imported by -> its dotted name: its own, and under a PATH_ROOTS folder
    its name from there too (`trainer.args` for workloads.trainer.args)."""
    names = {m: m for m in found}
    for m in found:
        root, _, rest = m.partition(".")
        if root in PATH_ROOTS and rest:
            names[rest] = m
    return names


def _resolve(name: str, known: dict[str, str]) -> str | None:
    """The deepest project module `name` names (`a.b.c` may be a module or an attribute of `a.b`)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return known[".".join(parts[:end])]
    return None


def _targets(node: ast.Import | ast.ImportFrom, module: str, path: Path,
             known: dict[str, str]) -> list[tuple[str, bool]]:
    """(module imported, whether only as the package of a submodule imported beside it)."""
    if isinstance(node, ast.Import):
        return [(m, False) for a in node.names if (m := _resolve(a.name, known))]
    base = node.module or ""
    if node.level:  # relative: from the importer's package, up level - 1 packages
        package = _package(module, path).split(".")
        anchor = package[: len(package) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    submodules = [known[f"{base}.{a.name}"] for a in node.names if f"{base}.{a.name}" in known]
    only_submodules = len(submodules) == len(node.names)
    return [(m, only_submodules) for m in [_resolve(base, known)] if m] + [(m, False) for m in submodules]


def _function_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes that sit inside a function body (they run when it is called)."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            inside |= {id(n) for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)}
    return inside


def imports(root: Path) -> list[Import]:
    """Every import of a project module by a project module under `root`, wherever it stands."""
    known = modules(root)
    names = import_names(known)
    out: list[Import] = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        local = _function_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target, via_package in _targets(node, module, path, names):
                    if target != module:
                        out.append(Import(module, target, node.lineno, id(node) in local, via_package))
    return out


def circles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            pushed = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    pushed = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if pushed:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _top(module: str) -> str:
    return module.split(".")[0]


def _where(i: Import) -> str:
    return f"{i.importer}:{i.line} -> {i.imported}"


def local_imports(found: list[Import]) -> list[str]:
    return [_where(i) for i in found if i.in_function and _top(i.importer) not in LOCAL_NOT_JUDGED
            and (i.importer, i.imported) not in LOCAL_ALLOWED]


def upward_imports(found: list[Import]) -> list[str]:
    """Imports from a floor to a higher one, but the allowed one (tests/ stand on no floor).
    `from components import versions` is judged by what it names, components.versions."""
    return [_where(i) for i in found
            if not i.via_package and _top(i.importer) in FLOORS and FLOORS[_top(i.imported)] > FLOORS[_top(i.importer)]
            and (_top(i.importer), i.imported) not in UPWARD_ALLOWED]


# The tree, read once for the tests below.
TREE = imports(PROJECT_DIR)


def test_no_import_circle_anywhere_in_the_tree() -> None:
    found = circles((i.importer, i.imported) for i in TREE)
    assert found == [], "import circles (each a strongly connected set of modules):\n" + "\n".join(
        ", ".join(c) for c in found)


def test_no_function_local_import_of_a_project_module() -> None:
    found = local_imports(TREE)
    assert found == [], ("imports of project modules inside functions (import at module level; if that "
                         "makes a circle, move the shared piece into a module of its own):\n" + "\n".join(found))


def render_reads_stacks(found: list[Import]) -> list[str]:
    return [_where(i) for i in found if _top(i.importer) == "render" and _top(i.imported) == "stacks"]


def test_render_imports_nothing_of_the_stacks() -> None:
    found = render_reads_stacks(TREE)
    assert found == [], "render/ imports the wiring:\n" + "\n".join(found)


def test_imports_point_down_the_floors_but_config_reading_the_versions() -> None:
    found = upward_imports(TREE)
    assert found == [], "imports pointing up a floor (docs/architecture.md):\n" + "\n".join(found)


def test_every_top_level_folder_of_python_stands_on_a_floor_or_is_the_tests() -> None:
    """A new top-level folder would otherwise escape the floors' check without a word."""
    tops = {_top(m) for m in modules(PROJECT_DIR)}
    assert tops - set(FLOORS) - {"tests"} == set()


def test_the_graph_sees_the_real_imports() -> None:
    """The tree's known imports are found, of every kind the checks above rely on."""
    edges = {(i.importer, i.imported, i.in_function) for i in TREE}
    assert ("stacks.lab", "config", False) in edges  # from config import LabStack
    assert ("render.cluster.kueue_check", "render.cluster.report", False) in edges  # under TYPE_CHECKING
    assert ("bench.plan_scale", "render.program", True) in edges  # inside child(), timed on purpose
    assert ("tests.test_import_graph", "tests.conftest", False) in edges
    assert ("workloads.trainer.train", "workloads.trainer.args", False) in edges  # the image's own root
    assert len(TREE) > 1000


def _plant(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_a_planted_circle_and_its_dodges_are_found(tmp_path: Path) -> None:
    """A package whose __init__ re-exports a submodule that imports the package back: a circle;
    the same through a relative import, under TYPE_CHECKING, and a function-local dodge."""
    _plant(tmp_path, {
        "components/__init__.py": "",
        "components/versions.py": "",
        "components/pool/__init__.py": "from components.pool.member import Member\n",
        "components/pool/member.py": "from components.pool import SHARED\nclass Member: ...\n",
        "components/rel/__init__.py": "from .a import A\n",
        "components/rel/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\nA = 1\n",
        "components/rel/b.py": "import components.rel.a\n",
        "components/late.py": "def f():\n    from components import versions\n    return versions\n",
        "config/__init__.py": "from components import versions\nfrom components.late import f\n",
        "render/__init__.py": "",
        "render/plan.py": "from stacks.lab import wiring\n",
        "stacks/__init__.py": "",
        "stacks/lab.py": "import config\nwiring = 1\n",
    })
    found = imports(tmp_path)
    assert circles((i.importer, i.imported) for i in found) == [
        ["components.pool", "components.pool.member"], ["components.rel", "components.rel.a", "components.rel.b"]]
    assert local_imports(found) == ["components.late:2 -> components", "components.late:2 -> components.versions"]
    assert upward_imports(found) == ["config:2 -> components.late"]  # components.versions: allowed
    assert render_reads_stacks(found) == ["render.plan:1 -> stacks.lab"]


def test_circles_finds_each_component_once_and_no_acyclic_one() -> None:
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("f", "a")]
    assert circles(edges) == [["a", "b", "c"], ["d", "e"]]
    assert circles([("a", "b"), ("b", "c"), ("a", "c")]) == []
