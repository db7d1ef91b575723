"""Evaluate the real gpu-cluster program under the Pulumi SDK's mocks and record what it registers.

This is what `python -m render`, the stack smoke tests and the benchmarks share: the stack file is
read as `pulumi up` would read it (project defaults from Pulumi.yaml, then the stack's values;
`secure:` values replaced by a marker, never decrypted), `__main__.py` runs under a recording mock
monitor, and every registration is kept with its parent, dependencies and inputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import rpc
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.settings import get_root_resource, set_root_resource

from config import stack_file as stack_file_reader
from config.lab import READ_STACK_OUTPUTS

# The project is the directory holding this package as imported (symlinks not resolved), so a
# project dir that links render/ in (python -m render from that dir) reads its own stack files.
PROJECT_DIR = Path(os.path.abspath(__file__)).parent.parent
PROJECT = "gpu-cluster"
SECRET_MARKER = "[secret]"
# The signature the SDK uses to tag a secret value in serialized properties.
_SECRET_SIG = rpc._special_sig_key  # pylint: disable=protected-access
_SECRET_VALUE = rpc._special_secret_sig  # pylint: disable=protected-access

# Mocked outputs of resources whose outputs feed other resources.
_FAKE_KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"
# gcp resources' computed outputs the gke stack reads (documentation addresses, a fake CA).
_FAKE_GCP_OUTPUTS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "gcp:container/cluster:Cluster": lambda o: {
        "endpoint": "203.0.113.10",
        "masterAuth": {**(o.get("masterAuth") or {}), "clusterCaCertificate": "RkFLRS1DQQ=="},
    },
    "gcp:filestore/instance:Instance": lambda o: {
        "networks": [{**n, "ipAddresses": ["10.0.0.2"]} for n in (o.get("networks") or [{}])],
    },
    "gcp:serviceaccount/account:Account": lambda o: {
        "email": f"{o.get('accountId')}@{o.get('project')}.iam.gserviceaccount.com",
    },
}


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    dependencies: list[str]
    provider: str
    inputs: dict[str, Any]  # secrets replaced by SECRET_MARKER
    delete_before_replace: bool = False  # the deleteBeforeReplace resource option
    transforms: int = 0  # `transforms` callbacks: they change children the plan does not hold
    # The resource options a preview of an update reads (recorded_options); render/update.py.
    options: dict[str, Any] = field(default_factory=dict)
    # input property -> the resources its value came from (an Output of theirs): when one of them is
    # replaced or created, that input is unknown at preview.
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)

    def entry(self) -> dict[str, Any]:
        """This registration as one plan.json entry."""
        return {
            "type": self.type,
            "name": self.name,
            "urn": self.urn,
            "parent": self.parent,
            "dependencies": self.dependencies,
            "inputs": self.inputs,
            "custom": self.custom,
            "provider": self.provider,
            "propertyDependencies": self.property_dependencies,
            "options": self.options,
        }


@dataclass
class Plan:
    stack: str
    resources: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    config: Any = None  # the validated config (config.StackConfig) the program built the stack from

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]


def mask_secrets(value: Any) -> Any:
    """Replace every secret-wrapped value (the SDK's serialized form) by SECRET_MARKER."""
    if isinstance(value, dict):
        if value.get(_SECRET_SIG) == _SECRET_VALUE:
            return SECRET_MARKER
        return {k: mask_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


# The command provider marks a whole SSH `connection` secret because it carries the private key;
# the plan shows where a command runs, so only these fields of it are masked.
_CONNECTION_SECRETS = ("privateKey", "privateKeyPassword", "password")


def _reveal_connection(value: Any) -> Any:
    if isinstance(value, dict) and value.get(_SECRET_SIG) == _SECRET_VALUE:
        value = value.get("value")
    if not isinstance(value, dict):
        return SECRET_MARKER
    shown = {k: SECRET_MARKER if k in _CONNECTION_SECRETS else mask_secrets(v) for k, v in value.items()}
    if isinstance(shown.get("proxy"), dict):
        shown["proxy"] = _reveal_connection(value["proxy"])
    return shown


def _sorted_keys(value: Any) -> Any:
    """The same value with every dict's keys in sorted order, recursively."""
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def _deserialize_keeping_secrets(struct: Any, type_: str = "") -> dict[str, Any]:
    """Struct -> plain Python, with secrets masked (the mocks' deserializer unwraps them).

    Keys come out sorted: a protobuf Struct is a map whose iteration order (upb) differs from one
    process to the next, and render's output must be byte-identical across runs.
    """
    from google.protobuf import json_format  # type: ignore[import-untyped]

    raw = json_format.MessageToDict(struct)
    if type_.startswith("command:remote:") and "connection" in raw:
        connection = _reveal_connection(raw.pop("connection"))
        return _sorted_keys({**mask_secrets(raw), "connection": connection})
    return _sorted_keys(mask_secrets(raw))


def recorded_options(request: Any) -> dict[str, Any]:
    """The resource options in a RegisterResourceRequest, as the engine would receive them.

    MockResourceArgs carries none of them, so they are read from the request the real SDK built
    (pulumi/runtime/resource.py): what a ResourceOptions inherits from its parent and what a
    generated SDK adds (pulumi_command's Command adds replaceOnChanges ["triggers[*]"]) are in it.
    deleteBeforeReplace is null when the program left it to the provider.
    """
    from google.protobuf import json_format

    options: dict[str, Any] = {
        "protect": bool(request.protect),
        "deleteBeforeReplace": bool(request.deleteBeforeReplace) if request.deleteBeforeReplaceDefined else None,
        "ignoreChanges": sorted(request.ignoreChanges),
        "replaceOnChanges": sorted(request.replaceOnChanges),
        "retainOnDelete": bool(request.retainOnDelete),
        "additionalSecretOutputs": sorted(request.additionalSecretOutputs),
        "deletedWith": request.deletedWith,
        "replaceWith": sorted(request.replace_with),
        "aliases": len(request.aliases) + len(request.aliasURNs),
        "remote": bool(request.remote),
    }
    if request.HasField("replacement_trigger"):
        options["replacementTrigger"] = mask_secrets(json_format.MessageToDict(request.replacement_trigger))
    if request.HasField("customTimeouts"):
        timeouts = request.customTimeouts
        options["customTimeouts"] = {"create": timeouts.create, "update": timeouts.update, "delete": timeouts.delete}
    if request.type.startswith("command:"):
        # pulumi-command runs `update` on a change when there is one, else `create` again.
        options["updateCommand"] = "update" in request.object.fields
    return options


# What the steps downstream resources read print, by the last part of their name: a kubeconfig,
# the certificate check's JSON line (scripts.certificates_check_renew).
_FAKE_STDOUT = {
    "kubeconfig": _FAKE_KUBECONFIG,
    "certificates": json.dumps({"expires": "2027-11-23T00:00:00Z", "certificate": "apiserver.crt",
                                "caExpires": "2036-11-21T00:00:00Z", "renewed": False}),
}


class ProgramMocks(pulumi.runtime.Mocks):
    """Outputs = inputs plus what downstream resources read (ids, names, command stdout).
    `previous_outputs`: what the engine answers the stack reading its own last outputs (render
    --against: the older side's, as `pulumi up` would find them); None: a new stack."""

    def __init__(self, previous_outputs: dict[str, Any] | None = None):
        super().__init__()
        self.previous_outputs = previous_outputs

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict]:
        outputs = dict(args.inputs)
        if args.typ == "command:remote:Command":
            outputs["stdout"] = _FAKE_STDOUT.get(args.name.rsplit("-", 1)[-1], "")
            outputs["stderr"] = ""
        if args.typ.startswith("kubernetes:") and isinstance(outputs.get("metadata"), dict):
            outputs["metadata"] = {"name": args.name, **outputs["metadata"]}
        fake: dict[str, Any] = _FAKE_GCP_OUTPUTS.get(args.typ, lambda _: {})(outputs)
        outputs.update(fake)
        outputs.setdefault("name", args.name)
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> Any:
        if args.token == READ_STACK_OUTPUTS and self.previous_outputs is not None:
            return {"name": args.args["name"], "outputs": self.previous_outputs, "secretOutputNames": []}
        return {}


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks, plan: Plan):
        super().__init__(mocks)
        self.plan = plan

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.plan.resources.append(
                Registration(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    custom=bool(request.custom),
                    parent=request.parent,
                    dependencies=sorted(set(request.dependencies)),
                    provider=request.provider,
                    inputs=_deserialize_keeping_secrets(request.object, request.type),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    transforms=len(request.transforms),
                    options=recorded_options(request),
                    property_dependencies={
                        key: sorted(set(deps.urns))
                        for key, deps in sorted(request.propertyDependencies.items())
                        if deps.urns
                    },
                )
            )
        return response


