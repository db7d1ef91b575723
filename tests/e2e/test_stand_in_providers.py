"""The stand-in providers (e2e/providers/) through the real Pulumi engine (the toolchain's CLI and
language host), as the engine finds them: `pulumi-resource-random` and `pulumi-resource-command` on
PATH, no plugin download, a local file backend and a passphrase. And the stand-ins held to the real
pulumi_random / pulumi_command Python SDKs: the same property names, the same secret outputs.

Secret values are read in the test only (`stack output --show-secrets`) and never printed."""

from __future__ import annotations

import base64
import inspect
import json
import os
import re
import select
import socket
import string
import subprocess
import sys
import threading
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pulumi_command.remote as sdk_remote
import pulumi_random as sdk_random
import pytest
from google.protobuf import empty_pb2  # type: ignore[import-untyped]
from pulumi import _types as sdk_types
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from components.toolchain_versions import PULUMI, PULUMI_LANGUAGE_PYTHON
from e2e.providers import command_provider, plugin, random_provider
from e2e.pulumi_stack import engine_env
from tests.toolchain import toolchain_binary

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt

REPO = Path(__file__).resolve().parents[2]
STAND_INS = REPO / "e2e" / "providers" / "bin"
TIMEOUT = 240  # seconds per pulumi command
STACK = "standin"

RANDOM_PROGRAM = '''import pulumi
import pulumi_random as random

length = pulumi.Config().get_int("length") or 24
pw = random.RandomPassword("pw", length=length, override_special="_-", min_upper=3, min_lower=3,
                           min_numeric=3, min_special=3)
plain = random.RandomPassword("plain", length=32, special=False)  # as components/monitoring makes one
key = random.RandomBytes("key", length=32)
pulumi.export("pw", pw.result)
pulumi.export("pw_hash", pw.bcrypt_hash)
pulumi.export("plain", plain.result)
pulumi.export("key_base64", key.base64)
pulumi.export("key_hex", key.hex)
'''

COMMAND_PROGRAM = '''import pulumi
from pulumi_command import remote

conn = remote.ConnectionArgs(host="127.0.0.1", port={port}, user="root",
                             private_key=pulumi.Output.secret("not-a-key"))
remote.Command("step", connection=conn, create="touch /tmp/stand-in-must-not-run", triggers=["a"])
'''


def pulumi_env(tmp_path: Path) -> dict[str, str]:
    """The environment the real engine runs with here (e2e/pulumi_stack.py: the toolchain CLI and
    host, the stand-ins and the venv's python first on PATH; nothing downloaded)."""
    toolchain_binary(PULUMI, "pulumi")
    toolchain_binary(PULUMI_LANGUAGE_PYTHON, "pulumi-language-python")
    return engine_env(tmp_path, "test-only-passphrase")


