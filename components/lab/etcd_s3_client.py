#!/usr/bin/env python3
"""gpu-cluster-etcd-s3: the etcd snapshots' off-host copies in an S3-compatible bucket (etcdBackup.s3).

Installed on every control plane as /usr/local/sbin/gpu-cluster-etcd-s3 (components/lab/etcd_backup_s3.py)
and run as root by the snapshot script; a person runs `list` and `fetch` to restore (docs/operations/
etcd-backup.md). Python 3 standard library only (Ubuntu's python3, 3.10 on 22.04) plus openssl:

  upload SNAPSHOT   encrypt SNAPSHOT, put it as <prefix><name>.enc, then apply the retention
  upload-pre-upgrade SNAPSHOT FROM TO
                    the same for the snapshot taken before a Kubernetes upgrade (kubeadm_upgrade_apply.sh),
                    put as <prefix>etcd-<node>-pre-upgrade-<UTC time>-v<FROM>-to-v<TO>.db.enc
  list              every snapshot under the prefix (all members): key, size, time
  fetch KEY OUT     download KEY (with or without the prefix), decrypt it into OUT (0600)
  check             the bucket answers a listing with these credentials

Why not curl --aws-sigv4: the hosts' curl (7.81 on Ubuntu 22.04) signs an upload's payload as empty and
sends no x-amz-content-sha256 (curl issue 8810; fixed in 7.87), which S3 refuses. Why not awscli: a
package on every control plane for four requests. Here the requests are signed with SigV4 as AWS
documents it (docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html), the payload
hash signed too; the secret never appears on a command line.

Encryption: `openssl enc -aes-256-cbc -pbkdf2 -iter 600000 -md sha256 -salt`, the passphrase from the
environment (never argv). CBC has no MAC: a changed object decrypts to garbage that etcd's own
snapshot hash (checked by `etcdutl snapshot status` and `restore`) refuses.

Retention touches only this member's own names, <prefix>etcd-<node>-<UTC time>.db.enc: the newest
`retain` are kept, and with `retainDays` older ones go too, never the newest. Its pre-upgrade objects
are not counted against `retain` (scheduled snapshots would push one out within a day; there are a
few a year): they go only by age, with `retainDays` (a snapshot holds every Secret, so that is also
how long an old Secret may stay in the bucket), never the newest of them. Nothing else under the
prefix (other members', other files) is deleted.

Config: a JSON file, root only (GPU_CLUSTER_ETCD_S3_CONFIG, default /etc/gpu-cluster/etcd-backup-s3.json):
endpoint, bucket, prefix, region, node, retain, retainDays, accessKeyId, secretAccessKey, encryptionKey.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import IO, Any

CONFIG = "/etc/gpu-cluster/etcd-backup-s3.json"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_PUT_BYTES = 5 * 1024**3  # S3's limit for one PUT; etcd's default quota is 2 GiB
TIMEOUT = 300  # seconds per request without progress
MAX_PAGES = 1000  # listing pages of 1000 keys each
OPENSSL_ENC = ["-aes-256-cbc", "-pbkdf2", "-iter", "600000", "-md", "sha256"]
KEY_ENV = "GPU_CLUSTER_ETCD_BACKUP_KEY"
_UNRESERVED = "-_.~"
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3Error(Exception):
    pass


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _quote(text: str, safe: str = "") -> str:
    return urllib.parse.quote(text, safe=_UNRESERVED + safe)


def authorization(method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str], payload_hash: str,
                  when: datetime.datetime, region: str, key_id: str, secret: str) -> str:
    """The Authorization header of SigV4 for S3; `headers` are signed (they must hold host,
    x-amz-date and x-amz-content-sha256), `path` not yet URI-encoded."""
    day = when.strftime("%Y%m%d")
    scope = f"{day}/{region}/s3/aws4_request"
    names = sorted(h.lower() for h in headers)
    values = {h.lower(): " ".join(str(v).split()) for h, v in headers.items()}
    canonical = "\n".join([
        method, _quote(path, "/"),
        "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items())),
        "".join(f"{n}:{values[n]}\n" for n in names), ";".join(names), payload_hash,
    ])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", when.strftime("%Y%m%dT%H%M%SZ"), scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"


class Bucket:
    def __init__(self, cfg: Mapping[str, Any]):
        self.cfg = cfg
        self.endpoint = urllib.parse.urlsplit(cfg["endpoint"])
        self.bucket, self.prefix = cfg["bucket"], cfg["prefix"]

    def request(self, method: str, key: str = "", query: Mapping[str, str] | None = None,
                body: IO[bytes] | None = None, length: int = 0, payload_hash: str = EMPTY_SHA256,
                out: IO[bytes] | None = None) -> bytes:
        """One signed request (path-style: /<bucket>/<key>); the response body, or written to `out`."""
        query = dict(query or {})
        path = f"/{self.bucket}/{key}" if key else f"/{self.bucket}"
        now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - Ubuntu 22.04's Python 3.10
        headers = {"host": self.endpoint.netloc, "x-amz-date": now.strftime("%Y%m%dT%H%M%SZ"),
                   "x-amz-content-sha256": payload_hash}
        if body is not None:
            headers["content-length"] = str(length)
        headers["authorization"] = authorization(method, path, query, headers, payload_hash, now, self.cfg["region"],
                                                 self.cfg["accessKeyId"], self.cfg["secretAccessKey"])
        url = urllib.parse.urlunsplit((self.endpoint.scheme, self.endpoint.netloc, _quote(path, "/"),
                                       "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items())), ""))
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:  # noqa: S310 - http(s) only (config)
                if out is None:
                    return bytes(resp.read())
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                return b""
        except urllib.error.HTTPError as exc:
            raise S3Error(f"{method} {path}: HTTP {exc.code} {_s3_error(exc.read())}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise S3Error(f"{method} {path}: {exc}") from None

    def keys(self, limit: int | None = None) -> list[tuple[str, int, str]]:
        """(key, size, last modified) of every object under the prefix, ListObjectsV2 page by page."""
        found: list[tuple[str, int, str]] = []
        query = {"list-type": "2", "prefix": self.prefix}
        if limit:
            query["max-keys"] = str(limit)
        for _ in range(MAX_PAGES):
            root = ET.fromstring(self.request("GET", query=query))
            for item in root.iter(f"{_NS}Contents"):
                found.append((item.findtext(f"{_NS}Key", ""), int(item.findtext(f"{_NS}Size", "0")),
                              item.findtext(f"{_NS}LastModified", "")))
            token = root.findtext(f"{_NS}NextContinuationToken")
            if limit or root.findtext(f"{_NS}IsTruncated") != "true" or not token:
                return found
            query["continuation-token"] = token
        raise S3Error(f"more than {MAX_PAGES} pages of keys under {self.prefix}")


def _s3_error(body: bytes) -> str:
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return body[:200].decode(errors="replace")
    return f"{root.findtext('Code', '')}: {root.findtext('Message', '')}".strip(": ")


def _openssl(cfg: Mapping[str, Any], *args: str) -> None:
    env = {**os.environ, KEY_ENV: cfg["encryptionKey"]}
    result = subprocess.run(["openssl", "enc", *OPENSSL_ENC, *args, "-pass", f"env:{KEY_ENV}"], env=env,
                            capture_output=True, text=True, timeout=3600, check=False)
    if result.returncode != 0:
        raise S3Error(f"openssl enc {' '.join(args[:1])} failed: {result.stderr.strip()[:300]}")


_TIME = "([0-9]{8}T[0-9]{6}Z)"
_VERSION = r"[0-9]+\.[0-9]+\.[0-9]+"


def own_pattern(node: str) -> re.Pattern[str]:
    """This member's scheduled snapshots (host_steps/etcd/snapshot.sh): group 1 the time."""
    return re.compile(rf"etcd-{re.escape(node)}-{_TIME}\.db\.enc")


