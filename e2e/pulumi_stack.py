"""The Pulumi engine for real: the toolchain's CLI, language host and providers run this program
(the project folder's Pulumi.yaml and __main__.py) against the e2e control plane.

A Workspace is one stack in a folder of its own: a copy of Pulumi.yaml whose `main` is the checkout
(the engine writes the stack's config file, with its secrets' salt, beside the project file it
runs, so nothing is written into the checkout), a local file backend, passphrase secrets and a
PULUMI_HOME with no plugins in it. Every plugin the engine starts is found on PATH ("ambient"):
the toolchain's pulumi-language-python and pulumi-resource-kubernetes, and the stand-ins for
pulumi-random and pulumi-command (e2e/providers: the proxy serves no version of either). With
PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION nothing is ever downloaded.

The toolchain's language host (v3.68.0, a stand-in: docs/toolchain.md) does not read Pulumi.yaml's
`virtualenv` option the way the pinned SDK's host does; it runs `python3` from PATH, so the
project's virtualenv comes first there.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.toolchain_versions import PULUMI, PULUMI_KUBERNETES, PULUMI_LANGUAGE_PYTHON, binary_path

PROJECT_DIR = Path(__file__).resolve().parent.parent
STAND_IN_PROVIDERS = Path(__file__).resolve().parent / "providers" / "bin"
PROJECT = "gpu-cluster"
COMMAND_TIMEOUT = 900  # one up or destroy of the whole dev stack, every await included


@dataclass
class Result:
    argv: list[str]
    returncode: int
    seconds: float
    stdout: str
    stderr: str
    json: dict[str, Any] = field(default_factory=dict)  # what --json printed, where it was asked for

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 60) -> str:
        text = (self.stdout + "\n" + self.stderr).strip().splitlines()
        return "\n".join(text[-lines:])


class PulumiFailed(RuntimeError):
    def __init__(self, result: Result):
        super().__init__(f"`{' '.join(result.argv[1:4])} ...` exited {result.returncode} after "
                         f"{result.seconds:.0f} s:\n{result.tail()}")
        self.result = result


def qualified(key: str) -> str:
    """A config key as the stack file names it: the program's own under its project, another
    package's (gcp:project) as given."""
    return key if ":" in key else f"{PROJECT}:{key}"


def search_path() -> str:
    """The virtualenv's python first (the language host runs python3), then every plugin the engine needs."""
    folders = [Path(sys.executable).parent, binary_path(PULUMI, "pulumi").parent,
               binary_path(PULUMI_LANGUAGE_PYTHON, "pulumi-language-python").parent,
               binary_path(PULUMI_KUBERNETES, "pulumi-resource-kubernetes").parent, STAND_IN_PROVIDERS]
    return os.pathsep.join([*map(str, folders), os.environ.get("PATH", "/usr/bin:/bin")])


def engine_env(folder: Path, passphrase: str) -> dict[str, str]:
    """The environment the real engine runs with here, everything of it under `folder`: the plugins
    on PATH (search_path), its home and a local file backend there, nothing ever downloaded."""
    (folder / "state").mkdir(parents=True, exist_ok=True)
    keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR", "GPU_CLUSTER_UPSTREAM")}
    return {
        "LANG": "C.UTF-8",
        **keep,
        "PATH": search_path(),
        "HOME": str(folder),
        "PULUMI_HOME": str(folder / "home"),
        "PULUMI_BACKEND_URL": f"file://{folder / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": passphrase,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
    }