def run_pulumi(tmp_path: Path, *args: str, isolated: bool = True) -> subprocess.CompletedProcess[str]:
    command = ["pulumi", *args, "--non-interactive"] if args[0] not in ("stack", "config") else ["pulumi", *args]
    if isolated:  # a network namespace with only loopback: the engine, host and plugins talk gRPC over it
        command = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "pulumi", *command]
    return subprocess.run(command, cwd=tmp_path / "project", env=pulumi_env(tmp_path), capture_output=True,
                          text=True, timeout=TIMEOUT, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result


def new_project(tmp_path: Path, program: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: stand-in-providers\nruntime: python\n")
    (project / "__main__.py").write_text(program)


def outputs(tmp_path: Path) -> dict[str, Any]:
    shown = ok(run_pulumi(tmp_path, "stack", "output", "--json", "--show-secrets", "-s", STACK))
    return dict(json.loads(shown.stdout))


def resources(tmp_path: Path) -> list[dict[str, Any]]:
    exported = ok(run_pulumi(tmp_path, "stack", "export", "-s", STACK))
    return list(json.loads(exported.stdout)["deployment"].get("resources") or [])


def preview_steps(tmp_path: Path) -> tuple[dict[str, str], dict[str, int]]:
    """The random resources' steps in a preview that change something, and the counts of all."""
    preview = json.loads(ok(run_pulumi(tmp_path, "preview", "--json", "-s", STACK)).stdout)
    ops = {s["urn"].split("::")[-1]: s["op"] for s in preview.get("steps", [])
           if s["urn"].split("::")[2].startswith("random:index/")}
    return ops, preview["changeSummary"]


def assert_password(value: str, length: int, allowed: str, minima: dict[str, int]) -> None:
    assert len(value) == length
    assert set(value) <= set(allowed), f"characters outside the allowed set: {sorted(set(value) - set(allowed))}"
    for chars, least in minima.items():
        assert sum(c in chars for c in value) >= least, f"fewer than {least} of {chars!r}"


def assert_random_outputs(values: dict[str, Any], length: int) -> None:
    letters_digits = string.ascii_letters + string.digits
    assert_password(values["pw"], length, letters_digits + "_-", {string.ascii_uppercase: 3,
                    string.ascii_lowercase: 3, string.digits: 3, "_-": 3})
    assert crypt.crypt(values["pw"], values["pw_hash"]) == values["pw_hash"], "bcryptHash does not verify"
    assert_password(values["plain"], 32, letters_digits, {})
    raw = base64.b64decode(values["key_base64"], validate=True)
    assert len(raw) == 32 and raw.hex() == values["key_hex"]


def test_random_stand_in_creates_keeps_secret_replaces_and_destroys(tmp_path):
    new_project(tmp_path, RANDOM_PROGRAM)
    ok(run_pulumi(tmp_path, "stack", "init", STACK))
    up = ok(run_pulumi(tmp_path, "up", "--yes", "--skip-preview", "-s", STACK))
    assert "STAND-IN for pulumi-random" in up.stdout + up.stderr  # labelled where the user sees it
    first = outputs(tmp_path)
    assert_random_outputs(first, 24)

    state = resources(tmp_path)
    exported = json.dumps(state)
    for name in ("pw", "plain", "key_base64", "key_hex"):
        assert first[name] not in exported, f"{name} is in the state in plain text"
    made = {r["urn"].split("::")[-1]: r for r in state if r["type"].startswith("random:")}
    assert sorted(made) == ["key", "plain", "pw"]
    for name, secret_outputs in (("pw", ("result", "bcryptHash")), ("plain", ("result", "bcryptHash")),
                                 ("key", ("base64", "hex"))):
        assert made[name]["id"] == "none"
        for key in secret_outputs:
            stored = made[name]["outputs"][key]
            assert stored.get(plugin.SECRET_KEY) == plugin.SECRET_SIG and "ciphertext" in stored, (name, key)
    assert made["pw"]["outputs"]["length"] == 24 and made["pw"]["outputs"]["numeric"] is True

    ok(run_pulumi(tmp_path, "preview", "--expect-no-changes", "-s", STACK))

    ok(run_pulumi(tmp_path, "config", "set", "length", "30", "-s", STACK))
    assert preview_steps(tmp_path) == ({"pw": "replace"}, {"replace": 1, "same": 3})  # stack, plain, key
    ok(run_pulumi(tmp_path, "up", "--yes", "--skip-preview", "-s", STACK))
    second = outputs(tmp_path)
    assert_random_outputs(second, 30)
    assert second["pw"] != first["pw"]
    assert (second["plain"], second["key_hex"]) == (first["plain"], first["key_hex"])

    ok(run_pulumi(tmp_path, "destroy", "--yes", "--skip-preview", "-s", STACK))
    assert resources(tmp_path) == []


@pytest.mark.parametrize(("resource", "message"), [
    ('RandomPassword("short", length=4, min_upper=3, min_numeric=2)',
     "property length value {4} has a problem: must be at least minUpper + minLower + minNumeric + minSpecial = 5 "
     "(got 4)"),
    ('RandomBytes("empty", length=0)', "property length value {0} has a problem: must be a whole number, at least 1"),
], ids=["min-sum-over-length", "no-bytes"])
def test_random_stand_in_refuses_bad_inputs_at_check(tmp_path, resource, message):
    new_project(tmp_path, f"import pulumi_random as random\n\nrandom.{resource}\n")
    ok(run_pulumi(tmp_path, "stack", "init", STACK))
    preview = run_pulumi(tmp_path, "preview", "-s", STACK)
    assert preview.returncode != 0
    assert message in preview.stdout + preview.stderr, (preview.stdout + preview.stderr)[-3000:]


class ConnectionCounter:
    """A TCP listener on loopback that counts connections: where an SSH client would knock."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()


def test_command_stand_in_previews_and_refuses_to_run(tmp_path):
    listener = ConnectionCounter()
    try:
        new_project(tmp_path, COMMAND_PROGRAM.format(port=listener.port))
        ok(run_pulumi(tmp_path, "stack", "init", STACK, isolated=False))
        preview = ok(run_pulumi(tmp_path, "preview", "--json", "-s", STACK, isolated=False))
        steps = {s["urn"].split("::")[-1]: s["op"] for s in json.loads(preview.stdout)["steps"]}
        assert steps.get("step") == "create"
        up = run_pulumi(tmp_path, "up", "--yes", "--skip-preview", "-s", STACK, isolated=False)
        assert up.returncode != 0
        assert command_provider.REFUSAL.split(" (")[0] in up.stdout + up.stderr, (up.stdout + up.stderr)[-3000:]
        assert not any(r["type"] == command_provider.COMMAND for r in resources(tmp_path))
    finally:
        listener.stop()
    assert listener.connections == 0, "the stand-in opened a connection to the host"
    assert not Path("/tmp/stand-in-must-not-run").exists()


def sdk_inputs(args_class: type) -> set[str]:
    return set(sdk_types.input_type_py_to_pulumi_names(args_class).values())


def sdk_outputs(resource_class: type) -> set[str]:
    return set(sdk_types._py_to_pulumi_names_from_py_properties(resource_class).values())


def sdk_secret_outputs(resource_class: type) -> set[str]:
    source = inspect.getsource(resource_class._internal_init)  # type: ignore[attr-defined]
    found = re.search(r"additional_secret_outputs=\[([^\]]*)\]", source)
    assert found, f"{resource_class.__name__}: no additional_secret_outputs in the SDK"
    return set(re.findall(r'"([^"]+)"', found.group(1)))


@pytest.mark.parametrize(("kind", "args_class", "resource_class", "inputs"), [
    (random_provider.RandomPassword(), sdk_random.RandomPasswordArgs, sdk_random.RandomPassword,
     {"length": 16, "keepers": {"a": "b"}, "overrideSpecial": "_", "special": True}),
    (random_provider.RandomBytes(), sdk_random.RandomBytesArgs, sdk_random.RandomBytes,
     {"length": 16, "keepers": {"a": "b"}}),
], ids=["RandomPassword", "RandomBytes"])
def test_random_stand_in_has_the_sdk_property_names(kind, args_class, resource_class, inputs):
    assert set(kind.INPUTS) == sdk_inputs(args_class)
    checked = kind.check(inputs)
    assert not checked.failures and set(checked.inputs) == sdk_inputs(args_class) - ({"keepers", "overrideSpecial"}
                                                                                     - set(inputs))
    for preview in (True, False):
        _, state = kind.create(checked.inputs, preview)
        assert set(state) == sdk_outputs(resource_class)
        secret_outputs = {k for k, v in state.items() if plugin.is_secret(v)}
        assert secret_outputs == set(kind.SECRET_OUTPUTS) == sdk_secret_outputs(resource_class)


def test_command_stand_in_has_the_sdk_property_names():
    kind = command_provider.RemoteCommand()
    assert command_provider.SDK_VERSION == version("pulumi_command")
    assert set(kind.INPUTS) == sdk_inputs(sdk_remote.CommandArgs)
    assert set(command_provider.CONNECTION_KEYS) == sdk_inputs(sdk_remote.ConnectionArgs)
    assert set(command_provider.LOGGING) == {str(v.value) for v in sdk_remote.Logging}
    every_input = {"connection": {"host": "h"}, "create": "c", "update": "u", "delete": "d", "stdin": "s",
                   "logging": "none", "environment": {"A": "b"}, "triggers": ["t"], "addPreviousOutputInEnv": False}
    assert set(every_input) == set(kind.INPUTS)
    checked = kind.check(every_input)
    assert not checked.failures
    _, state = kind.create(checked.inputs, preview=True)
    assert set(state) == sdk_outputs(sdk_remote.Command)
    assert {k for k, v in state.items() if plugin.is_secret(v)} == sdk_secret_outputs(sdk_remote.Command)
    with pytest.raises(plugin.Refused, match="previews only and runs nothing"):
        kind.create(checked.inputs, preview=False)


def test_stand_in_diffs_follow_upstream_plan_modifiers():
    password, command = random_provider.RandomPassword(), command_provider.RemoteCommand()
    olds = password.check({"length": 16, "keepers": {"a": "1"}}).inputs

    def diff(kind: plugin.ResourceKind, old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
        response = plugin.diff_response(kind, old, new, ignored=())
        return list(response.diffs), list(response.replaces)

    assert diff(password, olds, olds) == ([], [])
    # RequiresReplaceUnlessEmptyStringToNull; RequiresReplaceIfValuesNotNull
    assert diff(password, {**olds, "overrideSpecial": ""}, olds) == ([], [])
    assert diff(password, olds, {**olds, "keepers": {"a": "1", "b": None}}) == ([], [])
    assert diff(password, olds, {**olds, "keepers": {"a": "2"}}) == (["keepers"], ["keepers"])
    assert diff(password, olds, {**olds, "length": plugin.UNKNOWN}) == (["length"], ["length"])
    assert diff(password, olds, {**olds, "length": plugin.secret(16)}) == ([], [])  # secretness alone is no change
    assert "numeric" in {f.property for f in password.check({"length": 8, "number": True, "numeric": False}).failures}
    assert password.check({"length": 8, "number": False}).inputs["numeric"] is False

    base = command.check({"connection": {"host": "h"}, "create": "a", "triggers": ["x"]}).inputs
    assert diff(command, base, {**base, "create": "b"}) == (["create"], [])
    assert diff(command, base, {**base, "triggers": ["y"]}) == (["triggers"], ["triggers"])
    assert {f.property for f in command.check({"connection": {"port": 22}}).failures} == {"connection.host"}


def test_stand_in_plugin_speaks_the_protocol_on_loopback():
    """Started as the engine starts it: the port on stdout, GetPluginInfo, an unknown type refused."""
    launcher = STAND_INS / "pulumi-resource-random"
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    proc = subprocess.Popen([str(launcher), "127.0.0.1:1"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the plugin printed no port within 60 s"
        port = int(proc.stdout.readline().strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            info = stub.GetPluginInfo(empty_pb2.Empty(), timeout=30)
            assert info.version == random_provider.SDK_VERSION == version("pulumi_random")
            with pytest.raises(grpc.RpcError) as refused:
                stub.Check(provider_pb2.CheckRequest(type="random:index/randomUuid:RandomUuid",
                                                     news=plugin.to_struct({})), timeout=30)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "implements only random:index/randomBytes:RandomBytes" in refused.value.details()
    finally:
        proc.kill()
        proc.wait(timeout=30)
