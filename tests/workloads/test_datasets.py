"""The trainer's datasets, schedule, augmentation, evaluation and `trainer.prepare`, on small files
written by trainer.dataset_files in the exact official formats (CIFAR-10's Python 2 pickles with numpy arrays, written
opcode for opcode as cPickle did, without numpy; FashionMNIST's gzip'd idx). Downloads come from a
loopback HTTP server; nothing here touches the internet."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import math
import os
import pickle
import sys
import tarfile
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")

from tests.conftest import PROJECT_DIR  # noqa: E402

if str(PROJECT_DIR / "workloads") not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR / "workloads"))

from trainer import EXIT_CONFIG_ERROR, datasets, prepare  # noqa: E402
from trainer import train as trainer_train  # noqa: E402
from trainer.dataset_files import (  # noqa: E402
    Py2Str,
    U8Array,
    idx_bytes,
    py2_pickle,
    tiny_images,
    write_cifar10,
    write_fashion_mnist,
)

# --- CIFAR-10 reader -------------------------------------------------------------------------------


def test_cifar10_reads_the_python_version(tmp_path):
    root = write_cifar10(tmp_path, per_batch=40, test=101)
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in (root / "data_batch_1").read_bytes()  # numpy's own globals
    splits = datasets.read_cifar10(tmp_path)
    assert splits.train_images.shape == (200, 3, 32, 32) and splits.train_images.dtype == torch.uint8
    assert splits.test_images.shape == (101, 3, 32, 32) and splits.test_labels.dtype == torch.int64
    images, labels = tiny_images(40, 0)  # data_batch_1, written channel-major per row
    assert torch.equal(splits.train_images[:40], images) and splits.train_labels[:40].tolist() == labels
    images, labels = tiny_images(101, 5)
    assert torch.equal(splits.test_images, images) and splits.test_labels.tolist() == labels
    assert splits.mean == (0.4914, 0.4822, 0.4465)


def test_cifar10_without_meta_is_fine_and_a_bad_meta_is_not(tmp_path):
    write_cifar10(tmp_path, per_batch=4, test=4, meta=False)
    assert len(datasets.read_cifar10(tmp_path).train_labels) == 20
    (tmp_path / datasets.CIFAR10_DIR / datasets.CIFAR10_META).write_bytes(
        py2_pickle({Py2Str(b"label_names"): [Py2Str(b"cat")], Py2Str(b"num_vis"): 3072}))
    with pytest.raises(datasets.DatasetError, match="label_names must list 10"):
        datasets.read_cifar10(tmp_path)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda p: p.write_bytes(p.read_bytes()[:5000]), "not a CIFAR-10 python batch"),  # truncated
    (lambda p: p.unlink(), "missing"),
    (lambda p: p.write_bytes(py2_pickle({Py2Str(b"data"): U8Array((4, 1024), bytes(4096)), Py2Str(b"labels"): [0] * 4})),
     r"uint8 \[N, 3072\]"),
    (lambda p: p.write_bytes(py2_pickle({Py2Str(b"data"): U8Array((4, 3072), bytes(4 * 3072)), Py2Str(b"labels"): [0] * 3})),
     "4 images but 3 labels"),
    (lambda p: p.write_bytes(py2_pickle({Py2Str(b"data"): U8Array((4, 3072), bytes(100)), Py2Str(b"labels"): [0] * 4})),
     "holds 100 bytes"),
    (lambda p: p.write_bytes(py2_pickle({Py2Str(b"data"): U8Array((1, 3072), bytes(3072)), Py2Str(b"labels"): [10]})),
     r"labels must be in 0\.\.9"),
])
def test_cifar10_damage_is_a_dataset_error_naming_the_file(tmp_path, damage, message):
    root = write_cifar10(tmp_path, per_batch=4, test=4)
    damage(root / "data_batch_3")
    with pytest.raises(datasets.DatasetError, match=message) as err:
        datasets.read_cifar10(tmp_path)
    assert "data_batch_3" in str(err.value)


class _Hostile:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_cifar10_unpickler_refuses_any_other_global(tmp_path, monkeypatch):
    root = write_cifar10(tmp_path, per_batch=4, test=4)
    (root / datasets.CIFAR10_TEST).write_bytes(pickle.dumps({b"data": _Hostile(), b"labels": []}, protocol=2))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(datasets.DatasetError, match="is not part of a CIFAR-10 batch"):
        datasets.read_cifar10(tmp_path)
    assert not (tmp_path / "pwned").exists()


def test_trainer_preflight_exits_3_on_a_truncated_cifar_batch(tmp_path, capsys):
    root = write_cifar10(tmp_path / "data", per_batch=4, test=4)
    (root / "test_batch").write_bytes((root / "test_batch").read_bytes()[:-10])
    code = trainer_train.main(["--preflight", "--dataset=cifar10", f"--data-dir={tmp_path / 'data'}",
                               f"--checkpoint-dir={tmp_path / 'ckpt'}"])
    err = capsys.readouterr().err
    assert code == EXIT_CONFIG_ERROR and "event=fatal exit=3" in err and "test_batch" in err


# --- FashionMNIST reader ---------------------------------------------------------------------------


@pytest.mark.parametrize("compressed", [True, False])
def test_fashion_mnist_reads_idx_gzip_or_plain(tmp_path, compressed):
    write_fashion_mnist(tmp_path, train=120, test=30, compressed=compressed)
    splits = datasets.read_fashion_mnist(tmp_path)
    assert splits.train_images.shape == (120, 1, 28, 28) and splits.test_images.shape == (30, 1, 28, 28)
    images, labels = tiny_images(30, 30, size=28, channels=1)
    assert torch.equal(splits.test_images, images) and splits.test_labels.tolist() == labels
    assert splits.std == (0.3530,)


@pytest.mark.parametrize(("name", "blob", "message"), [
    ("train-images-idx3-ubyte", idx_bytes(2049, (120, 28, 28), bytes(120 * 784)), "magic number 2049, 2051 expected"),
    ("train-labels-idx1-ubyte", idx_bytes(2051, (120,), bytes(120)), "magic number 2051, 2049 expected"),
    ("train-images-idx3-ubyte", idx_bytes(2051, (120, 28, 28), bytes(119 * 784)), "93296 data bytes, 120 x 28 x 28 = 94080 expected"),
    ("train-labels-idx1-ubyte", idx_bytes(2049, (119,), bytes(119)), "120 images but train-labels-idx1-ubyte.gz has 119 labels"),
    ("t10k-labels-idx1-ubyte", b"\x00\x00", "shorter than the idx header"),
])
def test_fashion_mnist_bad_headers_and_counts(tmp_path, name, blob, message):
    root = write_fashion_mnist(tmp_path)
    (root / f"{name}.gz").write_bytes(gzip.compress(blob))
    with pytest.raises(datasets.DatasetError, match=message):
        datasets.read_fashion_mnist(tmp_path)


def test_fashion_mnist_truncated_gzip(tmp_path):
    root = write_fashion_mnist(tmp_path)
    path = root / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(datasets.DatasetError, match="t10k-images-idx3-ubyte.gz: cannot be read"):
        datasets.read_fashion_mnist(tmp_path)


# --- schedule --------------------------------------------------------------------------------------


def test_lr_warms_up_linearly_then_decays_as_a_cosine_to_zero():
    lr = [trainer_train.lr_at(s, 0.4, total_steps=104, warmup_steps=4) for s in range(104)]
    assert lr[:4] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert lr[4] == pytest.approx(0.4)  # the cosine starts at the peak
    assert lr[54] == pytest.approx(0.2)  # half way through the 100 decay steps: half the peak
    assert lr[29] == pytest.approx(0.2 * (1 + math.cos(math.pi * 0.25)))
    assert lr[103] == pytest.approx(0.4 * 0.5 * (1 + math.cos(math.pi * 99 / 100)))  # the last step: ~0
    assert all(a >= b for a, b in zip(lr[4:], lr[5:], strict=False))
    assert trainer_train.lr_at(104, 0.4, 104, 4) == 0.0
    # no warmup: cosine from the first step
    assert trainer_train.lr_at(0, 0.1, 10, 0) == pytest.approx(0.1)


def _events(capsys) -> tuple[list[dict[str, str]], list[dict]]:
    out = capsys.readouterr().out.splitlines()
    return ([e for e in map(trainer_train.parse_event, out) if e],
            [r for r in map(trainer_train.parse_result, out) if r])


def test_resume_mid_run_continues_the_schedule_and_augmentation_exactly(tmp_path, capsys):
    """An interrupted run (checkpoints after step 10 lost) ends with the very weights of an
    uninterrupted one: same lr at every step, same crops and flips, same data order."""
    write_cifar10(tmp_path / "data", per_batch=40, test=21)  # 200 samples / batch 16: 12 steps per epoch
    def run(ckpt: Path) -> tuple[list[dict[str, str]], list[dict]]:
        code = trainer_train.main(["--dataset=cifar10", "--model=mlp", "--epochs=2", "--batch-size=16", "--lr=0.1",
                                   "--warmup-epochs=0.5", f"--data-dir={tmp_path / 'data'}", f"--checkpoint-dir={ckpt}",
                                   "--checkpoint-every-steps=5", "--keep-checkpoints=50", "--weight-decay=5e-4"])
        assert code == 0
        return _events(capsys)

    events, results = run(tmp_path / "a")
    start = next(e for e in events if e["event"] == "start")
    assert (start["warmup_steps"], start["augment"], start["test_samples"]) == ("6", "1", "21")
    lrs = [float(e["lr"]) for e in events if e["event"] == "epoch"]
    assert lrs == pytest.approx([trainer_train.lr_at(11, 0.1, 24, 6), trainer_train.lr_at(23, 0.1, 24, 6)], rel=1e-5)
    ckpt = tmp_path / "b"
    run(ckpt)
    for p in ckpt.glob("step-*.pt"):
        if int(p.name[5:14]) > 10:
            p.unlink()
    (ckpt / "result.json").unlink()
    resumed_events, resumed_results = run(ckpt)
    resume = next(e for e in resumed_events if e["event"] == "resume")
    assert (resume["step"], resume["epoch"], resume["batch"]) == ("10", "0", "10")
    final_a = torch.load(tmp_path / "a" / "step-000000024.pt", weights_only=True)
    final_b = torch.load(ckpt / "step-000000024.pt", weights_only=True)
    assert all(torch.equal(final_a["model"][k], final_b["model"][k]) for k in final_a["model"])
    assert [e["lr"] for e in resumed_events if e["event"] == "epoch"] == [e["lr"] for e in events if e["event"] == "epoch"]
    assert resumed_results[0]["final_test_accuracy"] == results[0]["final_test_accuracy"]
    assert resumed_results[0]["best_test_accuracy"] == results[0]["best_test_accuracy"]
    assert resumed_results[0]["epochs_timed"] == 2 and results[0]["epochs_timed"] == 2


def test_defaults_keep_a_constant_lr_and_no_eval(tmp_path, capsys):
    code = trainer_train.main(["--model=mlp", "--epochs=1", "--batch-size=16", "--synthetic-samples=64",
                               f"--data-dir={tmp_path / 'none'}", f"--checkpoint-dir={tmp_path / 'c'}"])
    events, results = _events(capsys)
    assert code == 0 and results == []
    assert not [e for e in events if e["event"] == "eval"] and "lr" not in next(e for e in events if e["event"] == "epoch")
    state = torch.load(tmp_path / "c" / "step-000000004.pt", weights_only=True)
    assert state["optimizer"]["param_groups"][0]["lr"] == 0.05
    assert (state["optimizer"]["param_groups"][0]["momentum"], state["optimizer"]["param_groups"][0]["weight_decay"]) == (0.9, 1e-5)
    assert not (tmp_path / "c" / "result.json").exists()


# --- augmentation ----------------------------------------------------------------------------------


def _candidates(image: torch.Tensor, padding: int = 4) -> list[torch.Tensor]:
    """Every crop and flip a reference implementation can produce from one image."""
    _, h, w = image.shape
    padded = torch.nn.functional.pad(image, (padding,) * 4)
    crops = [padded[:, y:y + h, x:x + w] for y in range(2 * padding + 1) for x in range(2 * padding + 1)]
    return crops + [c.flip(-1) for c in crops]


def test_augmentation_crops_and_flips_each_sample_and_keeps_the_shape():
    image = torch.arange(3 * 8 * 8, dtype=torch.int64).remainder(251).to(torch.uint8).view(3, 8, 8) + 1  # no zeros
    batch = image.expand(64, 3, 8, 8).contiguous()
    out = trainer_train.augment_batch(batch, torch.Generator().manual_seed(1))
    assert out.shape == batch.shape and out.dtype == torch.uint8
    candidates = _candidates(image)
    picks = [next(i for i, c in enumerate(candidates) if torch.equal(c, o)) for o in out]  # each is a valid crop
    assert len(set(picks)) > 20  # the samples got different crops
    assert sum(p >= 81 for p in picks) in range(16, 49)  # about half flipped
    assert any(p != 40 and p < 81 for p in picks)  # a shifted crop, not only the centre (index 40)
    float_out = trainer_train.augment_batch(batch.float(), torch.Generator().manual_seed(1))
    assert torch.equal(float_out, out.float())  # same draws whatever the dtype


def test_augmentation_is_deterministic_under_its_seed():
    batch = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    a = trainer_train.augment_batch(batch, torch.Generator().manual_seed(trainer_train.augment_seed(0, 0, 7)))
    b = trainer_train.augment_batch(batch, torch.Generator().manual_seed(trainer_train.augment_seed(0, 0, 7)))
    c = trainer_train.augment_batch(batch, torch.Generator().manual_seed(trainer_train.augment_seed(0, 1, 7)))
    assert torch.equal(a, b) and not torch.equal(a, c)


# --- evaluation ------------------------------------------------------------------------------------


class _Oracle(torch.nn.Module):
    """Predicts class x[:, 0] with logits 5 for it and 0 elsewhere."""

    def forward(self, x):
        return torch.nn.functional.one_hot(x[:, 0].long(), 10).float() * 5


def test_evaluate_counts_correct_predictions_exactly():
    labels = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    said = torch.tensor([0, 1, 2, 3, 4, 5, 6, 0, 0, 0])  # 7 right
    test = torch.utils.data.TensorDataset(said.float().view(10, 1), labels)
    stats = trainer_train.evaluate(_Oracle(), test, list(range(10)), 4, torch.device("cpu"), distributed=False)
    right = torch.nn.functional.cross_entropy(torch.tensor([[5.0] + [0.0] * 9]), torch.tensor([0])).item()
    wrong = torch.nn.functional.cross_entropy(torch.tensor([[5.0] + [0.0] * 9]), torch.tensor([1])).item()
    assert (stats["correct"], stats["total"], stats["accuracy"]) == (7, 10, 0.7)
    assert stats["loss"] == pytest.approx((7 * right + 3 * wrong) / 10)
    # a shard: only the indices given
    part = trainer_train.evaluate(_Oracle(), test, [7, 8, 9, 0], 3, torch.device("cpu"), distributed=False)
    assert (part["correct"], part["total"]) == (1, 4)


@pytest.mark.parametrize(("n", "world"), [(101, 2), (10, 3), (2, 4)])
def test_eval_shards_cover_the_test_set_once(n, world):
    shards = [trainer_train.eval_indices(n, r, world) for r in range(world)]
    flat = [i for s in shards for i in s]
    assert sorted(flat) == list(range(n))  # no padding sample counted twice, none left out


def test_fashion_mnist_training_evaluates_and_writes_the_result(tmp_path, capsys):
    write_fashion_mnist(tmp_path / "data", train=120, test=30)
    code = trainer_train.main(["--dataset=fashion-mnist", "--model=mlp", "--epochs=2", "--batch-size=16",
                               f"--data-dir={tmp_path / 'data'}", f"--checkpoint-dir={tmp_path / 'ckpt'}"])
    events, results = _events(capsys)
    assert code == 0
    evals = [e for e in events if e["event"] == "eval"]
    assert [(e["epoch"], e["total"]) for e in evals] == [("1", "30"), ("2", "30")]
    start = next(e for e in events if e["event"] == "start")
    assert start["augment"] == "0"  # auto: off for FashionMNIST
    saved = json.loads((tmp_path / "ckpt" / "result.json").read_text())
    assert saved == results[0]
    assert saved["final_test_accuracy"] == pytest.approx(float(evals[-1]["accuracy"]), rel=1e-5)
    assert saved["best_test_accuracy"] == pytest.approx(max(float(e["accuracy"]) for e in evals), rel=1e-5)
    assert saved["epochs"] == 2 and saved["samples_per_s"] > 0 and saved["seconds_per_epoch"] > 0


def test_augment_on_rejects_flat_inputs(tmp_path, capsys):
    code = trainer_train.main(["--model=mlp", "--augment=on", "--epochs=1", "--synthetic-samples=64",
                               f"--data-dir={tmp_path / 'none'}", f"--checkpoint-dir={tmp_path / 'c'}"])
    assert code == EXIT_CONFIG_ERROR and "--augment on needs image inputs" in capsys.readouterr().err


# --- trainer.prepare against a loopback server -----------------------------------------------------


class _Server:
    """Serves `files` on 127.0.0.1 (ephemeral port); `corrupt[name]` = how many first responses are damaged."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files, self.corrupt, self.requests = files, {}, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                outer.requests.append(self.path)
                body = outer.files.get(name)
                if body is None:
                    self.send_error(404)
                    return
                if outer.corrupt.get(name, 0) > 0:
                    outer.corrupt[name] -= 1
                    body = body[: len(body) // 2] + bytes(len(body) - len(body) // 2)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mirror/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def cifar_archive(tmp_path, monkeypatch):
    """A tiny cifar-10-python.tar.gz served on loopback; prepare's expected MD5 set to its own."""
    write_cifar10(tmp_path / "src", per_batch=8, test=8)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(tmp_path / "src" / datasets.CIFAR10_DIR, arcname=datasets.CIFAR10_DIR)
    blob = buf.getvalue()
    name = prepare.SOURCES["cifar10"].files[0][0]
    monkeypatch.setitem(prepare.SOURCES, "cifar10", prepare.Source(
        target=datasets.CIFAR10_DIR, mirrors=("http://192.0.2.1/never/",),
        files=((name, hashlib.md5(blob).hexdigest()),), archive=True))
    server = _Server({name: blob})
    yield server
    server.close()


def _prepare(server: _Server, data: Path, dataset: str = "cifar10", *extra: str) -> int:
    return prepare.main([f"--dataset={dataset}", f"--data-dir={data}", f"--base-url={server.url}",
                         "--retries=2", "--retry-delay=0", "--timeout=20", *extra])


def test_prepare_downloads_verifies_places_and_then_skips(tmp_path, cifar_archive):
    data = tmp_path / "data"
    assert _prepare(cifar_archive, data) == 0
    assert cifar_archive.requests == ["/mirror/cifar-10-python.tar.gz"]
    assert len(datasets.read_cifar10(data).train_labels) == 40
    assert sorted(p.name for p in data.iterdir()) == [".prepare-cifar10.lock", datasets.CIFAR10_DIR]  # no temp dir
    assert _prepare(cifar_archive, data) == 0
    assert len(cifar_archive.requests) == 1  # idempotent: present and valid, no request
    # a file changed on the volume no longer matches the manifest: fetched and placed again
    batch = data / datasets.CIFAR10_DIR / "data_batch_2"
    raw = bytearray(batch.read_bytes())
    raw[-200] ^= 0xFF  # a pixel: still a readable batch
    batch.write_bytes(bytes(raw))
    assert _prepare(cifar_archive, data) == 0
    assert len(cifar_archive.requests) == 2
    assert batch.read_bytes() == (tmp_path / "src" / datasets.CIFAR10_DIR / "data_batch_2").read_bytes()


def test_prepare_retries_a_corrupted_download(tmp_path, cifar_archive, capsys):
    cifar_archive.corrupt["cifar-10-python.tar.gz"] = 1
    assert _prepare(cifar_archive, tmp_path / "data") == 0
    assert len(cifar_archive.requests) == 2
    assert "event=retry" in capsys.readouterr().out


def test_prepare_fails_on_a_corrupted_file_and_places_nothing(tmp_path, cifar_archive, capsys):
    cifar_archive.corrupt["cifar-10-python.tar.gz"] = 99
    data = tmp_path / "data"
    assert _prepare(cifar_archive, data) == 1
    assert len(cifar_archive.requests) == 2  # --retries=2, then no other mirror with --base-url
    assert "md5" in capsys.readouterr().err
    assert sorted(p.name for p in data.iterdir()) == [".prepare-cifar10.lock"]


def test_prepare_fashion_mnist_files(tmp_path, monkeypatch):
    write_fashion_mnist(tmp_path / "src", train=20, test=10)
    files = {p.name: p.read_bytes() for p in (tmp_path / "src" / datasets.FASHION_MNIST_DIR).iterdir()}
    official = dict(prepare.SOURCES["fashion-mnist"].files)
    assert set(files) == set(official)  # the same four names as the official distribution
    monkeypatch.setitem(prepare.SOURCES, "fashion-mnist", prepare.Source(
        target=datasets.FASHION_MNIST_DIR, mirrors=(), archive=False,
        files=tuple((n, hashlib.md5(files[n]).hexdigest()) for n in official)))
    server = _Server(files)
    try:
        assert _prepare(server, tmp_path / "data", "fashion-mnist") == 0
    finally:
        server.close()
    assert len(server.requests) == 4
    assert datasets.read_fashion_mnist(tmp_path / "data").train_images.shape == (20, 1, 28, 28)


def test_prepare_official_sources():
    cifar, fashion = prepare.SOURCES["cifar10"], prepare.SOURCES["fashion-mnist"]
    assert cifar.mirrors == ("https://www.cs.toronto.edu/~kriz/",)
    assert cifar.files == (("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),)
    assert "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/" in fashion.mirrors
    assert all(len(md5) == 32 for _, md5 in fashion.files)


def test_augmentation_pads_with_the_fill_given_per_channel():
    """Normalised images pad with a normalised black pixel (-mean/std), as torchvision's RandomCrop
    pads the raw image before Normalize."""
    fill = torch.tensor([-1.5, -2.0, -2.5])
    batch = torch.ones(256, 3, 4, 4)
    out = trainer_train.augment_batch(batch, torch.Generator().manual_seed(0), padding=4, fill=fill)
    values = {tuple(out[i, :, y, x].tolist()) for i in range(256) for y in range(4) for x in range(4)}
    assert values == {(1.0, 1.0, 1.0), (-1.5, -2.0, -2.5)}  # image pixels or the fill, nothing else
