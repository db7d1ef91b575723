"""SSH connections to lab hosts: pinned host keys, the private key as a Pulumi secret."""

from __future__ import annotations

import pulumi
from pulumi_command import remote

from config.lab import Bastion, Host

# How long a step keeps dialing a host that is down: the driver step may reboot the host,
# and the step after it must wait for the host to come back (about 10 minutes).
REBOOT_DIAL_ERROR_LIMIT = 60
REBOOT_PER_DIAL_TIMEOUT = 10


def connection(
    host: Host,
    private_key: pulumi.Output[str],
    bastion: Bastion | None = None,
    *,
    survive_reboot: bool = False,
) -> remote.ConnectionArgs:
    proxy = None
    if bastion is not None:
        proxy = remote.ProxyConnectionArgs(
            host=bastion.host,
            port=bastion.ssh_port,
            user=bastion.ssh_user,
            host_key=bastion.host_key,
            private_key=private_key,
        )
    return remote.ConnectionArgs(
        host=str(host.address),
        port=host.ssh_port,
        user=host.ssh_user,
        host_key=host.host_key,
        private_key=private_key,
        proxy=proxy,
        dial_error_limit=REBOOT_DIAL_ERROR_LIMIT if survive_reboot else None,
        per_dial_timeout=REBOOT_PER_DIAL_TIMEOUT if survive_reboot else None,
    )
