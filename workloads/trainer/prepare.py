"""Download a dataset once onto the shared volume: `python -m trainer.prepare --dataset cifar10 --data-dir DIR`.

- the official files only, checked against their published MD5s: CIFAR-10's python archive from
  the University of Toronto; FashionMNIST's four idx files from Zalando Research's GitHub
  repository, then its S3 website (the mirror and MD5s torchvision's FashionMNIST lists);
- bounded: every attempt has a deadline (--timeout, for the whole file, not only per socket read)
  and each URL is tried --retries times with a doubling pause; then the next mirror;
- atomic: everything is fetched, verified and read back with trainer.datasets in a temp directory
  inside DIR, then renamed into place (`cifar-10-batches-py/`, `fashion-mnist/`), so a reader
  never sees half a dataset; concurrent runs (one per node) serialise on a lock file;
- idempotent: a dataset already in place that trainer.datasets reads, and whose files match the
  `.prepared.json` manifest written with it, is left alone without any request.

Exit codes: 0 ready; 1 the download or its verification failed after every retry and mirror;
2 bad arguments (argparse).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import http.client
import json
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from trainer import datasets

MANIFEST = ".prepared.json"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Source:
    target: str  # the directory trainer.datasets reads, under --data-dir
    mirrors: tuple[str, ...]  # base URLs, tried in order
    files: tuple[tuple[str, str], ...]  # (file name, md5)
    archive: bool  # a .tar.gz holding `target`, or files placed into `target` as they are


SOURCES = {
    "cifar10": Source(
        target=datasets.CIFAR10_DIR,
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
        files=(("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),),
        archive=True,
    ),
    "fashion-mnist": Source(
        target=datasets.FASHION_MNIST_DIR,
        mirrors=("https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
                 "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"),
        files=(("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
               ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
               ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
               ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310")),
        archive=False,
    ),
}


class PrepareError(Exception):
    pass


def say(event: str, **fields: object) -> None:
    print("prepare: " + " ".join([f"event={event}", *(f"{k}={v}" for k, v in fields.items())]), flush=True)


def md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)  # the published checksums are MD5
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(url: str, dest: Path, md5: str, timeout: float) -> None:
    """One attempt: stream to dest within `timeout` seconds in all, then check the MD5."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, headers={"User-Agent": "gpu-cluster-trainer-prepare"})
    with urllib.request.urlopen(request, timeout=timeout) as response, open(dest, "wb") as out:
        while chunk := response.read(CHUNK):
            out.write(chunk)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: not complete after {timeout:g} s")
    found = md5_of(dest)
    if found != md5:
        raise PrepareError(f"{url}: md5 {found}, {md5} expected")


def download(source: Source, name: str, md5: str, dest: Path, args: argparse.Namespace) -> None:
    mirrors = (args.base_url,) if args.base_url else source.mirrors
    errors = []
    for base in mirrors:
        url = base.rstrip("/") + "/" + name
        for attempt in range(1, args.retries + 1):
            try:
                fetch(url, dest, md5, args.timeout)
                say("downloaded", url=url, bytes=dest.stat().st_size, md5=md5)
                return
            # URLError, HTTPError and timeouts are OSErrors; a short body is an IncompleteRead
            except (OSError, http.client.HTTPException, PrepareError) as exc:
                errors.append(f"{url} (attempt {attempt}): {exc}")
                say("retry" if attempt < args.retries else "failed", url=url, attempt=attempt,
                    error=type(exc).__name__)
                if attempt < args.retries:
                    time.sleep(args.retry_delay * 2 ** (attempt - 1))
    raise PrepareError(f"{name}: every attempt failed:\n  " + "\n  ".join(errors))


def _safe_extract(archive: Path, into: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            target = (into / member.name).resolve()
            if not target.is_relative_to(into.resolve()) or not (member.isfile() or member.isdir()):
                raise PrepareError(f"{archive}: refuses member {member.name!r} (outside the target or not a plain file)")
        tar.extractall(into, filter="data")


def file_md5s(directory: Path) -> dict[str, str]:
    return {p.name: md5_of(p) for p in sorted(directory.iterdir()) if p.is_file() and p.name != MANIFEST}


def is_ready(data_dir: Path, dataset: str) -> bool:
    """The dataset is in place, reads back, and matches the manifest written when it was placed."""
    target = data_dir / SOURCES[dataset].target
    if not target.is_dir():
        return False
    try:
        datasets.read(dataset, data_dir)
    except datasets.DatasetError as exc:
        say("invalid", path=target, error=str(exc).replace(" ", "_")[:200])
        return False
    manifest = target / MANIFEST
    if not manifest.is_file():
        return True  # placed by someone else; it reads back, so use it
    try:
        recorded = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(recorded == file_md5s(target))


@contextlib.contextmanager
def locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # one preparer per dataset at a time (nodes sharing the volume)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def prepare(args: argparse.Namespace) -> Path:
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    source = SOURCES[args.dataset]
    target = data_dir / source.target
    with locked(data_dir / f".prepare-{args.dataset}.lock"):
        if is_ready(data_dir, args.dataset):
            say("present", dataset=args.dataset, path=target)
            return target
        # Temp dir in DIR itself: the final rename stays on one filesystem (atomic).
        work = Path(tempfile.mkdtemp(prefix=f".prepare-{args.dataset}-", dir=data_dir))
        try:
            staged = work / "out" / source.target
            staged.mkdir(parents=True)
            for name, md5 in source.files:
                dest = work / name
                download(source, name, md5, dest, args)
                if source.archive:
                    _safe_extract(dest, work / "out")
                    dest.unlink()
                else:
                    dest.replace(staged / name)
            try:
                datasets.read(args.dataset, work / "out")
            except datasets.DatasetError as exc:
                raise PrepareError(f"downloaded files verified but do not read back: {exc}") from exc
            base_urls = [args.base_url] if args.base_url else list(source.mirrors)
            (staged / MANIFEST).write_text(json.dumps({"dataset": args.dataset, "mirrors": base_urls,
                                                       "files": file_md5s(staged)}, indent=1) + "\n")
            if target.exists():  # an invalid leftover: move it aside first (rename cannot replace a dir)
                target.replace(work / "stale")
            staged.replace(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    say("ready", dataset=args.dataset, path=target)
    return target


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.prepare", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=sorted(SOURCES), required=True)
    p.add_argument("--data-dir", required=True, help="the trainer's --data-dir (the shared volume)")
    p.add_argument("--base-url", help="fetch the same file names from here instead of the official mirrors")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per attempt, whole file")
    p.add_argument("--retries", type=int, default=3, help="attempts per mirror")
    p.add_argument("--retry-delay", type=float, default=2.0, help="seconds before the 2nd attempt, doubling")
    args = p.parse_args(argv)
    if args.timeout <= 0 or args.retries < 1 or args.retry_delay < 0:
        p.error("--timeout must be > 0, --retries >= 1, --retry-delay >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        prepare(args)
    except (PrepareError, OSError, tarfile.TarError) as exc:
        print(f"prepare: event=fatal exit=1 reason={str(exc)!r}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
