"""Checks shared by the config sections: names, labels, quantities, images, paths, addresses, SSH
host keys and users. Each check returns the value or raises ValueError with what is allowed; every
pattern matches the whole value, so a trailing newline never reaches a host script."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

from config.quantities import check_positive_quantity, parse_quantity

# The end marker of the heredoc every lab host script travels in (components/lab/scripts.py:as_root):
# no config string may hold it, or the rest of the string would run as commands. Defined here, the
# lower floor, so config needs nothing from the components.
HEREDOC_END = "GPU_CLUSTER_SCRIPT_END"


class Model(BaseModel):
    """A config section: camelCase keys as in the stack file, unknown keys refused, frozen."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    @field_validator("*")
    @classmethod
    def _no_script_end(cls, v: Any) -> Any:
        # Every key has its own format rule; this one holds for all of them, including keys added
        # later: the lab's host scripts are sent inside a here-document that ends at this word
        # (components/lab/scripts.as_root refuses a script holding it, after resources exist).
        texts = [v] if isinstance(v, str) else [t for t in _texts(v) if isinstance(t, str)]
        if any(HEREDOC_END in t for t in texts):
            raise ValueError(f"must not contain {HEREDOC_END}, the end marker of the host scripts")
        return v


def _texts(value: Any) -> list[Any]:
    """The strings of a list or mapping value (a section's own model checks its strings itself)."""
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, Mapping):
        return [*value.keys(), *value.values()]
    return []


def empty_to_none(value: Any) -> Any:
    # Pulumi injects the project defaults ("" and {}) for keys a stack does not set.
    return None if value in ("", {}) else value


# --- names and labels ---------------------------------------------------------------------------

# RFC 1123 label: what Kubernetes accepts as a node name and we accept as a host name.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# RFC 1123 subdomain (at most 253 characters): node, StorageClass and most Kubernetes object names.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# The name part of a label key, and a non-empty label value (at most 63 characters each).
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def check_dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a DNS subdomain name (lowercase a-z, 0-9, '-' and '.', "
                         "starting and ending alphanumeric, at most 253 characters)")
    return value


def check_display_name(value: str, limit: int = 100) -> str:
    """A free-text name that goes into an API object or a kubeconfig lookup: printable, one line,
    bounded (a newline or control character there is never meant and breaks logs and diffs)."""
    if not value or len(value) > limit or not value.isprintable():
        raise ValueError(f"{value[:40]!r} must be 1-{limit} printable characters on one line")
    return value


def label_problems(labels: Mapping[str, str]) -> list[str]:
    """What is wrong with these Kubernetes labels (key: [prefix/]name, value: name or empty)."""
    problems = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if not _LABEL_NAME.fullmatch(name) or (
            "/" in key and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))
        ):
            problems.append(f"label key {key!r} must be [<DNS subdomain>/]<name>, the name at most 63 characters of "
                            "A-Z a-z 0-9 - _ . starting and ending alphanumeric")
        if value and not _LABEL_NAME.fullmatch(value):
            problems.append(f"label value {value!r} of {key!r} must be empty or at most 63 characters of "
                            "A-Z a-z 0-9 - _ . starting and ending alphanumeric")
    return problems


# --- Debian package versions ------------------------------------------------------------------

APT_VERSION = re.compile(r"[0-9][A-Za-z0-9.+~:-]*")


# --- SSH host keys and users --------------------------------------------------------------------

# "<type> <base64>" as in ssh-keyscan output / known_hosts, without the host column.
_HOST_KEY = re.compile(
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521) "
    r"([A-Za-z0-9+/]{40,}={0,3})"
)
# A POSIX portable user name as useradd takes it: it ends up in SSH and shell command lines.
_POSIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# Length of the EC point (uncompressed, 0x04 || X || Y) per curve of ecdsa-sha2-<curve>.
_EC_POINT_BYTES = {"nistp256": 65, "nistp384": 97, "nistp521": 133}


def _ssh_wire_fields(blob: bytes) -> list[bytes]:
    """The length-prefixed strings of an SSH public key blob (RFC 4253 6.6); ValueError if torn."""
    fields, i = [], 0
    while i < len(blob):
        size = int.from_bytes(blob[i:i + 4], "big")
        if i + 4 + size > len(blob):
            raise ValueError("truncated")
        fields.append(blob[i + 4:i + 4 + size])
        i += 4 + size
    return fields


