"""etcdBackup.s3 (lab): every control plane ships each snapshot, encrypted on the host, to an
S3-compatible bucket (components/lab/etcd_backup_s3.py; docs/operations/etcd-backup.md).

The secrets are top-level secret keys, not keys of this section: `pulumi config set --secret --path
etcdBackup.s3.secretAccessKey` would make the program receive the whole etcdBackup object as one
secret, and its values would reach the model. They are gpu-cluster:etcdBackupS3AccessKeyId,
etcdBackupS3SecretAccessKey and etcdBackupEncryptionKey (config/__init__.py SECRET_KEYS).

Why https: the snapshot is encrypted before it leaves and SigV4 never sends the secret key, but over
plain http anyone on the path reads the access key id, replays or answers the requests (a forged
listing, a dropped upload that looks done). http is accepted only for a loopback host: the tests'
server, or a local TLS-terminating proxy on the control plane.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator

from config.errors import Problems
from config.fields import Model

ACCESS_KEY_ID = "etcdBackupS3AccessKeyId"
SECRET_ACCESS_KEY = "etcdBackupS3SecretAccessKey"
ENCRYPTION_KEY = "etcdBackupEncryptionKey"
SECRETS = (ACCESS_KEY_ID, SECRET_ACCESS_KEY, ENCRYPTION_KEY)

# S3's bucket naming rules (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html):
# 3 to 63 lower-case letters, digits, dots and hyphens, a letter or digit at each end.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# S3's "safe characters" for object key names, a folder per segment, ending in "/".
_PREFIX = re.compile(r"(?:[A-Za-z0-9!_.*'()-]+/)+")
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
# The endpoint's host: a DNS name or an address (urlsplit keeps spaces or ';' in it, and drops newlines).
_HOST = re.compile(r"[A-Za-z0-9.-]+|[0-9A-Fa-f:.]+")
# PEM blocks (RFC 7468): text outside them is ignored, as OpenSSL does (bundles carry "# Issuer" lines).
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----[A-Za-z0-9+/=\s]*?-----END \1-----")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EtcdBackupS3Config(Model):
    """An S3-compatible bucket for off-host copies of the etcd snapshots (encrypted on the host)."""

    endpoint: str = Field(description="The S3 endpoint URL, https://host[:port] with no path (the bucket goes in the "
                                      "path or the host name: addressing); http only for a loopback host.")
    bucket: str = Field(description="The bucket (it must exist; the program creates none).")
    prefix: str = Field(description="Key prefix of this cluster's snapshots, ending in '/', e.g. lab-a/etcd/: one "
                                    "prefix per cluster (retention deletes its members' old snapshots under it).")
    region: str = Field(default="us-east-1", description="The region the requests are signed for (SigV4).")
    retain: int = Field(default=28, ge=1, le=1000, description="Snapshots kept in the bucket per control plane.")
    retain_days: int | None = Field(default=None, ge=1, le=3650,
                                    description="Also delete a control plane's snapshots older than this many days "
                                                "(its newest is always kept).")
    ca_bundle: str | None = Field(default=None, description="PEM certificates that alone are trusted for the "
                                  "endpoint's TLS (a private CA); unset: the control planes' system CA store.")
    addressing: Literal["path", "virtual"] = Field(
        default="path", description="path: https://HOST/BUCKET/KEY (MinIO, Ceph RGW, Garage; AWS still takes it); "
                                    "virtual: https://BUCKET.HOST/KEY, AWS's own form (it announced path-style's "
                                    "retirement in 2019, then postponed it).")

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if any(c.isspace() or not c.isprintable() for c in v):
            raise ValueError(f"must be a URL https://host[:port] with no space or control character, got {v!r}")
        parts = urlsplit(v)
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"{v!r} has a bad port: {exc}") from None
        del port
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"must be a URL https://host[:port], got {v!r}")
        if not _HOST.fullmatch(parts.hostname):
            raise ValueError(f"must name its host as a DNS name or an address, got {parts.hostname!r}")
        if parts.username or parts.password:
            raise ValueError("must not hold credentials; they are the secrets "
                             f"gpu-cluster:{ACCESS_KEY_ID} and gpu-cluster:{SECRET_ACCESS_KEY}")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"must be scheme://host[:port] with no path or query (the bucket is its own key), got {v!r}")
        if parts.scheme == "http" and not _loopback(parts.hostname):
            raise ValueError("must use https (http only for a loopback host such as 127.0.0.1): the access key id and "
                             "every request would travel in the clear")
        return v.rstrip("/")

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, v: str) -> str:
        if not _BUCKET.fullmatch(v) or ".." in v:
            raise ValueError("must be an S3 bucket name: 3 to 63 lower-case letters, digits, '.' and '-', "
                             f"a letter or digit at each end, got {v!r}")
        return v

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not _PREFIX.fullmatch(v) or any(s in (".", "..") for s in v.split("/")):
            raise ValueError("must be folders of letters, digits and !_.*'()- each ending in '/', such as "
                             f"lab-a/etcd/ (no leading '/', no '.' or '..' folder), got {v!r}")
        return v

    @field_validator("ca_bundle")
    @classmethod
    def _ca_bundle(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return None
        blocks = list(_PEM.finditer(v))
        kinds = {m.group(1) for m in blocks}
        if any("PRIVATE KEY" in kind for kind in kinds):
            raise ValueError("holds a private key: only the CA's certificates belong here (remove the key from the "
                             "stack's config and its history)")
        if not blocks or kinds != {"CERTIFICATE"}:
            found = ", ".join(sorted(kinds)) or "no PEM block"
            raise ValueError(f"must be PEM certificates (-----BEGIN CERTIFICATE----- ...), found {found}")
        for number, block in enumerate(blocks, start=1):
            try:
                ssl.create_default_context(cadata=block.group(0))
            except (ssl.SSLError, ValueError) as exc:
                raise ValueError(f"certificate {number} of {len(blocks)} does not parse: {exc}") from None
        if urlsplit(info.data.get("endpoint", "https:")).scheme == "http":
            raise ValueError("is set but the endpoint is http: no TLS, nothing to verify")
        return "".join(block.group(0) + "\n" for block in blocks)

    @field_validator("addressing")
    @classmethod
    def _addressing(cls, v: str, info: ValidationInfo) -> str:
        host = urlsplit(info.data.get("endpoint", "")).hostname or ""
        bucket = info.data.get("bucket", "")
        if v == "virtual" and (host == "localhost" or _HOST.fullmatch(host) and _is_address(host)):
            raise ValueError(f"virtual puts the bucket in the host name ({bucket}.{host}): the endpoint needs a DNS "
                             "name, not an address or localhost; use path")
        if v == "virtual" and "." in bucket and urlsplit(info.data.get("endpoint", "")).scheme == "https":
            raise ValueError(f"virtual with a bucket name holding '.' ({bucket}) fails TLS: the server's wildcard "
                             "certificate covers one label (AWS's virtual hosting docs); use path or a name without '.'")
        return v

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not _REGION.fullmatch(v):
            raise ValueError(f"must be a region name of lower-case letters, digits and '-', such as us-east-1, got {v!r}")
        return v


def s3_secret_problems(s3: EtcdBackupS3Config | None, enabled: bool, secrets: frozenset[str]) -> Problems:
    """The credentials and the encryption key: all three with etcdBackup.s3, none without it."""
    if s3 is not None and enabled:
        return [(key, f"etcdBackup.s3 needs it as a secret: `pulumi config set --secret gpu-cluster:{key}`"
                      + (" (e.g. `openssl rand -base64 32`; keep a copy off the cluster: without it no snapshot "
                         "in the bucket can be read)" if key == ENCRYPTION_KEY else ""))
                for key in SECRETS if key not in secrets]
    return [(key, "is set but etcdBackup.s3 is not (or etcdBackup.enabled is false): nothing would use it")
            for key in SECRETS if key in secrets]


def single_copy_warning(enabled: bool, s3: EtcdBackupS3Config | None, control_planes: list[str],
                        shared_copy: bool = True) -> str | None:
    """render's warning for one control plane without etcdBackup.s3: every copy of etcd is on that
    host (the shared copy too: its NFS export is served by the same host), so one lost disk loses
    the cluster."""
    if len(control_planes) != 1 or (enabled and s3 is not None):
        return None
    only = control_planes[0]
    shared = f" (the NFS shared copy is served by {only} too, so it is not a copy)" if shared_copy else ""
    kept = "etcdBackup is off: no snapshot is taken at all" if not enabled else f"every etcd snapshot stays on {only}{shared}"
    return (f"one control plane ({only}) and no off-host copy of etcd: {kept}; losing that host's disk loses every "
            "object of the cluster. Set etcdBackup.s3 (docs/operations/etcd-backup.md#off-the-host-an-s3-bucket)")
