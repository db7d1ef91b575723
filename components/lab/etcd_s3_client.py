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

Large snapshots: an encrypted snapshot over one part (PART_BYTES) goes up as a multipart upload
(docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html: one PUT at most 5 GiB, parts 5 MiB to 5 GiB,
at most 10,000 parts), read from disk part by part (never the whole file in memory), each part's
payload hashed and signed like a single PUT (a pass over the part before it is sent: no
UNSIGNED-PAYLOAD, so a part changed on the way is refused by S3). Any failure, or SIGTERM/SIGINT/SIGHUP,
aborts the upload (AbortMultipartUpload) so that no parts stay billed; a failed abort is said, with
the lifecycle rule that cleans them up.

TLS: with caBundle (PEM) its certificates are the only trust anchors (a private CA); without it the
system store. Addressing: path-style <endpoint>/<bucket>/<key> (MinIO, Ceph RGW, Garage) or
virtual-hosted <bucket>.<endpoint host>/<key> (AWS's preferred form). A redirect (a bucket in another
region) is reported, never followed.

Config: a JSON file, root only (GPU_CLUSTER_ETCD_S3_CONFIG, default /etc/gpu-cluster/etcd-backup-s3.json):
endpoint, bucket, prefix, region, node, retain, retainDays, accessKeyId, secretAccessKey, encryptionKey,
caBundle, addressing; partBytes only in tests (the program never writes it: real S3 refuses parts under 5 MiB).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import io
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import IO, Any
from xml.sax.saxutils import escape

CONFIG = "/etc/gpu-cluster/etcd-backup-s3.json"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# A part, and the size above which an upload is multipart. Fixed, not a setting: 64 MiB is within every
# S3-compatible server's part limits (5 MiB..5 GiB; R2 and Ceph the same), a failed part costs little to
# send again, and etcd's largest quota (8 GiB) is 128 parts. Grown for a file over 10,000 parts.
PART_BYTES = 64 * 1024**2
MAX_PARTS = 10_000
MAX_OBJECT_BYTES = 5 * 1024**4  # S3's largest object
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