class Workspace:
    def __init__(self, folder: Path, stack: str, config: dict[str, Any]):
        self.folder = folder
        self.stack = stack
        self.config_file = folder / f"Pulumi.{stack}.yaml"
        folder.mkdir(parents=True, exist_ok=True)
        project = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())
        (folder / "Pulumi.yaml").write_text(yaml.safe_dump({**project, "main": str(PROJECT_DIR)}, sort_keys=False))
        # A passphrase of this run only: the state and the config file's secrets are useless without it.
        self._passphrase = secrets.token_urlsafe(24)
        self.config_file.write_text(yaml.safe_dump({"config": {qualified(k): v for k, v in config.items()}},
                                                   sort_keys=False))

    def env(self) -> dict[str, str]:
        # No ambient cluster: the program reaches the control plane through the stack's kubeconfig only.
        return {**engine_env(self.folder, self._passphrase), "KUBECONFIG": str(self.folder / "no-ambient-kubeconfig")}

    def run(self, *args: str, stdin: str | None = None, timeout: float = COMMAND_TIMEOUT,
            with_stack: bool = True) -> Result:
        argv = [str(binary_path(PULUMI, "pulumi")), *args, "--non-interactive"]
        if with_stack:
            argv += ["--stack", self.stack]
        began = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=self.folder, env=self.env(), input=stdin, capture_output=True,
                                  text=True, timeout=timeout, check=False)
            code, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as expired:
            code = 124
            out = (expired.stdout or b"").decode(errors="replace") if isinstance(expired.stdout, bytes) else expired.stdout or ""
            err = f"timed out after {timeout} s"
        return Result(argv, code, round(time.monotonic() - began, 1), out, err)

    def must(self, *args: str, **kwargs: Any) -> Result:
        result = self.run(*args, **kwargs)
        if not result.ok:
            raise PulumiFailed(result)
        return result

    # --- the stack's life ---

    def init(self, secret_config: dict[str, str]) -> None:
        self.must("stack", "init", self.stack, with_stack=False)
        for key, value in secret_config.items():
            # From stdin: a secret never appears in a process's arguments.
            self.must("config", "set", "--secret", f"{PROJECT}:{key}", stdin=value)

    def config_keys(self) -> list[str]:
        """The plain (not secret) keys of the stack's config, without the project prefix."""
        doc = yaml.safe_load(self.config_file.read_text())["config"]
        return [k.removeprefix(f"{PROJECT}:") for k, v in doc.items() if not (isinstance(v, dict) and "secure" in v)]

    def config(self, key: str) -> Any:
        return yaml.safe_load(self.config_file.read_text())["config"][f"{PROJECT}:{key}"]

    def set_config(self, key: str, value: Any) -> None:
        doc = yaml.safe_load(self.config_file.read_text())
        doc["config"][f"{PROJECT}:{key}"] = value
        self.config_file.write_text(yaml.safe_dump(doc, sort_keys=False))

    def up(self) -> Result:
        return self.must("up", "--yes", "--skip-preview", "--diff")

    def preview_steps(self, *extra: str) -> tuple[Result, list[dict[str, Any]]]:
        """`pulumi preview --json`: the result (its `json`, diagnostics included) and its steps
        (each with `op` and `urn`)."""
        result = self.run("preview", "--json", *extra)
        try:
            result.json = json.loads(result.stdout)
        except json.JSONDecodeError:
            raise PulumiFailed(result) from None
        return result, result.json.get("steps", [])

    def destroy(self) -> Result:
        return self.must("destroy", "--yes", "--skip-preview")

    def resources(self) -> list[dict[str, Any]]:
        """The stack's state (`pulumi stack export`): every resource, secrets still encrypted."""
        exported = json.loads(self.must("stack", "export").stdout)
        return exported.get("deployment", {}).get("resources") or []


def changed(steps: list[dict[str, Any]]) -> dict[str, str]:
    """urn -> op of every step that is not `same` (a read counts as no change)."""
    return {s["urn"]: s["op"] for s in steps if s.get("op") not in ("same", "read")}


def resource_key(urn: str) -> str:
    """A resource as `type::name`, without its stack, project and parents: the real engine's URNs
    name every ancestor's type, the SDK's mocks (the offline plan) only the parent's."""
    types, name = urn.split("::", 2)[-1].rsplit("::", 1)
    return f"{types.rsplit('$', 1)[-1]}::{name}"
