"""CIFAR-10 batches as Python 3 re-saves them: real `pickle.dump` of dicts holding real numpy arrays
(protocols 2 to 5, numpy 2's module names and numpy 1's), read by trainer.cifar_pickle without numpy;
and hostile pickles (os.system, eval, subprocess, a numpy function that runs code, misused allowed
globals), refused with exit 3 without running anything. A control shows each payload does run
under plain pickle.loads, so the refusal is what keeps the marker file away."""

from __future__ import annotations

import codecs
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")
np = pytest.importorskip("numpy", reason="numpy is in requirements-dev.txt (it writes the re-saves)")

from numpy._core.multiarray import _reconstruct  # noqa: E402
from numpy._core.numeric import _frombuffer  # noqa: E402
from numpy.testing._private.utils import runstring  # noqa: E402

from tests.conftest import PROJECT_DIR  # noqa: E402

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))

from trainer import EXIT_CONFIG_ERROR, cifar_pickle, datasets  # noqa: E402
from trainer import train as trainer_train  # noqa: E402
from trainer.dataset_files import tiny_images  # noqa: E402

CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
NUMPY1_MODULES = {"numpy._core.multiarray": "numpy.core.multiarray", "numpy._core.numeric": "numpy.core.numeric"}


def as_numpy1(blob: bytes) -> bytes:
    """The same pickle as numpy 1 writes it: numpy.core.* instead of numpy._core.* (opcodes
    re-emitted, frames dropped: they are optional, and the renamed strings change their lengths)."""
    ops = list(pickletools.genops(blob))
    out = bytearray()
    for (op, arg, pos), end in zip(ops, [p for _, _, p in ops[1:]] + [len(blob)], strict=True):
        raw = blob[pos:end]
        if op.name == "FRAME":
            continue
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE") and arg in NUMPY1_MODULES:
            name = NUMPY1_MODULES[arg].encode()
            raw = (b"\x8c" + bytes([len(name)]) if op.name == "SHORT_BINUNICODE" else b"X" + struct.pack("<I", len(name))) + name
        elif op.name == "GLOBAL":
            module, name = arg.split(" ")
            raw = f"c{NUMPY1_MODULES.get(module, module)}\n{name}\n".encode()
        out += raw
    return bytes(out)


def resave_cifar10(data_dir: Path, protocol: int, labels_as: str = "list", str_keys: bool = False,
                   numpy1: bool = False, per_batch: int = 6, test: int = 5) -> dict[str, tuple]:
    """The python-version layout written by pickle.dump of numpy arrays; returns what each file holds."""
    root = data_dir / datasets.CIFAR10_DIR
    root.mkdir(parents=True, exist_ok=True)

    def key(k: str):
        return k if str_keys else k.encode()

    written = {}
    for i, name in enumerate([*datasets.CIFAR10_TRAIN, datasets.CIFAR10_TEST]):
        n = test if name == datasets.CIFAR10_TEST else per_batch
        images, labels = tiny_images(n, 50 + i)
        label_values = labels if labels_as == "list" else np.array(labels, dtype=labels_as)
        blob = {key("batch_label"): key(f"{name} of 5"), key("labels"): label_values,
                key("data"): images.reshape(n, 3072).numpy(), key("filenames"): [key(f"img_{j}.png") for j in range(n)]}
        raw = pickle.dumps(blob, protocol=protocol)
        (root / name).write_bytes(as_numpy1(raw) if numpy1 else raw)
        written[name] = (images, labels)
    meta = {key("label_names"): [key(c) for c in CLASS_NAMES], key("num_vis"): 3072, key("num_cases_per_batch"): per_batch}
    (root / datasets.CIFAR10_META).write_bytes(pickle.dumps(meta, protocol=protocol))
    return written


# --- valid re-saves --------------------------------------------------------------------------------


