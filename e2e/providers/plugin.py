"""The plugin side of the Pulumi provider protocol, for the stand-in providers (random_provider.py,
command_provider.py): a gRPC ResourceProvider server on 127.0.0.1 that prints its port on stdout
(what the engine reads from a plugin it starts), and the property values on the wire (secrets,
unknowns) as the SDK's own pulumi.runtime.rpc encodes them.

A stand-in is labelled as one where the user sees it: Configure sends the engine a warning, and
GetPluginInfo reports the version of the Python SDK it stands in for.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs in the venv
from google.protobuf import empty_pb2, json_format, struct_pb2  # type: ignore[import-untyped]
from pulumi.runtime import rpc
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc, plugin_pb2, provider_pb2, provider_pb2_grpc

SECRET_KEY = rpc._special_sig_key  # the key of a special value's signature
SECRET_SIG = rpc._special_secret_sig  # the signature that marks a secret
UNKNOWN = rpc.UNKNOWN  # a value not known until the update (preview)
ENGINE_LOG_TIMEOUT = 5  # seconds: the stand-in warning must never hold up a deployment


class Refused(Exception):
    """What the stand-in does not do; the message reaches the user as the step's error."""


@dataclass
class Failure:
    property: str
    reason: str


@dataclass
class Checked:
    inputs: dict[str, Any]
    failures: list[Failure] = field(default_factory=list)


def secret(value: Any) -> dict[str, Any]:
    return {SECRET_KEY: SECRET_SIG, "value": value}


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_KEY) == SECRET_SIG


