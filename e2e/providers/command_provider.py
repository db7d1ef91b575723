"""A PREVIEW-ONLY stand-in for pulumi-command 1.2.1 (requirements.txt), whose provider module the Go
module proxy does not serve (docs/toolchain.md, "Stand-ins for pulumi-random and pulumi-command").
It lets `pulumi preview` of the lab stack run through the real engine; it never runs a command and
never opens an SSH connection: create, update and delete outside a preview fail, naming why.

Semantics, read in pulumi-command v1.2.1 and pulumi-go-provider v1.3.0 (components/lab/upgrade.py
cites the same files):
  provider/pkg/provider/remote/command.go, CommandInputs: connection (required, secret), create,
    update, delete, stdin, logging, environment, triggers, addPreviousOutputInEnv (default true);
    the state adds stdout and stderr;
  common/inputs.go: `triggers` is replaceOnChanges; the others are not, so a change to any of them
    is an update (pulumi-go-provider infer: a replaceOnChanges field replaces, any other updates).
"""

from __future__ import annotations

import sys
from typing import Any

from e2e.providers.plugin import (
    UNKNOWN,
    Checked,
    Failure,
    Refused,
    ResourceKind,
    StandInProvider,
    is_secret,
    reveal,
    secret,
    serve,
)

SDK_VERSION = "1.2.1"  # the pulumi_command Python SDK in requirements.txt
NOTE = (f"pulumi-resource-command here is a STAND-IN for pulumi-command {SDK_VERSION} "
        "(e2e/providers/command_provider.py), for previews only")
REFUSAL = ("stand-in for pulumi-command: the proxy serves no version; it previews only and runs nothing "
           "(docs/toolchain.md, \"Stand-ins for pulumi-random and pulumi-command\")")
COMMAND = "command:remote:Command"
CONNECTION_KEYS = ("host", "port", "user", "password", "privateKey", "privateKeyPassword", "agentSocketPath",
                   "dialErrorLimit", "perDialTimeout", "proxy", "hostKey")
LOGGING = ("stdout", "stderr", "stdoutAndStderr", "none")  # remote.Logging's values


class RemoteCommand(ResourceKind):
    token = COMMAND
    INPUTS = ("connection", "create", "update", "delete", "stdin", "logging", "environment", "triggers",
              "addPreviousOutputInEnv")
    OUTPUTS = ("stdout", "stderr")

    def check(self, news: dict[str, Any]) -> Checked:
        failures = [Failure(k, f"is not an input of remote.Command; its inputs are {', '.join(self.INPUTS)}")
                    for k in sorted(set(news) - set(self.INPUTS))]
        failures += _check_connection(reveal(news.get("connection")))
        for key in ("create", "update", "delete", "stdin"):
            value = reveal(news.get(key))
            if value is not None and value != UNKNOWN and not isinstance(value, str):
                failures.append(Failure(key, f"must be a string (got {type(value).__name__})"))
        logging = reveal(news.get("logging"))
        if logging is not None and logging != UNKNOWN and logging not in LOGGING:
            failures.append(Failure("logging", f"must be one of {', '.join(LOGGING)} (got {logging!r})"))
        environment = reveal(news.get("environment"))
        if environment is not None and environment != UNKNOWN and not isinstance(environment, dict):
            failures.append(Failure("environment", "must be a map of strings"))
        inputs = dict(news)
        inputs.setdefault("addPreviousOutputInEnv", True)
        if "connection" in inputs and not is_secret(inputs["connection"]):
            inputs["connection"] = secret(inputs["connection"])  # provider:"secret"
        return Checked(inputs, failures)

    def replaces_on_change(self, key: str) -> bool:
        return key == "triggers"

    def create(self, inputs: dict[str, Any], preview: bool) -> tuple[str, dict[str, Any]]:
        if not preview:
            raise Refused(REFUSAL)
        return "", {**inputs, "stdout": UNKNOWN, "stderr": UNKNOWN}

    def update(self, olds: dict[str, Any], news: dict[str, Any], preview: bool) -> dict[str, Any]:
        if not preview:
            raise Refused(REFUSAL)
        return {**news, "stdout": UNKNOWN, "stderr": UNKNOWN}

    def delete(self, olds: dict[str, Any]) -> None:
        raise Refused(REFUSAL)


def _check_connection(connection: Any) -> list[Failure]:
    if connection is None:
        return [Failure("connection", "is required: the SSH connection (host, port, user, key) to run on")]
    if connection == UNKNOWN:
        return []
    if not isinstance(connection, dict):
        return [Failure("connection", "must be an object (remote.ConnectionArgs)")]
    failures = [Failure(f"connection.{k}", f"is not a connection field; they are {', '.join(CONNECTION_KEYS)}")
                for k in sorted(set(connection) - set(CONNECTION_KEYS))]
    host = connection.get("host")
    if host is None or (host != UNKNOWN and (not isinstance(host, str) or not host.strip())):
        failures.append(Failure("connection.host", f"is required: the host to connect to (got {host!r})"))
    port = connection.get("port")
    if port is not None and port != UNKNOWN and not (isinstance(port, (int, float)) and 0 < port < 65536):
        failures.append(Failure("connection.port", f"must be a port number, 1 to 65535 (got {port!r})"))
    return failures


def make_provider(engine: str) -> StandInProvider:
    return StandInProvider("command", SDK_VERSION, NOTE, [RemoteCommand()], engine)


def main(argv: list[str]) -> None:
    serve(make_provider, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