def stack_config(
    stack: str,
    project_dir: Path = PROJECT_DIR,
    secret_value: str = SECRET_MARKER,
    stack_file: Path | None = None,
) -> tuple[dict[str, str], list[str]]:
    """The config map `pulumi up -s <stack>` would hand the program, and its secret keys.

    `stack_file` reads the stack's values from another file (an older Pulumi.<stack>.yaml).
    """
    project = stack_file_reader.read(project_dir / "Pulumi.yaml")
    stack_file = stack_file or project_dir / f"Pulumi.{stack}.yaml"
    if not stack_file.exists():
        where = f"{stack_file.name} in {project_dir}" if stack_file.parent == project_dir else str(stack_file)
        raise FileNotFoundError(f"no stack file {where}")
    values: dict[str, Any] = {}
    for key, decl in project["config"].items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(decl, dict) and "default" in decl:
            values[full] = decl["default"]
        elif not isinstance(decl, dict):
            values[full] = decl
    secret_keys: list[str] = []
    for key, value in stack_file_reader.read(stack_file)["config"].items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            values[full] = secret_value
            secret_keys.append(full)
        else:
            values[full] = value
    as_strings = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    return as_strings, secret_keys


@contextlib.contextmanager
def _no_stack_traces() -> Iterator[None]:
    """Registrations without the caller's stack trace, for this evaluation only.

    The SDK walks and formats the whole Python stack of every registration (traceback.extract_stack,
    a file URI per frame) for the engine's diagnostics; the mock monitor drops it unread. Skipping it
    took 9% of the calls out of a 128-worker lab's evaluation. The SDK floor (bench/floor) runs through
    this function too, so both sides of plan_scale's ratio skip it alike."""
    saved = getattr(sdk_resource, "_get_stack_trace", None)
    if saved is None:  # an SDK without it: nothing to skip
        yield
        return
    sdk_resource._get_stack_trace = source_pb2.StackTrace  # an empty trace  # pylint: disable=protected-access
    try:
        yield
    finally:
        sdk_resource._get_stack_trace = saved  # pylint: disable=protected-access