def _host_key_problem(key_type: str, b64: str) -> str | None:
    """Why the base64 blob is not a `key_type` public key, or None."""
    try:
        fields = _ssh_wire_fields(base64.b64decode(b64, validate=True))
    except (ValueError, binascii.Error):
        return "its base64 part does not decode to an SSH public key"
    if not fields or fields[0] != key_type.encode():
        found = fields[0][:40].decode("ascii", "replace") if fields else "nothing"
        return f"its base64 part holds a {found!r} key, not {key_type}"
    if key_type == "ssh-ed25519":
        ok = len(fields) == 2 and len(fields[1]) == 32
    elif key_type == "ssh-rsa":  # e, n
        ok = len(fields) == 3 and all(fields[1:])
    else:
        curve = key_type.removeprefix("ecdsa-sha2-")
        ok = len(fields) == 3 and fields[1] == curve.encode() and len(fields[2]) == _EC_POINT_BYTES[curve]
    return None if ok else f"its base64 part is not a well-formed {key_type} key"


def check_host_key(value: str) -> str:
    # No strip(): a key with a newline or extra words is refused rather than cut into shape.
    m = _HOST_KEY.fullmatch(value)
    if not m:
        raise ValueError(
            "must be a public host key '<type> <base64>' as printed by "
            "`ssh-keyscan -t ed25519 <host>` (without the host column); "
            "types: ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256/384/521"
        )
    problem = _host_key_problem(m.group(1), m.group(2))
    if problem:
        raise ValueError(f"{problem}; paste the line `ssh-keyscan -t ed25519 <host>` prints, from the key type on")
    return value


def check_posix_user(value: str) -> str:
    if not _POSIX_USER.fullmatch(value):
        raise ValueError("must be a POSIX user name: [a-z_][a-z0-9_-]*, at most 32 characters (e.g. 'ubuntu')")
    return value


# --- addresses ----------------------------------------------------------------------------------


def unusable_address(addr: ipaddress.IPv4Address, loopback_ok: bool = False) -> str | None:
    """Why other machines cannot reach `addr` as a host's own address, or None."""
    for kind, bad in (
        ("loopback", addr.is_loopback and not loopback_ok),
        ("unspecified", addr.is_unspecified),
        ("multicast", addr.is_multicast),
        ("link-local", addr.is_link_local),
        ("broadcast/reserved", addr.is_reserved),
    ):
        if bad:
            return (f"{addr} is a {kind} address; use the unicast address the other machines reach it at "
                    "(not loopback, unspecified, multicast, link-local or broadcast)")
    return None


# A DNS name: labels of letters, digits and '-', at most 63 each and 253 in all.
_HOSTNAME_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?")


def check_remote_host(value: str, loopback_ok: bool = False) -> str:
    """An IPv4 address others can reach, or a DNS name."""
    if re.fullmatch(r"[0-9.]+", value):  # looks like an address: must be one
        try:
            addr = ipaddress.IPv4Address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a valid IPv4 address") from None
        problem = unusable_address(addr, loopback_ok)
        if problem:
            raise ValueError(problem)
        return value
    labels = value.split(".")
    if len(value) > 253 or not all(_HOSTNAME_LABEL.fullmatch(label) for label in labels):
        raise ValueError("must be an IPv4 address or a DNS name (letters, digits, '-' and '.', "
                         "labels of at most 63 characters)")
    if not loopback_ok and labels[-1].lower() == "localhost":
        raise ValueError("localhost is this machine, not a server the cluster reaches")
    return value


def ipv4_or_none(text: str) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        return None


# --- Kubernetes quantities and images -------------------------------------------------------------

# An image reference pinned by a tag (not "latest") or by a digest.
_IMAGE_NAME = re.compile(r"[a-z0-9]+(?:(?:[._-]|__|[-]+)[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*")
_IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_IMAGE_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")


def quantity_value(text: str) -> float:
    """The numeric value of a Kubernetes quantity (cpu in cores, memory in bytes)."""
    return float(parse_quantity(text))


def check_quantity(value: object) -> str:
    """A Kubernetes quantity above zero (config/quantities.py reads it as the API server does)."""
    return check_positive_quantity(value)