def reveal(value: Any) -> Any:
    """The value with every secret wrapper taken off (what the provider computes with)."""
    if is_secret(value):
        return reveal(value.get("value"))
    if isinstance(value, dict):
        return {k: reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [reveal(v) for v in value]
    return value


def has_unknown(value: Any) -> bool:
    if value == UNKNOWN:
        return True
    if isinstance(value, dict):
        return any(has_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(has_unknown(v) for v in value)
    return False


def to_dict(struct: struct_pb2.Struct | None) -> dict[str, Any]:
    if struct is None:
        return {}
    return json_format.MessageToDict(struct)


def to_struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(values))
    return struct


class ResourceKind:
    """One resource type of a stand-in. Subclasses say how its inputs are checked, which input
    changes replace it, and what create/update return (or refuse)."""

    token = ""

    def check(self, news: dict[str, Any]) -> Checked:
        raise NotImplementedError

    def replaces_on_change(self, key: str) -> bool:
        raise NotImplementedError

    def same(self, key: str, old: Any, new: Any) -> bool:
        """Whether an input is unchanged (both revealed); a kind may treat e.g. "" and absent as equal."""
        return bool(old == new)

    def create(self, inputs: dict[str, Any], preview: bool) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def update(self, olds: dict[str, Any], news: dict[str, Any], preview: bool) -> dict[str, Any]:
        raise NotImplementedError

    def delete(self, olds: dict[str, Any]) -> None:
        raise NotImplementedError


def changed_keys(kind: ResourceKind, old_inputs: dict[str, Any], news: dict[str, Any],
                 ignored: Iterable[str]) -> list[str]:
    keys = (set(old_inputs) | set(news)) - set(ignored)
    return sorted(k for k in keys if has_unknown(news.get(k))
                  or not kind.same(k, reveal(old_inputs.get(k)), reveal(news.get(k))))


def diff_response(kind: ResourceKind, old_inputs: dict[str, Any], news: dict[str, Any],
                  ignored: Iterable[str]) -> provider_pb2.DiffResponse:
    keys = changed_keys(kind, old_inputs, news, ignored)
    replaces = [k for k in keys if kind.replaces_on_change(k)]
    detailed = {}
    for key in keys:
        replace = key in replaces
        if key not in old_inputs:
            how = provider_pb2.PropertyDiff.ADD_REPLACE if replace else provider_pb2.PropertyDiff.ADD
        elif key not in news:
            how = provider_pb2.PropertyDiff.DELETE_REPLACE if replace else provider_pb2.PropertyDiff.DELETE
        else:
            how = provider_pb2.PropertyDiff.UPDATE_REPLACE if replace else provider_pb2.PropertyDiff.UPDATE
        detailed[key] = provider_pb2.PropertyDiff(kind=how, inputDiff=True)
    changes = provider_pb2.DiffResponse.DIFF_SOME if keys else provider_pb2.DiffResponse.DIFF_NONE
    return provider_pb2.DiffResponse(changes=changes, diffs=keys, replaces=replaces, detailedDiff=detailed,
                                     hasDetailedDiff=True, deleteBeforeReplace=False)


class StandInProvider(provider_pb2_grpc.ResourceProviderServicer):
    def __init__(self, name: str, version: str, note: str, kinds: Iterable[ResourceKind], engine: str) -> None:
        self.name, self.version, self.note, self.engine = name, version, note, engine
        self.kinds = {kind.token: kind for kind in kinds}
        self.warned = False

    def kind(self, token: str, context: grpc.ServicerContext) -> ResourceKind:
        kind = self.kinds.get(token)
        if kind is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"{self.note}: resource type {token!r} is not implemented; "
                          f"it implements only {', '.join(sorted(self.kinds))}")
        assert kind is not None
        return kind

    def warn_once(self) -> None:
        """Tell the user, through the engine, that this provider is a stand-in."""
        if self.warned or not self.engine:
            return
        self.warned = True
        try:
            with grpc.insecure_channel(self.engine) as channel:
                engine_pb2_grpc.EngineStub(channel).Log(
                    engine_pb2.LogRequest(severity=engine_pb2.WARNING, message=self.note),
                    timeout=ENGINE_LOG_TIMEOUT)
        except grpc.RpcError as err:
            print(f"{self.note} (could not warn through the engine: {err.code()})", file=sys.stderr)

    # The protocol's methods. gRPC calls them with the request and a context.
    def GetPluginInfo(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> plugin_pb2.PluginInfo:
        return plugin_pb2.PluginInfo(version=self.version)

    def GetSchema(self, request: provider_pb2.GetSchemaRequest,
                  context: grpc.ServicerContext) -> provider_pb2.GetSchemaResponse:
        return provider_pb2.GetSchemaResponse(
            schema=json_format.MessageToJson(to_struct({"name": self.name, "version": self.version,
                                                        "description": self.note})))

    def CheckConfig(self, request: provider_pb2.CheckRequest,
                    context: grpc.ServicerContext) -> provider_pb2.CheckResponse:
        return provider_pb2.CheckResponse(inputs=request.news)

    def DiffConfig(self, request: provider_pb2.DiffRequest,
                   context: grpc.ServicerContext) -> provider_pb2.DiffResponse:
        olds, news = to_dict(request.old_inputs) or to_dict(request.olds), to_dict(request.news)
        keys = sorted(k for k in set(olds) | set(news) if reveal(olds.get(k)) != reveal(news.get(k)))
        changes = provider_pb2.DiffResponse.DIFF_SOME if keys else provider_pb2.DiffResponse.DIFF_NONE
        return provider_pb2.DiffResponse(changes=changes, diffs=keys)

    def Configure(self, request: provider_pb2.ConfigureRequest,
                  context: grpc.ServicerContext) -> provider_pb2.ConfigureResponse:
        self.warn_once()
        return provider_pb2.ConfigureResponse(acceptSecrets=True, supportsPreview=True)

    def Check(self, request: provider_pb2.CheckRequest, context: grpc.ServicerContext) -> provider_pb2.CheckResponse:
        checked = self.kind(request.type or _type_of(request.urn), context).check(to_dict(request.news))
        return provider_pb2.CheckResponse(
            inputs=to_struct(checked.inputs),
            failures=[provider_pb2.CheckFailure(property=f.property, reason=f.reason) for f in checked.failures])

    def Diff(self, request: provider_pb2.DiffRequest, context: grpc.ServicerContext) -> provider_pb2.DiffResponse:
        kind = self.kind(request.type or _type_of(request.urn), context)
        old_inputs = to_dict(request.old_inputs) if request.HasField("old_inputs") else to_dict(request.olds)
        return diff_response(kind, old_inputs, to_dict(request.news), request.ignoreChanges)

    def Create(self, request: provider_pb2.CreateRequest,
               context: grpc.ServicerContext) -> provider_pb2.CreateResponse:
        kind = self.kind(request.type or _type_of(request.urn), context)
        try:
            id_, outputs = kind.create(to_dict(request.properties), request.preview)
        except Refused as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        return provider_pb2.CreateResponse(id=id_, properties=to_struct(outputs))

    def Read(self, request: provider_pb2.ReadRequest, context: grpc.ServicerContext) -> provider_pb2.ReadResponse:
        self.kind(request.type or _type_of(request.urn), context)
        if not to_dict(request.properties):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{self.note}: import (a read with no state) is not implemented")
        # Nothing lives outside the state (random) or nothing was made (command): the state is the truth.
        return provider_pb2.ReadResponse(id=request.id, properties=request.properties, inputs=request.inputs)

    def Update(self, request: provider_pb2.UpdateRequest,
               context: grpc.ServicerContext) -> provider_pb2.UpdateResponse:
        kind = self.kind(request.type or _type_of(request.urn), context)
        try:
            outputs = kind.update(to_dict(request.olds), to_dict(request.news), request.preview)
        except Refused as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        return provider_pb2.UpdateResponse(properties=to_struct(outputs))

    def Delete(self, request: provider_pb2.DeleteRequest, context: grpc.ServicerContext) -> empty_pb2.Empty:
        kind = self.kind(request.type or _type_of(request.urn), context)
        try:
            kind.delete(to_dict(request.properties))
        except Refused as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        return empty_pb2.Empty()

    def Cancel(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> empty_pb2.Empty:
        return empty_pb2.Empty()


def _type_of(urn: str) -> str:
    """urn:pulumi:stack::project::parent$type::name -> type (older engines send no `type` field)."""
    parts = urn.split("::")
    return parts[2].split("$")[-1] if len(parts) >= 4 else ""


def serve(make: Any, argv: list[str]) -> None:
    """Run a stand-in as the engine runs a plugin: `pulumi-resource-<name> [flags] <engine address>`."""
    # The engine's address comes last, after flags such as --logtostderr, -v=9, --tracing <addr>.
    addresses = [a for a in argv if not a.startswith("-") and ":" in a]
    engine = addresses[-1] if addresses else ""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    provider_pb2_grpc.add_ResourceProviderServicer_to_server(make(engine), server)
    port = server.add_insecure_port("127.0.0.1:0")  # loopback only
    server.start()
    print(port, flush=True)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(grace=None)
