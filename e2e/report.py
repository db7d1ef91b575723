"""out/e2e/report.json, written by `make e2e` (python -m e2e): the toolchain each component came
from, how the control plane came up, and each e2e test's outcome, as pytest saw it.

The session fixture (tests/e2e/conftest.py) puts the control plane's facts in the pytest config's
stash under CONTROL_PLANE; the Recorder plugin collects the outcomes. Later items of issue 31 add
their own keys (up, previews...) where they run; none is written here before it is measured.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from components.toolchain_versions import COMPONENTS, binary_path

CONTROL_PLANE = pytest.StashKey[dict[str, Any]]()
# The dev stack's `pulumi up` with the real engine (tests/e2e/test_dev_stack_up.py), per variant:
# up, the second preview, the update, destroy, each key written by the step that measured it.
UP = pytest.StashKey[dict[str, dict[str, Any]]]()
# `pulumi preview` of the lab and gke stacks with the real engine (tests/e2e/test_stack_previews.py):
# stack -> its figures, or why it cannot run here.
PREVIEWS = pytest.StashKey[dict[str, Any]]()
# `kubeadm config validate` of each lab kubeadm config (tests/e2e/test_kubeadm_report.py): "ok" or what it said.
KUBEADM = pytest.StashKey[dict[str, Any]]()


def pulumi_facts(by_variant: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The report's keys for the real engine's runs: totals over the variants (what must be 0 is
    summed), and each variant's own figures. A step that did not run leaves its key out."""
    if not by_variant:
        return {}
    out: dict[str, Any] = {"variants": by_variant}
    ups = [v["up"] for v in by_variant.values() if "up" in v]
    if ups:
        out["up"] = {"created": sum(u["created"] for u in ups), "seconds": round(sum(u["seconds"] for u in ups), 1)}
    previews = [v["second_preview_changes"] for v in by_variant.values() if "second_preview_changes" in v]
    if previews:
        out["second_preview_changes"] = sum(previews)
    updates = {name: v["update_changed"] for name, v in by_variant.items() if "update_changed" in v}
    if updates:
        out["update_changed"] = updates
    destroys = [v["destroy"] for v in by_variant.values() if "destroy" in v]
    if destroys:
        out["destroy_left"] = sum(len(d["left"]) for d in destroys)
    return out


def toolchain() -> dict[str, Any]:
    return {c.name: {"version": c.version, "module": c.module, "module_version": c.module_version,
                     "built": all(binary_path(c, b).is_file() for b in c.binaries)} for c in COMPONENTS}


class Recorder:
    """A pytest plugin: every test's outcome (its call, or the setup or teardown that failed)."""

    def __init__(self) -> None:
        self.checks: dict[str, str] = {}
        self.config: pytest.Config | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = report.nodeid.split("/")[-1]
        if report.when == "call" or report.outcome != "passed":
            outcome = report.outcome if report.when == "call" else f"{report.outcome} in {report.when}"
            if self.checks.get(name, "passed") == "passed":
                self.checks[name] = outcome

    def stashed(self, key: pytest.StashKey[dict[str, Any]]) -> dict[str, Any]:
        return self.config.stash.get(key, {}) if self.config is not None else {}


def run(tests: str, out: Path, pytest_args: list[str]) -> int:
    began = time.monotonic()
    recorder = Recorder()
    status = int(pytest.main(["-q", "-p", "no:cacheprovider", *pytest_args, tests], plugins=[recorder]))
    report = {
        "toolchain": toolchain(),
        "control_plane": recorder.stashed(CONTROL_PLANE),
        **pulumi_facts(recorder.stashed(UP)),
        **({"previews": recorder.stashed(PREVIEWS)} if recorder.stashed(PREVIEWS) else {}),
        **({"kubeadm_validate": recorder.stashed(KUBEADM)} if recorder.stashed(KUBEADM) else {}),
        "checks": recorder.checks,
        # a skipped check proved nothing: the report passes only when every check ran and passed
        "passed": status == 0 and all(v == "passed" for v in recorder.checks.values()),
        "seconds": round(time.monotonic() - began, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"e2e: {out} ({sum(v == 'passed' for v in recorder.checks.values())} of {len(recorder.checks)} "
          f"checks passed, {report['seconds']} s)")
    if status == 0 and not report["passed"]:
        print("e2e: not every check ran (see the skips above): the e2e tier did not pass")
        return 1
    return status
