"""Readers for the two standard datasets the trainer knows, in their official distributions, without
torchvision (and without numpy: the workload needs only torch).

- CIFAR-10, "python version": `<data-dir>/cifar-10-batches-py/data_batch_1..5` and `test_batch`,
  pickles of dicts with b"data" (a uint8 array [N, 3072], channel-major 32x32, N <= 10,000) and
  b"labels" (N ints in 0..9); `batches.meta` is checked when present. Read by cifar_pickle, which
  allows only numpy's array globals, as stand-ins that check their arguments (Python 2 originals
  and Python 3 re-saves, protocols 2 to 5), so a file on the shared volume cannot run code.
- FashionMNIST, idx: `<data-dir>/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`
  (gzip'd, or the same names without .gz), unsigned byte, at most 60,000 images of 28 x 28; read
  by idx_format, never more than the header declares (plus one byte, to see trailing data).

Every size a file declares is checked against the bytes it holds before anything is allocated
from it, and every failure is a DatasetError naming the file: the trainer exits 3 on it.

Images stay uint8 [N, C, H, W]; the trainer converts and normalises each batch on the device with
MEAN/STD (dataset statistics of the training split), after augmentation.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from io import BufferedIOBase
from pathlib import Path
from typing import Any

from trainer import cifar_pickle
from trainer.idx_format import IdxError, read_data, read_header

CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST = "test_batch"
CIFAR10_META = "batches.meta"
FASHION_MNIST_DIR = "fashion-mnist"

# Per-channel mean and standard deviation of each training split, pixels scaled to [0, 1].
MEAN = {"cifar10": (0.4914, 0.4822, 0.4465), "fashion-mnist": (0.2860,)}
STD = {"cifar10": (0.2470, 0.2435, 0.2616), "fashion-mnist": (0.3530,)}
CLASSES = 10


class DatasetError(Exception):
    """The files are missing or not in the expected format (the trainer exits with code 3)."""


@dataclass
class ImageSplits:
    """uint8 images [N, C, H, W] and int64 labels [N] of both splits."""

    name: str
    train_images: Any
    train_labels: Any
    test_images: Any
    test_labels: Any

    @property
    def mean(self) -> tuple[float, ...]:
        return MEAN[self.name]

    @property
    def std(self) -> tuple[float, ...]:
        return STD[self.name]


# --- reading a file --------------------------------------------------------------------------------


@contextlib.contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    """Any failure while reading `path` becomes a DatasetError naming it (the trainer exits 3)."""
    try:
        yield
    except DatasetError:
        raise
    except cifar_pickle.PickleRefused as exc:
        raise DatasetError(f"{path}: {exc}") from exc
    except IdxError as exc:
        raise DatasetError(f"{path}: {exc}") from exc
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError; EOFError: truncated
        raise DatasetError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc
    except Exception as exc:  # truncated, foreign or hostile: all a data problem, never a traceback
        raise DatasetError(f"{path}: not {what} ({type(exc).__name__}: {exc})") from exc


def _read_at_most(path: Path, limit: int, what: str) -> bytes:
    """The file's bytes, refused unread when it is larger than `limit`."""
    size = path.stat().st_size
    if size > limit:
        raise DatasetError(f"{path}: {size} bytes, more than {what} takes ({limit})")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:  # grew since stat
        raise DatasetError(f"{path}: more than {limit} bytes, more than {what} takes")
    return data


# --- CIFAR-10 -------------------------------------------------------------------------------------

CIFAR10_PIXELS = 3 * 32 * 32
CIFAR10_BATCH_IMAGES = 10_000  # each of the official 6 batch files holds this many
# Largest pickle of a batch: protocol 2 writes the pixels as UTF-8 of a latin-1 str (up to 2 bytes
# each), plus labels and file names. Larger files are refused before they are read.
CIFAR10_MAX_BATCH_BYTES = 64 * 1024 * 1024
CIFAR10_MAX_META_BYTES = 64 * 1024


def _load_cifar_pickle(path: Path, limit: int) -> dict[str, Any]:
    if not path.is_file():
        raise DatasetError(f"{path}: missing (python -m trainer.prepare --dataset cifar10 downloads it)")
    with _reading(path, "a CIFAR-10 python batch"):
        blob = cifar_pickle.load(_read_at_most(path, limit, "a CIFAR-10 python batch"))
        if not isinstance(blob, dict):
            raise DatasetError(f"{path}: not a CIFAR-10 python batch (a {type(blob).__name__}, not a dict)")
        keys = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in blob.items()}
        if not all(isinstance(k, str) for k in keys):
            raise DatasetError(f"{path}: not a CIFAR-10 python batch (its keys are not all strings)")
        return keys


def _label_values(labels: Any, n: int, path: Path) -> list[int]:
    if isinstance(labels, cifar_pickle.Array) and labels.shape is not None and len(labels.shape) == 1:
        values = list(labels.integers())
    elif isinstance(labels, list) and all(type(v) is int for v in labels):
        values = labels
    else:
        raise DatasetError(f"{path}: b'labels' must be a list of ints or a 1-D integer array")
    if len(values) != n:
        raise DatasetError(f"{path}: {n} images but {len(values)} labels")
    if values and (min(values) < 0 or max(values) >= CLASSES):
        raise DatasetError(f"{path}: labels must be in 0..{CLASSES - 1} (found {min(values)}..{max(values)})")
    return values