def check_pinned_image(value: str) -> str:
    """name:tag (tag not 'latest') or name@sha256:<digest>; an untagged name is rejected."""
    name, _, digest = value.partition("@")
    if digest:
        if not _IMAGE_DIGEST.fullmatch(digest):
            raise ValueError("digest must be sha256:<64 hex digits>")
        name = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    else:
        last = name.rsplit("/", 1)[-1]
        if ":" not in last:
            raise ValueError("must be pinned by a tag or digest (e.g. 'registry/trainer:1.0.0'); untagged means latest")
        name, tag = name.rsplit(":", 1)
        if tag == "latest":
            raise ValueError("must be pinned; ':latest' moves under you")
        if not _IMAGE_TAG.fullmatch(tag):
            raise ValueError(f"tag {tag!r} is not a valid image tag")
    if not _IMAGE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid image name (lowercase, 'registry[:port]/path')")
    return value


# --- host directories ---------------------------------------------------------------------------

_PATH_PART = re.compile(r"[A-Za-z0-9._-]+")


def check_abs_path(value: str, root_ok: bool = False) -> str:
    """A normalised absolute path of safe characters (it reaches shell scripts, exports and PVs)."""
    if root_ok and value == "/":
        return value
    parts = value.split("/")
    if parts[0] != "" or not all(_PATH_PART.fullmatch(p) and p not in (".", "..") for p in parts[1:]):
        raise ValueError("must be a normalised absolute path: '/'-separated names of A-Z a-z 0-9 . _ - "
                         "(no '.', '..', '//' or trailing '/'), e.g. '/srv/gpu-cluster/shared'")
    return value


# Host directories never to export read-write (no_root_squash, chmod 0755) or mount through a
# hostPath: system trees, refused with everything under them ...
_SYSTEM_TREES = (
    "/etc", "/proc", "/sys", "/dev", "/boot", "/root", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
    "/libx32", "/snap", "/run", "/var/run", "/var/lock", "/var/lib/kubelet", "/var/lib/etcd", "/var/lib/containerd",
    "/var/lib/docker", "/var/lib/cni", "/var/lib/calico", "/var/log/pods", "/var/log/containers", "/opt/cni",
)
# ... and directories holding everyone's data, refused themselves (a directory below them is fine).
_SHARED_DIRS = ("/var/lib", "/var/log", "/var/cache", "/var/spool", "/var/tmp", "/var/mail", "/var/opt", "/var/local")


def host_dir_problem(path: str) -> str | None:
    """Why `path` (already normalised) must not be a directory this program shares from a host."""
    allowed = "use a directory of its own, two or more levels deep, e.g. /srv/gpu-cluster/shared"
    for tree in _SYSTEM_TREES:
        if path == tree or path.startswith(tree + "/"):
            return f"{path} is {'' if path == tree else 'under '}{tree}, a system directory; {allowed}"
    if path.count("/") < 2 or path in _SHARED_DIRS:
        return f"{path} is a top-level or shared system directory; {allowed}"
    return None


# Directories whose content does not survive, or is not the owner's alone, and why (Ubuntu's
# systemd: tmpfiles.d/tmp.conf has `D /tmp` (emptied at every boot) and `q /var/tmp ... 30d` (files
# unused for 30 days deleted); /run and /dev/shm are tmpfs; /var/run and /var/lock are symlinks into
# /run). /tmp and /var/tmp are mode 1777: any user may create the directory first, or a link there.
_VOLATILE_TREES = {
    "/tmp": "emptied at every boot (systemd-tmpfiles) and writable by every user",
    "/var/tmp": "aged out by systemd-tmpfiles (files unused for 30 days are deleted) and writable by every user",
    "/run": "a tmpfs: in memory, gone at every reboot",
    "/var/run": "a symlink to /run, a tmpfs: in memory, gone at every reboot",
    "/var/lock": "a symlink to /run/lock, a tmpfs: in memory, gone at every reboot",
    "/dev/shm": "a tmpfs shared by every user: in memory, gone at every reboot",
}


def volatile_dir_problem(path: str) -> str | None:
    """Why `path` would not keep what is written to it across a reboot, or could be taken over by
    another user; None if neither. Normalised here too ('//tmp', '/tmp/../tmp/x', a trailing '/'),
    so that no spelling slips past; the caller adds what to use instead."""
    normal = posixpath.normpath("/" + path.lstrip("/"))  # normpath alone keeps a leading '//' (POSIX)
    for tree, why in _VOLATILE_TREES.items():
        if normal == tree or normal.startswith(tree + "/"):
            where = tree if normal == tree else f"under {tree}"
            return f"{path} is {where}, {why}: what is kept there does not survive"
    return None
