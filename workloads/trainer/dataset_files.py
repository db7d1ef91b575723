"""Small dataset files in the exact official formats trainer.datasets reads, for the tests and the
benchmarks (bench/trainer_overhead.py): CIFAR-10's "python version" (Python 2 pickles with numpy
arrays, written opcode for opcode as cPickle did, without numpy) and Fashion-MNIST's IDX files
(gzip'd or plain). The images are learnable: each class its own colour plus noise.

Nothing in the training pods uses it; it lives beside the reader so that neither the tests nor the
benchmarks import the other's files.
"""

from __future__ import annotations

import gzip
import io
import pickle
import struct
from pathlib import Path
from typing import Any

from trainer import datasets


class _Global:
    """A global as Python 2's cPickle wrote it (GLOBAL opcode), without importing its module."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Any:  # save_reduce wants a callable; this one is only pickled
        raise TypeError(f"{self.module}.{self.name} stands in for a Python 2 global: pickled, never called")


class Py2Str(bytes):
    """A Python 2 str: (SHORT_)BINSTRING, which Python 3 loads as bytes with encoding="bytes"."""


class U8Array:
    """What numpy.ndarray.__reduce__ pickles for a C-order uint8 array (numpy 1.x, protocol 2)."""

    def __init__(self, shape: tuple[int, ...], raw: bytes) -> None:
        self.shape, self.raw = shape, raw


class _U8Dtype:
    pass


class _Py2Pickler(pickle._Pickler):  # type: ignore[name-defined]
    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def _save_global(self, obj: _Global) -> None:
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("ascii"))

    def _save_str(self, obj: Py2Str) -> None:
        n = len(obj)
        self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj if n < 256 else pickle.BINSTRING + struct.pack("<i", n) + obj)

    def _save_dtype(self, obj: _U8Dtype) -> None:
        self.save_reduce(_Global("numpy", "dtype"), (Py2Str(b"u1"), 0, 1),
                         state=(3, Py2Str(b"|"), None, None, None, -1, -1, 0), obj=obj)

    def _save_array(self, obj: U8Array) -> None:
        self.save_reduce(_Global("numpy.core.multiarray", "_reconstruct"), (_Global("numpy", "ndarray"), (0,), Py2Str(b"b")),
                         state=(1, obj.shape, _U8Dtype(), False, Py2Str(obj.raw)), obj=obj)

    dispatch[_Global] = _save_global
    dispatch[Py2Str] = _save_str
    dispatch[_U8Dtype] = _save_dtype
    dispatch[U8Array] = _save_array


def py2_pickle(obj) -> bytes:
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


CLASS_COLOURS = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
                 (145, 30, 180), (70, 240, 240), (240, 50, 230), (128, 128, 0), (0, 0, 128)]


def tiny_images(n: int, seed: int, size: int = 32, channels: int = 3) -> tuple[Any, list[int]]:
    """uint8 [n, C, size, size]: each class its own colour plus noise (learnable through crops and flips)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    colours = torch.tensor(CLASS_COLOURS, dtype=torch.float32)[labels][:, :channels]
    noise = torch.randint(-40, 41, (n, channels, size, size), generator=g).float()
    images = (colours.view(n, channels, 1, 1) + noise).clamp(0, 255).to(torch.uint8)
    return images, labels.tolist()


def write_cifar10(data_dir: Path, per_batch: int = 40, test: int = 101, meta: bool = True, seed: int = 0) -> Path:
    """The "python version" layout with `per_batch` images in each of the 5 training batches."""
    root = data_dir / datasets.CIFAR10_DIR
    root.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate([*datasets.CIFAR10_TRAIN, datasets.CIFAR10_TEST]):
        n = test if name == datasets.CIFAR10_TEST else per_batch
        images, labels = tiny_images(n, seed * 100 + i)
        blob = {
            Py2Str(b"batch_label"): Py2Str(f"{name} of 5".encode()),
            Py2Str(b"labels"): labels,
            Py2Str(b"data"): U8Array((n, 3072), bytes(images.flatten().tolist())),
            Py2Str(b"filenames"): [Py2Str(f"img_{j}.png".encode()) for j in range(n)],
        }
        (root / name).write_bytes(py2_pickle(blob))
    if meta:
        names = [Py2Str(c.encode()) for c in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                                "horse", "ship", "truck")]
        blob = {Py2Str(b"num_cases_per_batch"): per_batch, Py2Str(b"label_names"): names, Py2Str(b"num_vis"): 3072}
        (root / datasets.CIFAR10_META).write_bytes(py2_pickle(blob))
    return root


def idx_bytes(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return struct.pack(f">i{len(dims)}i", magic, *dims) + payload


def write_fashion_mnist(data_dir: Path, train: int = 120, test: int = 30, compressed: bool = True) -> Path:
    root = data_dir / datasets.FASHION_MNIST_DIR
    root.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", train), ("t10k", test)):
        images, labels = tiny_images(n, n, size=28, channels=1)
        files = {f"{prefix}-images-idx3-ubyte": idx_bytes(2051, (n, 28, 28), bytes(images.flatten().tolist())),
                 f"{prefix}-labels-idx1-ubyte": idx_bytes(2049, (n,), bytes(labels))}
        for name, blob in files.items():
            if compressed:
                (root / f"{name}.gz").write_bytes(gzip.compress(blob, mtime=0))
            else:
                (root / name).write_bytes(blob)
    return root
