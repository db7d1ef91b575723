"""Readers for the two standard datasets the trainer knows, in their official distributions, without
torchvision (and without numpy: the workload needs only torch).

- CIFAR-10, "python version": `<data-dir>/cifar-10-batches-py/data_batch_1..5` and `test_batch`,
  pickles of dicts with b"data" (a uint8 array [N, 3072], channel-major 32x32) and b"labels";
  `batches.meta` is checked when present. The pickles reference numpy's array reconstructors; they
  are read by an unpickler that maps exactly those globals onto small stand-ins and refuses any
  other, so a file on the shared volume cannot run code.
- FashionMNIST, idx: `<data-dir>/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`
  (gzip'd, or the same names without .gz), magic 2051 (images) and 2049 (labels), big-endian.

Images stay uint8 [N, C, H, W]; the trainer converts and normalises each batch on the device with
MEAN/STD (dataset statistics of the training split), after augmentation.
"""

from __future__ import annotations

import gzip
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST = "test_batch"
CIFAR10_META = "batches.meta"
FASHION_MNIST_DIR = "fashion-mnist"
IDX_IMAGES_MAGIC = 2051  # 0x00000803: unsigned byte, 3 dimensions
IDX_LABELS_MAGIC = 2049  # 0x00000801: unsigned byte, 1 dimension

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


# --- CIFAR-10 -------------------------------------------------------------------------------------


class _Dtype:
    """Stand-in for numpy.dtype(code, align, copy) with its pickled state."""

    def __init__(self, code: Any, align: Any = False, copy: Any = True) -> None:
        self.code = code.decode("ascii") if isinstance(code, bytes) else str(code)
        self.order = "|"

    def __setstate__(self, state: tuple) -> None:
        order = state[1]
        self.order = order.decode("ascii") if isinstance(order, bytes) else str(order)


class _Array:
    """Stand-in for numpy.ndarray: shape, dtype and the raw C-order bytes."""

    shape: tuple[int, ...] = ()
    dtype: _Dtype | None = None
    raw = b""
    fortran = False

    def __setstate__(self, state: tuple) -> None:
        if len(state) == 5:  # (version, shape, dtype, is_fortran, rawdata)
            state = state[1:]
        shape, dtype, fortran, raw = state
        self.shape, self.dtype, self.fortran = tuple(int(d) for d in shape), dtype, bool(fortran)
        self.raw = raw.encode("latin1") if isinstance(raw, str) else bytes(raw)


def _reconstruct(_subtype: Any, _shape: Any, _dtype: Any) -> _Array:
    return _Array()


class _CifarUnpickler(pickle.Unpickler):
    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): _Array,
        ("numpy", "dtype"): _Dtype,
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not part of a CIFAR-10 batch") from None


def _load_cifar_pickle(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise DatasetError(f"{path}: missing (python -m trainer.prepare --dataset cifar10 downloads it)")
    try:
        with open(path, "rb") as f:
            blob = _CifarUnpickler(f, encoding="bytes").load()
    except DatasetError:
        raise
    except Exception as exc:  # truncated, foreign or hostile: all a data problem
        raise DatasetError(f"{path}: not a CIFAR-10 python batch ({type(exc).__name__}: {exc})") from exc
    if not isinstance(blob, dict):
        raise DatasetError(f"{path}: not a CIFAR-10 python batch (a {type(blob).__name__}, not a dict)")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in blob.items()}


def _labels_tensor(labels: Any, path: Path) -> Any:
    import torch

    if isinstance(labels, _Array):
        if labels.dtype is None or labels.dtype.code not in ("u1", "i1", "<i4", "i4", "<i8", "i8") or len(labels.shape) != 1:
            raise DatasetError(f"{path}: labels must be a 1-D integer array")
        dtype = {"u1": torch.uint8, "i1": torch.int8}.get(labels.dtype.code) or (
            torch.int32 if labels.dtype.code.endswith("4") else torch.int64)
        return torch.frombuffer(bytearray(labels.raw), dtype=dtype).long() if labels.raw else torch.zeros(0, dtype=torch.long)
    if not isinstance(labels, list) or not all(isinstance(v, int) for v in labels):
        raise DatasetError(f"{path}: labels must be a list of ints")
    return torch.tensor(labels, dtype=torch.long)


