"""What the trainer's loop costs beside a bare PyTorch loop, on CPU; on a GPU, seconds per CIFAR-10 epoch.

    .venv/bin/python bench/trainer_overhead.py                     # 5 repeats, mlp, batch 128, 2 x 80 steps
    .venv/bin/python bench/trainer_overhead.py --repeats 3 --samples 2560 --model mlp
    .venv/bin/python bench/trainer_overhead.py --smallest          # 1 repeat, 1,280 images (CI: make bench-smoke)

Data: a CIFAR-10 "python version" directory written in a temp dir with --samples training images
(random colours, the official pickles; trainer.dataset_files writes them), read with trainer.datasets.
Each run is a fresh subprocess with --threads torch threads; the two kinds of run alternate:

  bare      the minimal loop: the training images normalised to float once, a random permutation
            per epoch, batch by batch forward / loss / backward / SGD step, no process group.
  trainer   `python -m trainer.train --dataset cifar10 --augment off` in the same process count
            (world 1, no process group), the same model, seed, batch size and number of steps.
  trainer+gloo  the same as a torchrun worker would be: RANK/WORLD_SIZE set, a gloo group of 1, DDP.
  trainer+aug   trainer with its on-device crop and flip (work the bare loop does not do).

samples/s is the training loop's only, after a first epoch that warms up (the trainer's own
`epoch` events; the bare loop timed the same way), so start-up, reading the files, evaluation and
checkpoints are outside it; `whole s` is the subprocess's wall time, all of that included.
overhead % = bare samples/s / trainer samples/s - 1, on the medians, and the median of the
same ratio taken repeat by repeat (paired). Prints Markdown and exits 0.

With a CUDA device it also trains ResNet-18 (the CIFAR variant) at batch 128 on a 50,000 / 10,000
image CIFAR-format set for --gpu-epochs epochs and prints seconds per epoch beside seed 002's
4.4 s/epoch (torchvision's ImageNet-stem ResNet-18 on 2 x A100, batch 128 per GPU); without one
it says so and skips that part.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(os.path.abspath(__file__)).parent.parent
sys.path.insert(0, str(PROJECT_ROOT))
sys.path.insert(0, str(PROJECT_ROOT / "workloads"))

SEED_002_SECONDS_PER_EPOCH = 4.4  # seed 002: "Start Epoch" lines ~4.43 s apart, 2 x A100, batch 128 per GPU


def write_dataset(data_dir: Path, train: int, test: int) -> None:
    """CIFAR-10's python layout via trainer.dataset_files' cPickle-exact writer (no numpy needed)."""
    import torch
    from trainer import datasets
    from trainer.dataset_files import CLASS_COLOURS, Py2Str, U8Array, py2_pickle

    root = data_dir / datasets.CIFAR10_DIR
    root.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    per_batch = train // 5
    for name in [*datasets.CIFAR10_TRAIN, datasets.CIFAR10_TEST]:
        n = test if name == datasets.CIFAR10_TEST else per_batch
        labels = torch.randint(0, 10, (n,), generator=g)
        colours = torch.tensor(CLASS_COLOURS, dtype=torch.float32)[labels]
        noise = torch.randint(-40, 41, (n, 3, 32, 32), generator=g).float()
        images = (colours.view(n, 3, 1, 1) + noise).clamp(0, 255).to(torch.uint8).contiguous()
        raw = ctypes.string_at(images.data_ptr(), images.nbytes)
        blob = {Py2Str(b"labels"): labels.tolist(), Py2Str(b"data"): U8Array((n, 3072), raw)}
        (root / name).write_bytes(py2_pickle(blob))


def bare_child(args: argparse.Namespace) -> dict:
    """The loop a user would write by hand, on the same data, model, seed and hyperparameters."""
    import torch
    from trainer import datasets
    from trainer.model import build_model

    torch.set_num_threads(args.threads)
    splits = datasets.read_cifar10(args.data_dir)
    mean = torch.tensor(splits.mean).view(1, 3, 1, 1)
    std = torch.tensor(splits.std).view(1, 3, 1, 1)
    x = (splits.train_images.float() / 255 - mean) / std
    y = splits.train_labels
    torch.manual_seed(0)
    model = build_model(args.model, (3, 32, 32), 10)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-5)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = len(x) // args.batch_size
    per_epoch = []
    g = torch.Generator().manual_seed(0)
    for _ in range(args.epochs):
        order = torch.randperm(len(x), generator=g)
        started = time.perf_counter()
        for i in range(steps):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        loss.item()
        per_epoch.append(steps * args.batch_size / (time.perf_counter() - started))
    return {"samples_per_s": per_epoch}


def trainer_child(args: argparse.Namespace, kind: str) -> dict:
    import contextlib
    import io

    import torch
    from trainer import train

    torch.set_num_threads(args.threads)
    if kind == "trainer+gloo":
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(args.port), GLOO_SOCKET_IFNAME="lo")
    with tempfile.TemporaryDirectory() as ckpt:
        argv = ["--dataset=cifar10", f"--model={args.model}", f"--epochs={args.epochs}",
                f"--batch-size={args.batch_size}", f"--data-dir={args.data_dir}", f"--checkpoint-dir={ckpt}",
                f"--lr={args.lr}", "--num-workers=0", "--checkpoint-every=0", f"--augment={'on' if kind == 'trainer+aug' else 'off'}"]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = train.main(argv)
        if code != 0:
            raise SystemExit(f"trainer exited {code}:\n{out.getvalue()[-2000:]}")
    events = [e for e in map(train.parse_event, out.getvalue().splitlines()) if e]
    return {"samples_per_s": [float(e["samples_per_s"]) for e in events if e["event"] == "epoch"]}


def gpu_child(args: argparse.Namespace) -> dict:
    from trainer import train

    with tempfile.TemporaryDirectory() as ckpt:
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = train.main(["--dataset=cifar10", "--model=resnet18", f"--epochs={args.gpu_epochs}",
                               "--batch-size=128", f"--data-dir={args.data_dir}", f"--checkpoint-dir={ckpt}",
                               "--checkpoint-every=0", "--warmup-epochs=1", "--lr=0.1", "--weight-decay=5e-4"])
        if code != 0:
            raise SystemExit(f"trainer exited {code}:\n{out.getvalue()[-2000:]}")
    lines = out.getvalue().splitlines()
    events = [e for e in map(train.parse_event, lines) if e]
    return {"epoch_seconds": [float(e["seconds"]) for e in events if e["event"] == "epoch"],
            "eval_seconds": [float(e["seconds"]) for e in events if e["event"] == "eval"],
            "result": next(r for r in map(train.parse_result, lines) if r)}


def run_child(kind: str, args: argparse.Namespace, data_dir: Path, port: int = 0) -> tuple[dict, float]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--data-dir", str(data_dir),
           "--model", args.model, "--batch-size", str(args.batch_size), "--epochs", str(args.epochs),
           "--threads", str(args.threads), "--lr", str(args.lr), "--port", str(port), "--gpu-epochs", str(args.gpu_epochs)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": str(args.threads)}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"trainer_overhead: {kind} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples", type=int, default=10240, help="training images (a multiple of 5)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3, help="the first one is a warm-up and not counted")
    parser.add_argument("--model", choices=("mlp", "resnet18"), default="mlp")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.01, help="small enough that neither run diverges")
    parser.add_argument("--kinds", default="bare,trainer,trainer+gloo,trainer+aug")
    parser.add_argument("--gpu-epochs", type=int, default=5)
    parser.add_argument("--gpu-samples", type=int, default=50000, help="training images of the GPU run (CIFAR-10's 50,000)")
    parser.add_argument("--smallest", action="store_true",
                        help="the smallest run (CI's smoke run): --repeats 1 --samples 1280 --epochs 2; "
                             "on a GPU --gpu-samples 1280 --gpu-epochs 2")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smallest:
        args.repeats, args.samples, args.epochs, args.gpu_samples, args.gpu_epochs = 1, 1280, 2, 1280, 2
    if args.child:
        result = (bare_child(args) if args.child == "bare" else gpu_child(args) if args.child == "gpu"
                  else trainer_child(args, args.child))
        print(json.dumps(result))
        return 0

    import torch

    kinds = args.kinds.split(",")
    print(f"CPU: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; Python {sys.version.split()[0]}, "
          f"torch {torch.__version__}, {args.threads} thread(s)\n")
    steps = args.samples // args.batch_size
    print(f"{args.model}, batch {args.batch_size}, {steps} steps per epoch, epochs 2..{args.epochs} timed, "
          f"{args.repeats} repeats, runs interleaved\n")
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        write_dataset(data_dir, args.samples, 1000)
        rates: dict[str, list[float]] = {k: [] for k in kinds}
        walls: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(args.repeats):
            for kind in kinds:
                out, wall = run_child(kind, args, data_dir, _free_port())
                rates[kind].append(statistics.median(out["samples_per_s"][1:] or out["samples_per_s"]))
                walls[kind].append(wall)
        print("| run | samples/s min | median | max | overhead % (medians) | overhead % (paired) | whole s (median) |")
        print("|---|---|---|---|---|---|---|")
        base = statistics.median(rates["bare"]) if "bare" in rates else None
        for kind in kinds:
            med = statistics.median(rates[kind])
            over = paired = "-"
            if base and kind != "bare":
                over = f"{(base / med - 1) * 100:+.1f}"
                # repeat by repeat (the bare run just before): robust to the machine's drift
                paired = f"{(statistics.median(b / t for b, t in zip(rates['bare'], rates[kind], strict=True)) - 1) * 100:+.1f}"
            print(f"| {kind} | {min(rates[kind]):.0f} | {med:.0f} | {max(rates[kind]):.0f} | {over} | {paired} | "
                  f"{statistics.median(walls[kind]):.2f} |")

        print()
        if not torch.cuda.is_available():
            print("GPU: no CUDA device here: seconds per CIFAR-10 epoch (ResNet-18, batch 128) not measured; "
                  f"seed 002: {SEED_002_SECONDS_PER_EPOCH} s/epoch on 2 x A100.")
            return 0
        gpu_dir = Path(tmp) / "cifar-full"
        write_dataset(gpu_dir, args.gpu_samples, max(args.gpu_samples // 5, 1000))
        out, wall = run_child("gpu", args, gpu_dir)
        timed = out["epoch_seconds"][1:] or out["epoch_seconds"]
        print(f"GPU: {torch.cuda.get_device_name(0)} x 1")
        print("| run | s/epoch min | median | max | eval s (median) | seed 002 s/epoch |")
        print("|---|---|---|---|---|---|")
        print(f"| ResNet-18 (CIFAR stem), batch 128, {args.gpu_samples // 128} steps/epoch, 1 GPU | {min(timed):.2f} | "
              f"{statistics.median(timed):.2f} | {max(timed):.2f} | {statistics.median(out['eval_seconds']):.2f} | "
              f"{SEED_002_SECONDS_PER_EPOCH} (ImageNet-stem ResNet-18, 2 x A100, 195 steps/epoch each) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