@pytest.mark.parametrize("numpy1", [False, True], ids=["numpy2", "numpy1"])
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_python3_resaves_of_numpy_arrays_read_back_exactly(tmp_path, protocol, numpy1):
    written = resave_cifar10(tmp_path, protocol, labels_as="int64", numpy1=numpy1)
    raw = (tmp_path / datasets.CIFAR10_DIR / datasets.CIFAR10_TEST).read_bytes()
    wants = {2: b"_codecs", 5: b"_frombuffer"}.get(protocol, b"_reconstruct")  # what each protocol references
    assert wants in raw and (b"numpy.core." in raw) == numpy1 and (b"numpy._core." in raw) != numpy1
    with warnings.catch_warnings():  # numpy 2 still reads numpy 1's names (with a DeprecationWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        assert np.array_equal(pickle.loads(raw)[b"data"], written["test_batch"][0].reshape(5, 3072).numpy())
    splits = datasets.read_cifar10(tmp_path)
    assert splits.train_images.shape == (30, 3, 32, 32) and splits.test_labels.dtype == torch.int64
    assert torch.equal(splits.test_images, written["test_batch"][0])
    assert splits.test_labels.tolist() == written["test_batch"][1]
    assert splits.train_labels[:6].tolist() == written["data_batch_1"][1]


@pytest.mark.parametrize("labels_as", ["list", "uint8", "int32", ">i8"])
@pytest.mark.parametrize("str_keys", [False, True], ids=["bytes-keys", "str-keys"])
def test_labels_as_list_or_any_integer_array_and_keys_as_bytes_or_str(tmp_path, labels_as, str_keys):
    written = resave_cifar10(tmp_path, 5, labels_as=labels_as, str_keys=str_keys)
    splits = datasets.read_cifar10(tmp_path)
    assert splits.test_labels.tolist() == written["test_batch"][1]  # big-endian read in its byte order


def test_a_full_batch_in_its_largest_encoding_fits_the_limits(tmp_path):
    """10,000 images whose every byte protocol 2 writes as two (UTF-8 of a latin-1 str), with
    10,000 file names as long as the official ones: within the size and opcode budgets."""
    resave_cifar10(tmp_path, 2)
    n = datasets.CIFAR10_BATCH_IMAGES
    names = [f"leptodactylus_pentadactylus_s_{i:06d}.png".encode() for i in range(n)]
    blob = {b"batch_label": b"training batch 1 of 5", b"labels": [i % 10 for i in range(n)],
            b"data": np.full((n, 3072), 0xFF, np.uint8), b"filenames": names}
    raw = pickle.dumps(blob, protocol=2)
    assert 0.9 * datasets.CIFAR10_MAX_BATCH_BYTES < len(raw) <= datasets.CIFAR10_MAX_BATCH_BYTES
    (tmp_path / datasets.CIFAR10_DIR / "data_batch_1").write_bytes(raw)
    splits = datasets.read_cifar10(tmp_path)
    assert splits.train_images.shape == (n + 24, 3, 32, 32) and int(splits.train_images[:n].min()) == 0xFF
    assert splits.train_labels[:12].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]


def test_fortran_ordered_data_is_refused_by_name(tmp_path):
    resave_cifar10(tmp_path, 5)
    images, labels = tiny_images(4, 1)
    blob = {b"data": np.asfortranarray(images.reshape(4, 3072).numpy()), b"labels": labels}
    (tmp_path / datasets.CIFAR10_DIR / "data_batch_2").write_bytes(pickle.dumps(blob, protocol=5))
    with pytest.raises(datasets.DatasetError, match="data_batch_2: b'data' is stored in Fortran order"):
        datasets.read_cifar10(tmp_path)


# --- hostile pickles -------------------------------------------------------------------------------


class _Call:
    """Pickles as a call of `func(*args)`, then BUILD with `state` when given."""

    def __init__(self, func, *args, state=None) -> None:
        self.func, self.args, self.state = func, args, state

    def __reduce__(self):
        return (self.func, self.args) if self.state is None else (self.func, self.args, self.state)


ATTACKS = {
    "os.system": lambda marker: _Call(os.system, f"touch {marker}"),
    "builtins.eval": lambda marker: _Call(eval, f"open({str(marker)!r}, 'w').close()"),
    "subprocess": lambda marker: _Call(subprocess.check_call, ["touch", str(marker)]),
    "numpy runstring": lambda marker: _Call(runstring, f"open({str(marker)!r}, 'w').close()", {}),
}


def test_each_attack_payload_runs_under_plain_pickle(tmp_path):
    """The control: what the unpickler below refuses would run under pickle.loads."""
    for name, attack in ATTACKS.items():
        marker = tmp_path / f"{name}.ran"
        payload = tmp_path / f"{name}.pickle"
        payload.write_bytes(pickle.dumps({b"data": attack(marker), b"labels": []}, protocol=2))
        subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(open(sys.argv[1], 'rb').read())",
                        str(payload)], check=True, timeout=120, capture_output=True)
        assert marker.exists(), name