def pre_upgrade_pattern(node: str) -> re.Pattern[str]:
    """This member's snapshots taken before an upgrade: group 1 the time. Never one of own_pattern's
    (a node name has no dot)."""
    return re.compile(rf"etcd-{re.escape(node)}-pre-upgrade-{_TIME}-v{_VERSION}-to-v{_VERSION}\.db\.enc")


def _older(names: list[str], pattern: re.Pattern[str], cutoff: datetime.datetime) -> list[str]:
    """Of `names` (sorted, each a match of `pattern`), those taken before `cutoff`, never the newest."""
    old = []
    for name in names[:-1]:
        match = pattern.fullmatch(name)
        assert match is not None
        if datetime.datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=cutoff.tzinfo) < cutoff:
            old.append(name)
    return old


def expired(names: list[str], node: str, retain: int, retain_days: int | None, now: datetime.datetime) -> list[str]:
    """This member's names (without the prefix) that the retention deletes, oldest first."""
    pattern, before = own_pattern(node), pre_upgrade_pattern(node)
    own = sorted(n for n in names if pattern.fullmatch(n))
    doomed = set(own[:max(len(own) - retain, 0)])
    if retain_days is not None:
        cutoff = now - datetime.timedelta(days=retain_days)
        doomed.update(_older(own, pattern, cutoff))
        doomed.update(_older(sorted(n for n in names if before.fullmatch(n)), before, cutoff))
    return sorted(doomed)


