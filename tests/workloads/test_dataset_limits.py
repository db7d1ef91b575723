"""The dataset readers against files that lie: every declared size is checked against the bytes
present before anything is allocated from it, a gzip'd idx file is read no further than its
header declares, and every malformed file ends the trainer with exit 3 and a message naming it.
Memory is measured in a child process (peak RSS from getrusage, under an RLIMIT_DATA so a reader
that does allocate fails there instead of taking the machine's memory)."""

from __future__ import annotations

import gzip
import json
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")
np = pytest.importorskip("numpy", reason="numpy is in requirements-dev.txt (it writes the test pickles)")

from numpy._core.multiarray import _reconstruct  # noqa: E402
from numpy._core.numeric import _frombuffer  # noqa: E402

from tests.conftest import PROJECT_DIR  # noqa: E402

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))

from trainer import EXIT_CONFIG_ERROR, datasets  # noqa: E402
from trainer import train as trainer_train  # noqa: E402
from trainer.dataset_files import idx_bytes, write_cifar10, write_fashion_mnist  # noqa: E402

from tests.workloads.test_cifar_pickles import _Call  # noqa: E402

MEASURE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import torch  # noqa: F401  (loaded before the baseline, as the trainer has it loaded)
from trainer import train

def vm_data_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmData:"))

