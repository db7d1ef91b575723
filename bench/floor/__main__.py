"""The SDK floor: a program with no project logic that registers as many resources as the real plan.

plan_scale.py runs this file through render.program.run (project_dir=bench/floor), i.e. under the
very mocks and recording monitor the real program runs under. It registers
`floorComponents` ComponentResources and `floorCommands` pulumi_command remote.Commands, the
commands spread round-robin over the components as children, each depending on the previous command
of its component, each with an SSH connection carrying the private key as a secret (as every real
command does) and a `create` string padded so that a command's recorded inputs are
`floorInputBytes` long on average (the real plan's average over its custom resources).

Whatever this takes is what the Pulumi SDK and the harness need for that many registrations of
that size; the real program's time above it is the project's own logic (config validation, script
generation, Output plumbing).
"""

import json

import pulumi
from pulumi_command import remote

HOST = "198.18.0.10"
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE8N2wz1xVb2cNQv7m4s1M8pC1xq2mC5yY0d3x7lW9eJ"

cfg = pulumi.Config()
n_components = max(1, cfg.require_int("floorComponents"))
n_commands = cfg.require_int("floorCommands")
target_bytes = cfg.require_int("floorInputBytes")
private_key = cfg.require_secret("sshPrivateKey")

connection = remote.ConnectionArgs(host=HOST, user="ubuntu", host_key=HOST_KEY, private_key=private_key)


def recorded_size(name: str, create: str) -> int:
    """Length of json.dumps of the inputs as the recording monitor keeps them (connection defaults
    filled in by the provider SDK, the private key masked)."""
    return len(
        json.dumps(
            {
                "connection": {
                    "dialErrorLimit": 10.0,
                    "host": HOST,
                    "hostKey": HOST_KEY,
                    "perDialTimeout": 15.0,
                    "port": 22.0,
                    "privateKey": "[secret]",
                    "user": "ubuntu",
                },
                "create": create,
                "triggers": [name, HOST],
            }
        )
    )


groups = [pulumi.ComponentResource("bench:floor:Group", f"group-{i}", None) for i in range(n_components)]
last: dict[int, remote.Command] = {}
for j in range(n_commands):
    g = j % n_components
    name = f"cmd-{j}"
    padding = max(0, target_bytes - recorded_size(name, ""))
    last[g] = remote.Command(
        name,
        connection=connection,
        create="x" * padding,
        triggers=[name, HOST],
        opts=pulumi.ResourceOptions(parent=groups[g], depends_on=[last[g]] if g in last else []),
    )
for group in groups:
    group.register_outputs({})
