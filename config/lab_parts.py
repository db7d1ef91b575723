"""The lab's own sections beside its hosts: the SSH bastion, the NVIDIA driver node prep installs,
and the shared storage (an existing NFS export, or one the program provisions). LabStack
(config/lab.py) holds them; dev reads the NFS export's model, inert_keys their defaults.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from components import versions
from config.addons import Storage
from config.fields import (
    APT_VERSION,
    Model,
    check_abs_path,
    check_host_key,
    check_posix_user,
    check_remote_host,
    empty_to_none,
)


class Bastion(Model):
    """An SSH jump host in front of the lab servers."""

    host: str = Field(description="Address or DNS name of the jump host.")
    ssh_user: str = Field(default="ubuntu", description="SSH user on the jump host.")
    ssh_port: int = Field(default=22, ge=1, le=65535, description="SSH port of the jump host.")
    host_key: str = Field(description="Pinned SSH host key of the jump host.")

    _host_key = field_validator("host_key")(classmethod(lambda cls, v: check_host_key(v)))
    _ssh_user = field_validator("ssh_user")(classmethod(lambda cls, v: check_posix_user(v)))
    # Loopback allowed: the jump host may be a local SSH tunnel (the program connects from here).
    _host = field_validator("host")(classmethod(lambda cls, v: check_remote_host(v, loopback_ok=True)))


class NvidiaDriver(Model):
    """The NVIDIA driver installed on lab GPU hosts."""

    branch: str = Field(
        default=versions.NVIDIA_DRIVER_BRANCH_DEFAULT,
        description="Driver branch: installs nvidia-driver-<branch>-server and holds it.",
    )
    version: str | None = Field(
        default=None, description="Exact Debian version of that package (optional, pins fully)."
    )
    preinstalled: bool = Field(
        default=False, description="Hosts already have a working driver: install none, only check that it sees the GPUs."
    )

    @field_validator("branch")
    @classmethod
    def _branch(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9]{3}", v):
            raise ValueError("must be a driver branch number such as '570'")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not APT_VERSION.fullmatch(v):
            raise ValueError("must be a Debian package version such as '570.172.08-0ubuntu0.22.04.1'")
        return v


# What lab's storage.nfs is (dev's adds how it is mounted).
NFS_EXPORT_DESCRIPTION = "An existing NFS export {server, path} that every node can mount."


class NfsExport(Model):
    server: str = Field(description="NFS server address or DNS name.")
    path: str = Field(description="Exported directory on the server, absolute.")

    # The server's own layout: '/' is allowed (an NFSv4 pseudo-root).
    _path = field_validator("path")(classmethod(lambda cls, v: check_abs_path(v, root_ok=True)))
    _server = field_validator("server")(classmethod(lambda cls, v: check_remote_host(v)))


# dev's storage keys: refused in a lab stack unless left empty.
_DEV_STORAGE_KEYS = ("hostPath", "useDefaultClass")


class LabStorage(Storage):
    """lab: an existing NFS export, or an NFS server this program sets up on the control plane."""

    nfs: NfsExport | None = Field(default=None, description=NFS_EXPORT_DESCRIPTION)
    provision: bool = Field(
        default=False, description="Set up an NFS server on the control plane, exporting storage.exportPath to the nodes."
    )
    export_path: str = Field(
        default="/srv/gpu-cluster/shared",
        description="provision: the exported directory (kept on destroy), at least two levels deep and outside "
                    "system directories, /tmp, /var/tmp, /run and /dev/shm.",
    )
    server: str | None = Field(
        default=None,
        description="provision: the host (a hosts[].name, any role, not gone) that serves the export. Unset: the host "
                    "the deployed export is on, or the first control plane for a new one; it never moves by itself. "
                    "Set it to move the export, after copying the data there.",
    )

    _optional = field_validator("nfs", "server", mode="before")(classmethod(lambda cls, v: empty_to_none(v)))
    # Syntax here; which directories are refused (host_dir_problem) is a stack check, so that a
    # refused directory is reported together with the other storage problems.
    _abs = field_validator("export_path")(classmethod(lambda cls, v: check_abs_path(v)))

    @property
    def configured(self) -> bool:
        return bool(self.nfs or self.provision)