def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """With a bundle its certificates are the only trust anchors (create_default_context loads the
    system store only when given no cadata); hostname checking stays on."""
    return ssl.create_default_context(cadata=ca_bundle) if ca_bundle else ssl.create_default_context()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect (S3's 301 or 307: the bucket lives in another region or behind another endpoint)
    is an error to read, not to follow: the followed request would carry this one's signature and
    Host header to a server the config does not name."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Bucket:
    def __init__(self, cfg: Mapping[str, Any]):
        self.cfg = cfg
        self.endpoint = urllib.parse.urlsplit(cfg["endpoint"])
        self.bucket, self.prefix = cfg["bucket"], cfg["prefix"]
        self.virtual = cfg.get("addressing", "path") == "virtual"
        self.tls = tls_context(cfg.get("caBundle")) if self.endpoint.scheme == "https" else None
        self.opener = urllib.request.build_opener(
            _NoRedirect(), *([urllib.request.HTTPSHandler(context=self.tls)] if self.tls else []))

    def address(self, key: str) -> tuple[str, str]:
        """(host, path not yet URI-encoded): path-style <endpoint>/<bucket>/<key>, or virtual-hosted
        <bucket>.<endpoint host>/<key>."""
        if self.virtual:
            return f"{self.bucket}.{self.endpoint.netloc}", f"/{key}"
        return self.endpoint.netloc, f"/{self.bucket}/{key}" if key else f"/{self.bucket}"

    def signed(self, method: str, key: str, query: Mapping[str, str], payload_hash: str, length: int | None,
               now: datetime.datetime) -> tuple[str, dict[str, str]]:
        """The URL and the signed headers of one request."""
        host, path = self.address(key)
        headers = {"host": host, "x-amz-date": now.strftime("%Y%m%dT%H%M%SZ"), "x-amz-content-sha256": payload_hash}
        if length is not None:
            headers["content-length"] = str(length)
        headers["authorization"] = authorization(method, path, query, headers, payload_hash, now, self.cfg["region"],
                                                 self.cfg["accessKeyId"], self.cfg["secretAccessKey"])
        url = urllib.parse.urlunsplit((self.endpoint.scheme, host, _quote(path, "/"),
                                       "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items())), ""))
        return url, headers

    def send(self, method: str, key: str = "", query: Mapping[str, str] | None = None,
             body: IO[bytes] | io.RawIOBase | None = None, length: int = 0, payload_hash: str = EMPTY_SHA256,
             out: IO[bytes] | None = None) -> tuple[bytes, Mapping[str, str]]:
        """One signed request; the response body (or written to `out`) and headers."""
        now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - Ubuntu 22.04's Python 3.10
        url, headers = self.signed(method, key, dict(query or {}), payload_hash,
                                   length if body is not None else None, now)
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        where = f"{method} {self.address(key)[1]}" + ("?" + "&".join(sorted(query)) if query else "")
        try:
            with self.opener.open(req, timeout=TIMEOUT) as resp:
                if out is None:
                    return bytes(resp.read()), resp.headers
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                return b"", resp.headers
        except urllib.error.HTTPError as exc:
            moved = (f" (redirected to {exc.headers.get('Location') or 'another endpoint'}: check endpoint, region and "
                     "addressing)") if 300 <= exc.code < 400 else ""
            raise S3Error(f"{where}: HTTP {exc.code} {_s3_error(exc.read())}{moved}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise S3Error(f"{where}: {exc}") from None

    def request(self, method: str, key: str = "", query: Mapping[str, str] | None = None,
                body: IO[bytes] | io.RawIOBase | None = None, length: int = 0, payload_hash: str = EMPTY_SHA256,
                out: IO[bytes] | None = None) -> bytes:
        return self.send(method, key, query, body, length, payload_hash, out)[0]

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


class _Part(io.RawIOBase):
    """Bytes [offset, offset + length) of an open file, read from disk block by block as http.client sends them."""

    def __init__(self, f: IO[bytes], offset: int, length: int):
        super().__init__()
        self.f, self.left = f, length
        f.seek(offset)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self.f.read(size)
        self.left -= len(data)
        return data


def _sha256(f: IO[bytes], offset: int, length: int) -> str:
    digest, part = hashlib.sha256(), _Part(f, offset, length)
    while chunk := part.read(1 << 20):
        digest.update(chunk)
    if part.left:
        raise S3Error(f"{f.name} ended {part.left} bytes early")
    return digest.hexdigest()


def _root(xml: bytes, what: str) -> ET.Element:
    try:
        return ET.fromstring(xml)
    except ET.ParseError:
        raise S3Error(f"{what}: the answer is not XML: {xml[:200]!r}") from None


def _text(xml: bytes, tag: str, what: str) -> str:
    """A tag's text with or without S3's namespace (AWS sends it, some servers do not)."""
    for item in _root(xml, what).iter():
        if item.tag.rsplit("}", 1)[-1] == tag:
            return item.text or ""
    return ""


def put_multipart(s3: Bucket, key: str, f: IO[bytes], size: int, part_bytes: int) -> int:
    """CreateMultipartUpload, UploadPart each part (payload signed), CompleteMultipartUpload; on any
    failure or signal AbortMultipartUpload, so no parts are left. The number of parts."""
    part_bytes = max(part_bytes, -(-size // MAX_PARTS))
    upload_id = _text(s3.request("POST", key, query={"uploads": ""}), "UploadId", f"POST {key}?uploads")
    if not upload_id:
        raise S3Error(f"POST {key}?uploads: the answer has no UploadId")
    try:
        parts: list[tuple[int, str]] = []
        for number, offset in enumerate(range(0, size, part_bytes), start=1):
            length = min(part_bytes, size - offset)
            digest = _sha256(f, offset, length)
            _, headers = s3.send("PUT", key, query={"partNumber": str(number), "uploadId": upload_id},
                                 body=_Part(f, offset, length), length=length, payload_hash=digest)
            if not headers.get("ETag"):
                raise S3Error(f"PUT {key} part {number}: the answer has no ETag")
            parts.append((number, headers["ETag"]))
        done = ("<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag></Part>" for n, etag in parts)
            + "</CompleteMultipartUpload>").encode()
        answer = s3.request("POST", key, query={"uploadId": upload_id}, body=io.BytesIO(done), length=len(done),
                            payload_hash=hashlib.sha256(done).hexdigest())
        # S3 may answer 200 and an <Error> body when it fails while assembling (CompleteMultipartUpload docs).
        if _root(answer, f"POST {key}?uploadId").tag.rsplit("}", 1)[-1] != "CompleteMultipartUploadResult":
            raise S3Error(f"POST {key}?uploadId: {_s3_error(answer)}")
        return len(parts)
    except BaseException:
        try:
            s3.request("DELETE", key, query={"uploadId": upload_id})
            print(f"aborted the multipart upload of {key}", file=sys.stderr)
        except S3Error as exc:
            print(f"gpu-cluster-etcd-s3: could not abort the multipart upload {upload_id} of {key} ({exc}); its parts "
                  "stay billed until a lifecycle rule AbortIncompleteMultipartUpload removes them", file=sys.stderr)
        raise


def put_file(s3: Bucket, key: str, path: str, part_bytes: int = PART_BYTES) -> str:
    """One PUT up to one part's size, else a multipart upload; what was done, for the log."""
    size = os.path.getsize(path)
    if size > MAX_OBJECT_BYTES:
        raise S3Error(f"{path} is {size} bytes, over S3's largest object ({MAX_OBJECT_BYTES})")
    with open(path, "rb") as f:
        if size > part_bytes:
            return f"{size} bytes in {put_multipart(s3, key, f, size, part_bytes)} parts"
        digest = _sha256(f, 0, size)
        f.seek(0)
        s3.request("PUT", key, body=f, length=size, payload_hash=digest)
    return f"{size} bytes"


def upload(cfg: Mapping[str, Any], snapshot: str, name: str | None = None) -> None:
    """SNAPSHOT encrypted as <prefix>`name` (default: its own name and .enc), then the retention."""
    s3 = Bucket(cfg)
    name = name or os.path.basename(snapshot) + ".enc"
    if not (own_pattern(cfg["node"]).fullmatch(name) or pre_upgrade_pattern(cfg["node"]).fullmatch(name)):
        raise S3Error(f"{snapshot} is not named etcd-{cfg['node']}-<UTC time>.db")
    part = os.path.join(os.path.dirname(snapshot), f".{name}.part")
    try:
        _openssl(cfg, "-salt", "-in", snapshot, "-out", part)
        sent = put_file(s3, s3.prefix + name, part, int(cfg.get("partBytes") or PART_BYTES))
    finally:
        if os.path.exists(part):
            os.unlink(part)
    print(f"uploaded s3://{s3.bucket}/{s3.prefix}{name} ({sent}, encrypted)")
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


def _stop(signum: int, _frame: object) -> None:
    """A signal ends the run through the `finally`s and excepts: the multipart upload is aborted."""
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    usage = ("usage: gpu-cluster-etcd-s3 upload SNAPSHOT | upload-pre-upgrade SNAPSHOT FROM TO | list | fetch KEY OUT"
             " | check")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
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