def run(
    stack: str,
    project_dir: Path = PROJECT_DIR,
    config: tuple[dict[str, str], list[str]] | None = None,
    secret_value: str = SECRET_MARKER,
    previous_outputs: dict[str, Any] | None = None,
) -> Plan:
    """Run __main__.py of the project for `stack` under mocks; return everything it registered.

    `config` overrides the stack file (tests and benchmarks generate configs).
    Raises config.ConfigError for a bad stack config, before anything is registered.
    """
    values, secret_keys = config if config is not None else stack_config(stack, project_dir, secret_value)
    plan = Plan(stack=stack)
    mocks = ProgramMocks(previous_outputs)
    set_all_config(values, secret_keys)
    # set_mocks keeps an existing root Stack: without this, a second run in the same process would
    # parent its resources to the first run's stack and export the first run's outputs too.
    set_root_resource(None)  # type: ignore[arg-type]
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False,
                             monitor=RecordingMonitor(mocks, plan))
    main = str(project_dir / "__main__.py")
    if str(project_dir) not in sys.path:
        sys.path.insert(0, str(project_dir))

    @pulumi.runtime.test
    def evaluate():
        program_globals = runpy.run_path(main, run_name="__main__")
        plan.config = program_globals.get("cfg")
        root = get_root_resource()
        assert root is not None  # set_mocks created it
        exported = dict(getattr(root, "outputs", {}))

        async def collect() -> None:
            for key, value in exported.items():
                output = pulumi.Output.from_input(value)
                secret = await output.is_secret()
                plan.outputs[key] = SECRET_MARKER if secret else await output.future()

        return collect()

    with _no_stack_traces():
        evaluate()
    # Registrations arrive in the order their inputs resolve, which asyncio does not fix from one
    # run to the next; the URN (unique in a stack) gives the plan a stable order.
    plan.resources.sort(key=lambda r: r.urn)
    return plan