@pytest.mark.parametrize("protocol", [2, 5])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attacks_are_refused_with_exit_3_and_never_run(tmp_path, capsys, attack, protocol):
    resave_cifar10(tmp_path / "data", protocol)
    marker = tmp_path / "ran"
    hostile = {b"data": np.zeros((1, 3072), np.uint8), b"labels": ATTACKS[attack](marker)}
    (tmp_path / "data" / datasets.CIFAR10_DIR / "data_batch_4").write_bytes(pickle.dumps(hostile, protocol=protocol))
    code = trainer_train.main(["--preflight", "--dataset=cifar10", f"--data-dir={tmp_path / 'data'}",
                               f"--checkpoint-dir={tmp_path / 'ckpt'}"])
    err = capsys.readouterr().err
    assert code == EXIT_CONFIG_ERROR and "event=fatal exit=3" in err
    assert "data_batch_4" in err and "is not part of a CIFAR-10 batch" in err
    assert not marker.exists()


MISUSED_GLOBALS = [
    (_Call(codecs.encode, "abc", "rot13"), r"_codecs.encode\('abc', 'rot13'\): only a str to 'latin1'"),
    (_Call(codecs.encode, b"abc", "zlib"), "only a str to 'latin1'"),
    (_Call(np.dtype, "O", False, True), "numpy dtype 'O': only plain integer types"),
    (_Call(np.dtype, "f8", False, True), "numpy dtype 'f8'"),
    (np.zeros(3, dtype=[("a", "u1")]), "numpy dtype 'V1'"),
    (_Call(_frombuffer, "not bytes", np.dtype("u1"), (9,), "C"), "array data is a str, bytes expected"),
    (_Call(_frombuffer, b"abc", np.dtype("u1"), (1_000_000,), "C"), "array 1000000 of u1 needs 1000000 bytes but holds 3"),
    (_Call(_frombuffer, b"abc", np.dtype("u1"), (3,), "K"), "_frombuffer order 'K'"),
    (_Call(_reconstruct, np.ndarray, (0,), b"b", state=(1, (349526, 3072), np.dtype("u1"), False, 349526 * 3072)),
     "array data is a int, bytes expected"),
    (_Call(_reconstruct, np.ndarray, (0,), b"b", state=(1, (-1, 3072), np.dtype("u1"), False, b"")), r"array shape \(-1, 3072\)"),
    (_Call(_reconstruct, np.ndarray, (0,), b"b", state={"shape": (2,)}), r"array state \{'shape': \(2,\)\} is not numpy's"),
    (_Call(_reconstruct, dict, (0,), b"b"), "global builtins.dict is not part of a CIFAR-10 batch"),
    (_Call(_reconstruct, np.ndarray, (10**9,), b"b"), r"only _reconstruct\(ndarray, \(0,\), b'b'\)"),
    (_Call(np.ndarray, (10**9,)), r"numpy.ndarray is only an argument of _reconstruct"),
]


@pytest.mark.parametrize(("payload", "message"), MISUSED_GLOBALS, ids=lambda v: "" if isinstance(v, str) else None)
def test_allowed_globals_check_their_arguments(payload, message):
    blob = pickle.dumps({b"data": payload}, protocol=5)
    with pytest.raises(cifar_pickle.PickleRefused, match=message):
        cifar_pickle.load(blob)


def test_nothing_in_the_file_can_alter_an_allowed_global():
    # GLOBAL _codecs.encode, then BUILD with a state dict: it would set attributes for every later load
    blob = b"\x80\x02c_codecs\nencode\n}X\x04\x00\x00\x00callK\x01sb."
    with pytest.raises(cifar_pickle.PickleRefused, match="_codecs.encode cannot be modified"):
        cifar_pickle.load(blob)
    assert cifar_pickle.load(pickle.dumps(b"ok", protocol=2)) == b"ok"


def test_an_opcode_budget_and_the_end_of_the_pickle():
    with pytest.raises(cifar_pickle.PickleRefused, match="more than 100 pickle opcodes"):
        cifar_pickle.load(pickle.dumps(list(range(200)), protocol=2), max_opcodes=100)
    with pytest.raises(cifar_pickle.PickleRefused, match="3 bytes after the pickle's end"):
        cifar_pickle.load(pickle.dumps({b"labels": []}, protocol=2) + b"abc")
    with pytest.raises(pickle.UnpicklingError, match="truncated"):
        cifar_pickle.load(pickle.dumps({b"labels": []}, protocol=2)[:-3])