limit = (vm_data_kib() + int(sys.argv[2]) * 1024) * 1024
hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
resource.setrlimit(resource.RLIMIT_DATA, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
code = train.main(sys.argv[3:])
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"code": code, "grew_mib": grew, "seconds": time.monotonic() - start}))
"""
HEADROOM_MIB = 512  # the child's data limit above what it holds after importing torch
MAX_GROWTH_MIB = 128


def _array(shape: tuple[int, ...], dtype: str, raw) -> _Call:
    """An ndarray as numpy pickles it (protocols 2-4), with whatever `raw` the file claims."""
    return _Call(_reconstruct, np.ndarray, (0,), b"b", state=(1, shape, np.dtype(dtype), False, raw))


def run_preflight_measured(tmp_path: Path, dataset: str) -> dict:
    argv = ["--preflight", f"--dataset={dataset}", f"--data-dir={tmp_path / 'data'}", f"--checkpoint-dir={tmp_path / 'ckpt'}"]
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(PROJECT_DIR / "workloads"), str(HEADROOM_MIB), *argv],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]  # an uncaught MemoryError ends it with 1 and a traceback
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "MemoryError" not in proc.stderr, proc.stderr[-3000:]  # refused by a check, not by hitting the limit
    return {**result, "stderr": proc.stderr}


def _cifar_with_first_batch(tmp_path: Path, blob: bytes) -> Path:
    root = write_cifar10(tmp_path / "data", per_batch=4, test=4)
    (root / "data_batch_1").write_bytes(blob)
    return root / "data_batch_1"


def test_a_250_byte_batch_declaring_a_gibibyte_is_refused_at_once_without_allocating(tmp_path):
    n = 349_526  # the file: pixel and label data given as integers, which bytes(n) turned into zeros
    blob = pickle.dumps({b"data": _array((n, 3072), "u1", n * 3072), b"labels": _array((n,), "i8", n * 8)}, protocol=4)
    assert len(blob) < 256
    path = _cifar_with_first_batch(tmp_path, blob)
    result = run_preflight_measured(tmp_path, "cifar10")
    assert result["code"] == EXIT_CONFIG_ERROR and f"{path}: array data is a int, bytes expected" in result["stderr"]
    assert result["grew_mib"] < MAX_GROWTH_MIB and result["seconds"] < 10, result


def test_a_12_byte_pickle_cannot_size_the_memo(tmp_path):
    # BINPUT at index 15,000,000: C's unpickler grows (and clears) its memo array to 30 M entries (240 MB)
    blob = b"\x80\x02N" + b"r" + struct.pack("<I", 15_000_000) + b"."
    path = _cifar_with_first_batch(tmp_path, blob)
    result = run_preflight_measured(tmp_path, "cifar10")
    assert result["code"] == EXIT_CONFIG_ERROR and f"{path}: not a CIFAR-10 python batch" in result["stderr"]
    assert result["grew_mib"] < MAX_GROWTH_MIB, result


def test_a_gzip_bomb_is_read_no_further_than_its_header_declares(tmp_path):
    root = write_fashion_mnist(tmp_path / "data")
    labels = idx_bytes(2049, (60_000,), bytes(60_000))
    (root / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(labels, mtime=0))
    # 60,000 x 28 x 28 declared (47 MB), then 3.8 GB of zeros: gzip members, each 16 MiB that deflate to 16 kB
    zeros = gzip.compress(bytes(16 << 20), compresslevel=9, mtime=0)
    bomb = root / "train-images-idx3-ubyte.gz"
    bomb.write_bytes(gzip.compress(struct.pack(">4i", 2051, 60_000, 28, 28), mtime=0) + zeros * 240)
    assert bomb.stat().st_size < 5_000_000
    result = run_preflight_measured(tmp_path, "fashion-mnist")
    assert result["code"] == EXIT_CONFIG_ERROR, result
    assert f"{bomb}: more data bytes (or trailing bytes), 60000 x 28 x 28 = 47040000 expected" in result["stderr"]
    assert result["grew_mib"] < MAX_GROWTH_MIB and result["seconds"] < 60, result


# --- every malformed file: exit 3, naming it -------------------------------------------------------


def _write_cifar_batch(make) -> Callable[[Path], Path]:
    """data_batch_2 replaced by make(): bytes, or an object pickled with protocol 3 (bytes without _codecs)."""
    def write(data: Path) -> Path:
        root = write_cifar10(data, per_batch=4, test=4)
        made = make()
        blob = made if isinstance(made, bytes) else pickle.dumps(made, protocol=3)
        (root / "data_batch_2").write_bytes(blob)
        return root / "data_batch_2"
    return write


def _four_images() -> np.ndarray:
    return np.zeros((4, 3072), np.uint8)


def _write_fashion(name: str, blob: bytes, compressed: bool = True, also: tuple[str, ...] = ()) -> Callable[[Path], Path]:
    def write(data: Path) -> Path:
        root = write_fashion_mnist(data, compressed=compressed)
        suffix = ".gz" if compressed else ""
        for stem in (name, *also):
            (root / f"{stem}{suffix}").write_bytes(gzip.compress(blob, mtime=0) if compressed else blob)
        return root / f"{name}{suffix}"
    return write


def _corrupt_deflate(data: Path) -> Path:
    root = write_fashion_mnist(data)
    path = root / "t10k-images-idx3-ubyte.gz"
    blob = path.read_bytes()
    path.write_bytes(blob[:10] + b"\xff" * (len(blob) - 18) + blob[-8:])  # header and trailer kept, no valid block
    return path


def _sparse_batch_over_the_cap(data: Path) -> Path:
    path = write_cifar10(data, per_batch=4, test=4) / "data_batch_5"
    with open(path, "r+b") as f:
        f.truncate(datasets.CIFAR10_MAX_BATCH_BYTES + 1)  # sparse: no disk, and refused before any read
    return path


def _not_gzip(data: Path) -> Path:
    path = write_fashion_mnist(data) / "train-labels-idx1-ubyte.gz"
    path.write_bytes(idx_bytes(2049, (120,), bytes(120)))
    return path


MALFORMED = {
    "cifar labels array shorter than declared": ("cifar10", _write_cifar_batch(lambda: {b"data": _four_images(), b"labels": _array((4,), "i8", b"abc")}), "array 4 of i8 needs 32 bytes but holds 3"),
    "cifar label too large for any integer": ("cifar10", _write_cifar_batch(lambda: {b"data": _four_images(), b"labels": [0, 1, 2, 2**70]}), r"labels must be in 0..9"),
    "cifar labels of floats": ("cifar10", _write_cifar_batch(lambda: {b"data": _four_images(), b"labels": [0, 1, 2, 1.5]}), "must be a list of ints or a 1-D integer array"),
    "cifar labels 2-D": ("cifar10", _write_cifar_batch(lambda: {b"data": _four_images(), b"labels": np.zeros((2, 2), np.int64)}), "1-D integer array"),
    "cifar pixels given as an int": ("cifar10", _write_cifar_batch(lambda: {b"data": _array((4, 3072), "u1", 4 * 3072), b"labels": [0] * 4}), "array data is a int, bytes expected"),
    "cifar bytes after the pickle": ("cifar10", _write_cifar_batch(lambda: pickle.dumps({b"data": _four_images(), b"labels": [0] * 4}, protocol=3) + b"\0" * 64), "64 bytes after the pickle's end"),
    "cifar more images than a batch": ("cifar10", _write_cifar_batch(lambda: {b"data": np.zeros((10_001, 3072), np.uint8), b"labels": [0] * 10_001}), "10001 images, a CIFAR-10 batch holds at most 10000"),
    "cifar pickle of a list": ("cifar10", _write_cifar_batch(lambda: [1, 2, 3]), "a list, not a dict"),
    "cifar wrong keys": ("cifar10", _write_cifar_batch(lambda: {b"pixels": _four_images(), b"labels": [0] * 4}), "needs b'data'"),
    "cifar keys not strings": ("cifar10", _write_cifar_batch(lambda: {1: _four_images()}), "keys are not all strings"),
    "cifar data of int64": ("cifar10", _write_cifar_batch(lambda: {b"data": np.zeros((4, 3072), np.int64), b"labels": [0] * 4}), r"b'data' must be uint8 \[N, 3072\], got i8"),
    "cifar protocol 5 shape larger than its buffer": ("cifar10", _write_cifar_batch(lambda: pickle.dumps({b"data": _Call(_frombuffer, bytearray(12), np.dtype("u1"), (4, 3072), "C")}, protocol=5)),
        "array 4 x 3072 of u1 needs 12288 bytes but holds 12"),
    "cifar file larger than any batch": ("cifar10", _sparse_batch_over_the_cap,
                                         "67108865 bytes, more than a CIFAR-10 python batch takes"),
    "idx negative dimensions": ("fashion-mnist", _write_fashion(
        "train-images-idx3-ubyte", idx_bytes(2051, (120, -28, -28), bytes(120 * 784))), "dimension 1 is -28: 1 to 28 expected"),
    "idx zero images": ("fashion-mnist", _write_fashion(
        "t10k-images-idx3-ubyte", idx_bytes(2051, (0, 28, 28), b"")), "dimension 0 is 0"),
    "idx images larger than FashionMNIST's": ("fashion-mnist", _write_fashion(
        "train-images-idx3-ubyte", idx_bytes(2051, (120, 29, 29), bytes(120 * 841)), also=("t10k-images-idx3-ubyte",)),
        "dimension 1 is 29: 1 to 28 expected"),
    "idx float data": ("fashion-mnist", _write_fashion(
        "train-images-idx3-ubyte", idx_bytes(0x0D03, (120, 28, 28), bytes(120 * 784 * 4))),
        r"magic number 3331, 2051 expected \(float, 3 dimensions"),
    "idx labels with 3 dimensions": ("fashion-mnist", _write_fashion(
        "t10k-labels-idx1-ubyte", idx_bytes(2051, (30, 1, 1), bytes(30))), "magic number 2051, 2049 expected"),
    "idx plain file with trailing bytes": ("fashion-mnist", _write_fashion(
        "t10k-labels-idx1-ubyte", idx_bytes(2049, (30,), bytes(31)), compressed=False), "more data bytes"),
    "idx truncated header": ("fashion-mnist", _write_fashion("train-labels-idx1-ubyte", b"\0\0\x08"),
                             "3 bytes, shorter than the idx header"),
    "idx label 10": ("fashion-mnist", _write_fashion(
        "train-labels-idx1-ubyte", idx_bytes(2049, (120,), bytes([10]) * 120)), r"labels must be in 0..9 \(found 10\)"),
    "gzip corrupt deflate stream": ("fashion-mnist", _corrupt_deflate, "cannot be read"),
    "gzip name but not gzip": ("fashion-mnist", _not_gzip, "cannot be read"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_every_malformed_file_exits_3_naming_it(tmp_path, capsys, case):
    dataset, write, message = MALFORMED[case]
    path = write(tmp_path / "data")
    code = trainer_train.main(["--preflight", f"--dataset={dataset}", f"--data-dir={tmp_path / 'data'}",
                               f"--checkpoint-dir={tmp_path / 'ckpt'}"])
    err = capsys.readouterr().err
    assert code == EXIT_CONFIG_ERROR and "event=fatal exit=3" in err, err
    with pytest.raises(datasets.DatasetError, match=message) as raised:
        datasets.read(dataset, tmp_path / "data")
    assert str(raised.value).startswith(f"{path}: ") and str(path) in err