def upload(cfg: Mapping[str, Any], snapshot: str, name: str | None = None) -> None:
    """SNAPSHOT encrypted as <prefix>`name` (default: its own name and .enc), then the retention."""
    s3 = Bucket(cfg)
    name = name or os.path.basename(snapshot) + ".enc"
    if not (own_pattern(cfg["node"]).fullmatch(name) or pre_upgrade_pattern(cfg["node"]).fullmatch(name)):
        raise S3Error(f"{snapshot} is not named etcd-{cfg['node']}-<UTC time>.db")
    part = os.path.join(os.path.dirname(snapshot), f".{name}.part")
    try:
        _openssl(cfg, "-salt", "-in", snapshot, "-out", part)
        size = os.path.getsize(part)
        if size > MAX_PUT_BYTES:
            raise S3Error(f"{name} is {size} bytes, over S3's {MAX_PUT_BYTES} for one upload")
        digest = hashlib.sha256()
        with open(part, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        with open(part, "rb") as f:
            s3.request("PUT", s3.prefix + name, body=f, length=size, payload_hash=digest.hexdigest())
    finally:
        if os.path.exists(part):
            os.unlink(part)
    print(f"uploaded s3://{s3.bucket}/{s3.prefix}{name} ({size} bytes, encrypted)")
    names = [key[len(s3.prefix):] for key, _, _ in s3.keys()]
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017
    for old in expired(names, cfg["node"], int(cfg["retain"]), cfg.get("retainDays"), now):
        s3.request("DELETE", s3.prefix + old)
        print(f"deleted s3://{s3.bucket}/{s3.prefix}{old}")


def upload_pre_upgrade(cfg: Mapping[str, Any], snapshot: str, have: str, want: str) -> None:
    for version in (have, want):
        if not re.fullmatch(_VERSION, version):
            raise S3Error(f"{version!r} is not a Kubernetes version such as 1.34.2")
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017
    upload(cfg, snapshot, f"etcd-{cfg['node']}-pre-upgrade-{now:%Y%m%dT%H%M%SZ}-v{have}-to-v{want}.db.enc")


def fetch(cfg: Mapping[str, Any], key: str, out: str) -> None:
    s3 = Bucket(cfg)
    key = key if key.startswith(s3.prefix) else s3.prefix + key
    part = f"{out}.enc.part"
    old = os.umask(0o077)
    try:
        with open(part, "wb") as f:
            s3.request("GET", key, out=f)
        _openssl(cfg, "-d", "-in", part, "-out", out)
    finally:
        os.umask(old)
        if os.path.exists(part):
            os.unlink(part)
    print(f"fetched s3://{s3.bucket}/{key} into {out} (decrypted)")


def main(argv: list[str]) -> int:
    usage = ("usage: gpu-cluster-etcd-s3 upload SNAPSHOT | upload-pre-upgrade SNAPSHOT FROM TO | list | fetch KEY OUT"
             " | check")
    with open(os.environ.get("GPU_CLUSTER_ETCD_S3_CONFIG", CONFIG), encoding="utf-8") as f:
        cfg = json.load(f)
    try:
        if argv[:1] == ["upload"] and len(argv) == 2:
            upload(cfg, argv[1])
        elif argv[:1] == ["upload-pre-upgrade"] and len(argv) == 4:
            upload_pre_upgrade(cfg, *argv[1:])
        elif argv == ["list"]:
            for key, size, modified in sorted(Bucket(cfg).keys()):
                print(f"{key}\t{size}\t{modified}")
        elif argv[:1] == ["fetch"] and len(argv) == 3:
            fetch(cfg, argv[1], argv[2])
        elif argv == ["check"]:
            Bucket(cfg).keys(limit=1)
            print(f"s3://{cfg['bucket']}/{cfg['prefix']} answers at {cfg['endpoint']}")
        else:
            print(usage, file=sys.stderr)
            return 2
    except S3Error as exc:
        print(f"gpu-cluster-etcd-s3: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
