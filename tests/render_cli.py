"""`python -m render` as a user runs it, on a stack file of the test's own: a project folder that
links this project's files in (render reads the stack files of the project it is run from) and holds
Pulumi.<stack>.yaml, the committed one with `overrides` applied (or, with render_text, any text)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import PROJECT_DIR


def render_cli(tmp_path: Path, stack: str, overrides: dict[str, Any], secrets: tuple[str, ...] = (),
               upstream: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The committed Pulumi.<stack>.yaml with each `gpu-cluster:<key>` of `overrides` replaced and
    `secrets` given as `secure:` values, rendered into tmp_path/out: with the whole-cluster check over
    `upstream` when given, else `--no-check`."""
    stack_file = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())
    for key, value in overrides.items():
        stack_file["config"][f"gpu-cluster:{key}"] = value
    for key in secrets:
        stack_file["config"][f"gpu-cluster:{key}"] = {"secure": "v1:EXAMPLE"}
    return render_text(tmp_path, stack, yaml.safe_dump(stack_file).encode(), upstream)


def render_text(tmp_path: Path, stack: str, text: bytes, upstream: Path | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """render of a project whose Pulumi.<stack>.yaml holds exactly `text` (bytes: it may be no UTF-8)."""
    project = tmp_path / "project"
    if not project.exists():
        project.mkdir()
        for entry in PROJECT_DIR.iterdir():
            if not entry.name.startswith(("Pulumi.", ".")) or entry.name == "Pulumi.yaml":
                os.symlink(entry, project / entry.name)
    (project / f"Pulumi.{stack}.yaml").write_bytes(text)
    env = {k: v for k, v in os.environ.items() if k != "PULUMI_CONFIG"}
    check = ["--no-check"]
    if upstream is not None:
        env["GPU_CLUSTER_UPSTREAM"], check = str(upstream), []
    return subprocess.run([sys.executable, "-m", "render", stack, *check, "--out", str(tmp_path / "out")],
                          cwd=project, env=env, capture_output=True, text=True, timeout=timeout, check=False)
