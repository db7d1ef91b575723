"""Put on PYTHONPATH by tests/test_plan_environment.py: this Python (and any Python it starts) runs
as if the packages outside `./plan`'s environment were not installed. An import of a module whose
file belongs to one of them fails as it would there (ModuleNotFoundError) and is logged.

$OUTSIDE_THE_PLAN names a JSON list of those files' real paths, $OUTSIDE_THE_PLAN_LOG the log."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Sequence
from types import ModuleType


class _OutsideThePlan(importlib.abc.MetaPathFinder):
    def __init__(self, files: set[str], log: str) -> None:
        self.files, self.log = files, log

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        # A namespace package (no origin) owns no file of its own; its modules are checked one by one.
        if spec.origin and os.path.realpath(spec.origin) in self.files:
            with open(self.log, "a") as log:
                log.write(f"{name} {spec.origin}\n")
            raise ModuleNotFoundError(f"No module named {name!r} (not in ./plan's environment)", name=name)
        return spec


if os.environ.get("OUTSIDE_THE_PLAN"):
    with open(os.environ["OUTSIDE_THE_PLAN"]) as listing:
        sys.meta_path.insert(0, _OutsideThePlan(set(json.load(listing)), os.environ["OUTSIDE_THE_PLAN_LOG"]))