def _cifar_batch(path: Path) -> tuple[Any, Any]:
    import torch

    blob = _load_cifar_pickle(path)
    data, labels = blob.get("data"), blob.get("labels")
    if not isinstance(data, _Array) or labels is None:
        raise DatasetError(f"{path}: needs b'data' (a uint8 array) and b'labels'")
    if data.dtype is None or data.dtype.code != "u1" or len(data.shape) != 2 or data.shape[1] != 3 * 32 * 32:
        code = data.dtype.code if data.dtype else "?"
        raise DatasetError(f"{path}: b'data' must be uint8 [N, 3072], got {code} {list(data.shape)}")
    if data.fortran:
        raise DatasetError(f"{path}: b'data' is stored in Fortran order; C order expected")
    n = data.shape[0]
    if len(data.raw) != n * 3072:
        raise DatasetError(f"{path}: b'data' holds {len(data.raw)} bytes, {n} x 3072 = {n * 3072} expected")
    targets = _labels_tensor(labels, path)
    if len(targets) != n:
        raise DatasetError(f"{path}: {n} images but {len(targets)} labels")
    if n and (int(targets.min()) < 0 or int(targets.max()) >= CLASSES):
        raise DatasetError(f"{path}: labels must be in 0..{CLASSES - 1}")
    images = torch.frombuffer(bytearray(data.raw), dtype=torch.uint8).view(n, 3, 32, 32) if n else torch.zeros(0, 3, 32, 32, dtype=torch.uint8)
    return images, targets


def read_cifar10(data_dir: str | Path) -> ImageSplits:
    import torch

    root = Path(data_dir) / CIFAR10_DIR
    if not root.is_dir():
        raise DatasetError(f"{root}: missing (python -m trainer.prepare --dataset cifar10 --data-dir {data_dir})")
    meta_path = root / CIFAR10_META
    if meta_path.exists():
        meta = _load_cifar_pickle(meta_path)
        names = meta.get("label_names")
        if not isinstance(names, list) or len(names) != CLASSES:
            raise DatasetError(f"{meta_path}: label_names must list {CLASSES} classes")
        if meta.get("num_vis", 3072) != 3072:
            raise DatasetError(f"{meta_path}: num_vis {meta.get('num_vis')}, 3072 expected")
    train = [_cifar_batch(root / name) for name in CIFAR10_TRAIN]
    test_images, test_labels = _cifar_batch(root / CIFAR10_TEST)
    train_images = torch.cat([x for x, _ in train])
    train_labels = torch.cat([y for _, y in train])
    if len(train_images) == 0 or len(test_images) == 0:
        raise DatasetError(f"{root}: a split is empty")
    return ImageSplits("cifar10", train_images, train_labels, test_images, test_labels)


# --- FashionMNIST ---------------------------------------------------------------------------------


def _read_idx_bytes(root: Path, stem: str) -> tuple[Path, bytes]:
    for path in (root / f"{stem}.gz", root / stem):
        if not path.is_file():
            continue
        try:
            if path.suffix == ".gz":
                with gzip.open(path, "rb") as f:
                    return path, f.read()
            return path, path.read_bytes()
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; EOFError: truncated stream
            raise DatasetError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc
    raise DatasetError(f"{root / stem}(.gz): missing (python -m trainer.prepare --dataset fashion-mnist)")


def parse_idx(path: Path | str, blob: bytes, magic: int) -> tuple[int, ...]:
    """Dimensions of an idx file after checking its magic number and its length."""
    ndim = {IDX_IMAGES_MAGIC: 3, IDX_LABELS_MAGIC: 1}[magic]
    header = 4 + 4 * ndim
    if len(blob) < header:
        raise DatasetError(f"{path}: {len(blob)} bytes, shorter than the idx header")
    (found,) = struct.unpack(">i", blob[:4])
    if found != magic:
        raise DatasetError(f"{path}: magic number {found}, {magic} expected")
    dims = struct.unpack(f">{ndim}i", blob[4:header])
    size = 1
    for d in dims:
        size *= d
    if len(blob) != header + size:
        raise DatasetError(f"{path}: {len(blob) - header} data bytes, {' x '.join(map(str, dims))} = {size} expected")
    return dims


def _fashion_split(root: Path, prefix: str) -> tuple[Any, Any]:
    import torch

    images_path, images = _read_idx_bytes(root, f"{prefix}-images-idx3-ubyte")
    labels_path, labels = _read_idx_bytes(root, f"{prefix}-labels-idx1-ubyte")
    n, rows, cols = parse_idx(images_path, images, IDX_IMAGES_MAGIC)
    (m,) = parse_idx(labels_path, labels, IDX_LABELS_MAGIC)
    if n != m:
        raise DatasetError(f"{images_path}: {n} images but {labels_path.name} has {m} labels")
    if n == 0:
        raise DatasetError(f"{images_path}: no images")
    x = torch.frombuffer(bytearray(images[16:]), dtype=torch.uint8).view(n, 1, rows, cols)
    y = torch.frombuffer(bytearray(labels[8:]), dtype=torch.uint8).long()
    if int(y.max()) >= CLASSES:
        raise DatasetError(f"{labels_path}: labels must be in 0..{CLASSES - 1}")
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