def _cifar_batch(path: Path) -> tuple[Any, Any]:
    with _reading(path, "a CIFAR-10 python batch"):
        return _cifar_tensors(path, _load_cifar_pickle(path, CIFAR10_MAX_BATCH_BYTES))


def _cifar_tensors(path: Path, blob: dict[str, Any]) -> tuple[Any, Any]:
    import torch

    data, labels = blob.get("data"), blob.get("labels")
    if not isinstance(data, cifar_pickle.Array) or data.shape is None or data.dtype is None or labels is None:
        raise DatasetError(f"{path}: needs b'data' (a uint8 array) and b'labels'")
    if data.dtype.code != "u1" or len(data.shape) != 2 or data.shape[1] != CIFAR10_PIXELS:
        raise DatasetError(f"{path}: b'data' must be uint8 [N, {CIFAR10_PIXELS}], got {data.dtype.code} {list(data.shape)}")
    if data.fortran:
        raise DatasetError(f"{path}: b'data' is stored in Fortran order; C order expected")
    n = data.shape[0]
    if n > CIFAR10_BATCH_IMAGES:
        raise DatasetError(f"{path}: {n} images, a CIFAR-10 batch holds at most {CIFAR10_BATCH_IMAGES}")
    targets = torch.tensor(_label_values(labels, n, path), dtype=torch.long)
    if not n:
        return torch.zeros(0, 3, 32, 32, dtype=torch.uint8), targets
    return torch.frombuffer(bytearray(data.raw), dtype=torch.uint8).view(n, 3, 32, 32), targets


def read_cifar10(data_dir: str | Path) -> ImageSplits:
    import torch

    root = Path(data_dir) / CIFAR10_DIR
    if not root.is_dir():
        raise DatasetError(f"{root}: missing (python -m trainer.prepare --dataset cifar10 --data-dir {data_dir})")
    meta_path = root / CIFAR10_META
    if meta_path.exists():
        meta = _load_cifar_pickle(meta_path, CIFAR10_MAX_META_BYTES)
        names = meta.get("label_names")
        if not isinstance(names, list) or len(names) != CLASSES:
            raise DatasetError(f"{meta_path}: label_names must list {CLASSES} classes")
        if meta.get("num_vis", CIFAR10_PIXELS) != CIFAR10_PIXELS:
            raise DatasetError(f"{meta_path}: num_vis {meta.get('num_vis')!r}, {CIFAR10_PIXELS} expected")
    train = [_cifar_batch(root / name) for name in CIFAR10_TRAIN]
    test_images, test_labels = _cifar_batch(root / CIFAR10_TEST)
    train_images = torch.cat([x for x, _ in train])
    train_labels = torch.cat([y for _, y in train])
    if len(train_images) == 0 or len(test_images) == 0:
        raise DatasetError(f"{root}: a split is empty")
    return ImageSplits("cifar10", train_images, train_labels, test_images, test_labels)


# --- FashionMNIST ---------------------------------------------------------------------------------

FASHION_MNIST_MAX_IMAGES = 60_000  # the training split; t10k holds 10,000
FASHION_MNIST_MAX_SIDE = 28


@contextlib.contextmanager
def _open_idx(root: Path, stem: str) -> Iterator[tuple[Path, BufferedIOBase]]:
    """The gzip'd file, or else the plain one, as a stream of its idx bytes."""
    for path in (root / f"{stem}.gz", root / stem):
        if path.is_file():
            with _reading(path, "an idx file"):
                with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
                    yield path, f
            return
    raise DatasetError(f"{root / stem}(.gz): missing (python -m trainer.prepare --dataset fashion-mnist)")


def _fashion_split(root: Path, prefix: str) -> tuple[Any, Any]:
    import torch

    with _open_idx(root, f"{prefix}-labels-idx1-ubyte") as (labels_path, f):
        (m,) = read_header(f, 1, (FASHION_MNIST_MAX_IMAGES,))
        labels = read_data(f, (m,))
        if max(labels) >= CLASSES:
            raise DatasetError(f"{labels_path}: labels must be in 0..{CLASSES - 1} (found {max(labels)})")
    with _open_idx(root, f"{prefix}-images-idx3-ubyte") as (images_path, f):
        n, rows, cols = read_header(f, 3, (FASHION_MNIST_MAX_IMAGES, FASHION_MNIST_MAX_SIDE, FASHION_MNIST_MAX_SIDE))
        if n != m:  # before reading the images
            raise DatasetError(f"{images_path}: {n} images but {labels_path.name} has {m} labels")
        images = read_data(f, (n, rows, cols))
    x = torch.frombuffer(bytearray(images), dtype=torch.uint8).view(n, 1, rows, cols)
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return x, y


def read_fashion_mnist(data_dir: str | Path) -> ImageSplits:
    root = Path(data_dir) / FASHION_MNIST_DIR
    if not root.is_dir():
        raise DatasetError(f"{root}: missing (python -m trainer.prepare --dataset fashion-mnist --data-dir {data_dir})")
    train = _fashion_split(root, "train")
    test = _fashion_split(root, "t10k")
    if train[0].shape[1:] != test[0].shape[1:]:
        raise DatasetError(f"{root}: train images are {list(train[0].shape[2:])}, test images {list(test[0].shape[2:])}")
    return ImageSplits("fashion-mnist", *train, *test)


READERS = {"cifar10": read_cifar10, "fashion-mnist": read_fashion_mnist}


def read(name: str, data_dir: str | Path) -> ImageSplits:
    return READERS[name](data_dir)
