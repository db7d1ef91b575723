"""The Pulumi engine from the toolchain runs a Python program: the CLI (v3.274.0) with the language
host stand-in (v3.68.0, found on PATH, no plugin download) and this venv's SDK, a local file backend
and a passphrase, in a network namespace with only loopback. `up` creates the stack and its output,
`destroy` leaves nothing. What the `pulumi up` tier of the program builds on (docs/toolchain.md).

The host predates the CLI's way of passing runtime options: it does not see Pulumi.yaml's
`virtualenv`, and runs the `python` it finds on PATH, so the venv's bin comes first on PATH."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from components.toolchain_versions import PULUMI, PULUMI_LANGUAGE_PYTHON
from e2e.pulumi_stack import engine_env
from tests.toolchain import toolchain_binary

TIMEOUT = 180  # seconds per pulumi command

PROGRAM = 'import pulumi\n\npulumi.export("answer", 42)\n'


def _pulumi(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    toolchain_binary(PULUMI, "pulumi")
    toolchain_binary(PULUMI_LANGUAGE_PYTHON, "pulumi-language-python")
    env = engine_env(tmp_path, "test-only-passphrase")  # e2e/pulumi_stack.py: the toolchain on PATH
    # A network namespace of its own: loopback (engine <-> host gRPC) and nothing else.
    command = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "pulumi", "pulumi", *args]
    return subprocess.run(command, cwd=tmp_path / "project", env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def test_toolchain_pulumi_runs_a_python_program_up_and_destroy(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "state").mkdir()
    (project / "Pulumi.yaml").write_text("name: toolchain-smoke\nruntime: python\n")
    (project / "__main__.py").write_text(PROGRAM)

    for args in (("stack", "init", "smoke"), ("up", "--yes", "--skip-preview", "-s", "smoke")):
        result = _pulumi(tmp_path, *args)
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    outputs = _pulumi(tmp_path, "stack", "output", "--json", "-s", "smoke")
    assert json.loads(outputs.stdout) == {"answer": 42}

    destroyed = _pulumi(tmp_path, "destroy", "--yes", "-s", "smoke")
    assert destroyed.returncode == 0, (destroyed.stdout + destroyed.stderr)[-3000:]
    exported = _pulumi(tmp_path, "stack", "export", "-s", "smoke")
    assert json.loads(exported.stdout)["deployment"].get("resources") in (None, [])
