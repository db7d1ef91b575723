"""What `./plan`'s environment holds: the packages its requirement files name (following `-r`) and
everything they depend on, read from the installed packages' own metadata (Requires-Dist, with its
markers), the way pip resolves them."""

from __future__ import annotations

import importlib.metadata as metadata
import os
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name


def requirements(path: Path) -> list[Requirement]:
    """The requirements of one pip requirement file, with those of the files it includes (`-r`)."""
    found: list[Requirement] = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            found += requirements(path.parent / line.split(None, 1)[1])
        elif line.startswith("-"):
            raise ValueError(f"{path}: option {line!r} is not understood here")
        else:
            found.append(Requirement(line))
    return found


def closure(top: list[Requirement]) -> set[NormalizedName]:
    """Every distribution that installing `top` brings in, from the installed distributions'
    metadata (each must be installed: this test run's .venv holds the plan's packages and more)."""
    seen: set[tuple[NormalizedName, frozenset[str]]] = set()
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in top if r.marker is None or r.marker.evaluate()]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for text in metadata.distribution(name).requires or []:
            dep = Requirement(text)
            wanted = dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in extras | {""})
            if wanted:
                todo.append((canonicalize_name(dep.name), frozenset(dep.extras)))
    return {name for name, _ in seen}


def files_outside(plan: set[NormalizedName]) -> list[str]:
    """The real paths of every file that an installed distribution outside `plan` owns."""
    paths: list[str] = []
    for dist in metadata.distributions():
        if canonicalize_name(dist.metadata["Name"]) in plan:
            continue
        base = os.path.realpath(str(dist.locate_file("")))
        paths += [os.path.normpath(os.path.join(base, str(f))) for f in dist.files or []]
    return paths
