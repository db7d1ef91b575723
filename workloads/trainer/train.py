"""DDP trainer started by torchrun: `python -m trainer.train [options]` in every worker process.

- nccl on GPUs, gloo on CPU (chosen automatically); bf16 autocast and channels_last on GPU only;
- DistributedSampler with set_epoch, per-rank seeding;
- atomic checkpoints (temp file, fsync, os.replace) every N steps and every N epochs, written by
  global rank 0 into --checkpoint-dir (the shared volume); the newest readable one is resumed
  automatically, mid-epoch included;
- --dataset auto (the default): `train.pt` (or `train.npz`) in --data-dir when present (tensors
  `inputs` [N, ...] (float) and `targets` [N] (int class ids)), else a synthetic, learnable dataset;
  --dataset cifar10 / fashion-mnist: the official files in --data-dir (datasets.py), evaluated on
  their test split after every epoch (DistributedSampler shards, correct/total all-reduced). Nothing
  is downloaded here: `python -m trainer.prepare` does that once, onto the shared volume;
- images are normalised once at load (on a GPU the whole set is kept on the device, so a batch
  is one gather); augmentation runs on the device on each whole batch (random crop with 4 pixels
  of black padding and a horizontal flip; --augment, on for cifar10);
- SGD (--momentum, --weight-decay); --warmup-epochs W switches the constant --lr to a linear
  warmup over W epochs then a cosine decay to 0, set per optimizer step from the global step (so a
  resumed run continues the same curve);
- with a test split, rank 0 ends with one JSON line `trainer: result {...}` (final and best test
  accuracy, samples/s, seconds per epoch) and writes the same object to <checkpoint-dir>/result.json.

Log lines are `trainer: event=<name> key=value ...` (parse_event reads them back); rank 0 logs
loss and samples/s per epoch. `--preflight` only checks the configuration: the launch script runs
it before torchrun, because torchrun reports any worker failure as exit code 1 after its restarts,
so EXIT_CONFIG_ERROR (3) reaches the pod only from the preflight.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import random
import re
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import EXIT_CONFIG_ERROR, datasets, record_exit_code

CHECKPOINT_RE = re.compile(r"^step-(\d{9})\.pt$")
DATA_FILES = ("train.pt", "train.npz")
DATASETS = ("auto", "synthetic", *datasets.READERS)
RESULT_FILE = "result.json"
# A dataset up to this size is kept on the GPU whole; a larger one streams from host memory.
DEVICE_DATA_MAX_BYTES = 4 << 30


class ConfigError(Exception):
    """The trainer's own configuration cannot work; retrying will not help."""


def log(event: str, **fields: Any) -> None:
    parts = [f"event={event}"]
    for key, value in fields.items():
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        parts.append(f"{key}={shlex.quote(text) if text == '' or any(c.isspace() for c in text) else text}")
    print("trainer: " + " ".join(parts), flush=True)


def parse_event(line: str) -> dict[str, str] | None:
    """A `trainer: event=...` line as a dict (None for any other line)."""
    idx = line.find("trainer: event=")
    if idx < 0:
        return None
    return dict(tok.split("=", 1) for tok in shlex.split(line[idx + len("trainer: "):]) if "=" in tok)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--model", choices=("mlp", "resnet18"), default="resnet18",
                   help="resnet18 is the CIFAR variant: 3x3 stem, no max-pool")
    p.add_argument("--dataset", choices=DATASETS, default="auto",
                   help="auto: train.pt/train.npz in --data-dir if present, else synthetic")
    p.add_argument("--warmup-epochs", type=float, default=None,
                   help="linear warmup over this many epochs, then cosine decay to 0 (absent: constant --lr)")
    p.add_argument("--weight-decay", type=float, default=1e-5)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--augment", choices=("auto", "on", "off"), default="auto",
                   help="random crop (4 px padding) and horizontal flip on the device; auto: on for cifar10")
    p.add_argument("--data-dir", default="/mnt/shared/data", help=f"--dataset auto: {' or '.join(DATA_FILES)} from here when present; cifar10, fashion-mnist: "
                   "their official files (python -m trainer.prepare puts them here)")
    p.add_argument("--synthetic-samples", type=int, default=8192, help="size of the synthetic dataset")
    p.add_argument("--checkpoint-dir", default="/mnt/shared/checkpoints/default")
    p.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints (0: only the last epoch)")
    p.add_argument("--checkpoint-every-steps", type=int, default=0, help="also every N optimizer steps (0: off)")
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=2, help="DataLoader workers per rank, used only on a GPU when the dataset stays in host memory")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--throttle-ms", type=float, default=0.0,
                   help="sleep per step; slows a tiny CPU run down so the kill-and-resume test can hit it mid-run")
    p.add_argument("--preflight", action="store_true", help="check the configuration and exit (3 when unusable)")
    p.add_argument("--exit-code-file", help="write a fatal exit code here for the launch script (see launch.py)")
    return p.parse_args(argv)


def check_config(args: argparse.Namespace) -> None:
    """Everything that can be known wrong before any process group starts."""
    for name in ("epochs", "batch_size", "synthetic_samples", "keep_checkpoints"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("checkpoint_every", "checkpoint_every_steps", "num_workers", "throttle_ms"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.lr <= 0:
        raise ConfigError(f"--lr must be > 0, got {args.lr}")
    if args.warmup_epochs is not None and not 0 <= args.warmup_epochs <= args.epochs:
        raise ConfigError(f"--warmup-epochs must be between 0 and --epochs ({args.epochs}), got {args.warmup_epochs}")
    if args.weight_decay < 0:
        raise ConfigError(f"--weight-decay must be >= 0, got {args.weight_decay}")
    if not 0 <= args.momentum < 1:
        raise ConfigError(f"--momentum must be in [0, 1), got {args.momentum}")
    ckpt = Path(args.checkpoint_dir)
    try:
        ckpt.mkdir(parents=True, exist_ok=True)
        probe = ckpt / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--checkpoint-dir {ckpt} is not writable by uid {os.getuid()}: {exc.strerror}") from exc
    data_dir = Path(args.data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"--data-dir {data_dir} is not a directory")


# --- data ---------------------------------------------------------------------------------------

def _validate_tensors(inputs: Any, targets: Any, source: str) -> None:
    import torch

    if not isinstance(inputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise ConfigError(f"{source}: needs tensors 'inputs' and 'targets'")
    if inputs.ndim < 2 or targets.ndim != 1 or len(inputs) != len(targets) or len(inputs) == 0:
        raise ConfigError(f"{source}: inputs [N, ...] and targets [N] expected, got {tuple(inputs.shape)} and {tuple(targets.shape)}")
    if not inputs.is_floating_point() or targets.is_floating_point() or int(targets.min()) < 0:
        raise ConfigError(f"{source}: inputs must be float and targets non-negative class ids")


def load_dataset(args: argparse.Namespace) -> tuple[Any, str]:
    """(TensorDataset, description): the file on the data volume when present, else synthetic."""
    import torch
    from torch.utils.data import TensorDataset

    data_dir = Path(args.data_dir)
    for name in DATA_FILES if args.dataset == "auto" else ():
        path = data_dir / name
        if not path.is_file():
            continue
        try:
            if name.endswith(".pt"):
                blob = torch.load(path, map_location="cpu", weights_only=True)
                inputs, targets = blob.get("inputs"), blob.get("targets")
            else:
                import numpy as np  # in the workload image; only needed for .npz

                with np.load(path) as blob:
                    inputs, targets = torch.from_numpy(blob["inputs"]), torch.from_numpy(blob["targets"])
        except ConfigError:
            raise
        except Exception as exc:  # any unreadable file is a configuration problem, not a transient one
            raise ConfigError(f"{path}: cannot be read as a dataset ({type(exc).__name__}: {exc})") from exc
        _validate_tensors(inputs, targets, str(path))
        return TensorDataset(inputs.float(), targets.long()), f"file:{path}"
    # Synthetic: the same on every rank (fixed generator), learnable (labels from a fixed projection).
    g = torch.Generator().manual_seed(1234)
    shape = (3, 32, 32) if args.model == "resnet18" else (32,)
    inputs = torch.randn(args.synthetic_samples, *shape, generator=g)
    classes = 10
    projection = torch.randn(int(torch.tensor(shape).prod()), classes, generator=g)
    targets = (inputs.flatten(1) @ projection).argmax(dim=1)
    return TensorDataset(inputs, targets), f"synthetic:{args.synthetic_samples}x{'x'.join(map(str, shape))}"


class SkipSampler:
    """Drops the first `skip` indices of a sampler: resuming mid-epoch without reloading those batches."""

    def __init__(self, base: Any, skip: int = 0) -> None:
        self.base, self.skip = base, skip

    def __iter__(self):
        return itertools.islice(iter(self.base), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.base) - self.skip)


@dataclass
class TrainData:
    """What the training loop needs from a dataset: tensors, and how to turn a batch into inputs."""

    train: Any  # TensorDataset(inputs, targets)
    test: Any | None  # TensorDataset, or None: no evaluation
    source: str
    name: str  # "cifar10", "fashion-mnist", or "" for a file or synthetic data
    mean: tuple[float, ...] | None  # per channel, for uint8 images
    std: tuple[float, ...] | None
    classes: int


def load_data(args: argparse.Namespace) -> TrainData:
    from torch.utils.data import TensorDataset

    if args.dataset in datasets.READERS:
        try:
            splits = datasets.read(args.dataset, args.data_dir)
        except datasets.DatasetError as exc:
            raise ConfigError(str(exc)) from exc
        return TrainData(TensorDataset(splits.train_images, splits.train_labels),
                         TensorDataset(splits.test_images, splits.test_labels),
                         f"{args.dataset}:{Path(args.data_dir)}", args.dataset, splits.mean, splits.std, datasets.CLASSES)
    train, source = load_dataset(args)
    return TrainData(train, None, source, "", None, None, int(train.tensors[1].max()) + 1)


def lr_at(step: int, base_lr: float, total_steps: int, warmup_steps: int) -> float:
    """The learning rate for optimizer step `step` (0-based): linear warmup to base_lr over
    warmup_steps, then a half cosine from base_lr down to 0 at total_steps."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def augment_batch(images: Any, generator: Any, padding: int = 4, fill: Any = None) -> Any:
    """Random crop to the same size from the padded images and a horizontal flip with probability
    1/2, each sample its own, as one gather over the whole batch on its device. The padding is 0,
    or `fill` per channel ([C]: a black pixel once normalised, as torchvision pads before it
    normalises). Returns [N, C, H, W] laid out channels-last (a permuted view of the gather)."""
    import torch

    n, c, h, w = images.shape
    dev = images.device
    if fill is None:
        padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
    else:
        padded = fill.to(images.dtype).view(1, c, 1, 1).repeat(n, 1, h + 2 * padding, w + 2 * padding)
        padded[:, :, padding:padding + h, padding:padding + w] = images
    padded = padded.permute(0, 2, 3, 1)
    dy = torch.randint(0, 2 * padding + 1, (n, 1, 1), generator=generator, device=dev)
    dx = torch.randint(0, 2 * padding + 1, (n, 1, 1), generator=generator, device=dev)
    flip = torch.rand((n, 1, 1), generator=generator, device=dev) < 0.5
    cols = torch.arange(w, device=dev).view(1, 1, w)
    rows = dy + torch.arange(h, device=dev).view(1, h, 1)
    cols = dx + torch.where(flip, (w - 1) - cols, cols)
    return padded[torch.arange(n, device=dev).view(n, 1, 1), rows, cols].permute(0, 3, 1, 2)


def augment_seed(seed: int, rank: int, step: int) -> int:
    """Augmentation is reseeded every step from (seed, rank, step): a resumed run draws the same
    crops and flips an uninterrupted one would have."""
    return ((seed * 1_000_003 + rank) * 1_000_003 + step) & ((1 << 63) - 1)


def normalise_images(images: Any, mean: tuple[float, ...], std: tuple[float, ...], chunk: int = 8192) -> Any:
    """uint8 [N, C, H, W] -> float32 (x / 255 - mean) / std, on the images' device, a chunk at a
    time (peak memory: the uint8 set plus the float one). Done once for the whole set, not per batch."""
    import torch

    scale = (1.0 / (255.0 * torch.tensor(std, device=images.device))).view(1, -1, 1, 1)
    shift = (torch.tensor(mean, device=images.device) / torch.tensor(std, device=images.device)).view(1, -1, 1, 1)
    out = torch.empty(images.shape, dtype=torch.float32, device=images.device)
    for start in range(0, len(images), chunk):
        out[start:start + chunk] = images[start:start + chunk].float().mul_(scale).sub_(shift)
    return out


def eval_indices(n: int, rank: int, world: int) -> list[int]:
    """This rank's share of the test set: DistributedSampler's, without the padding it adds to make
    the shares equal (a padded sample would be counted twice)."""
    from torch.utils.data.distributed import DistributedSampler

    sampler: DistributedSampler[int] = DistributedSampler(
        range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=False)  # type: ignore[arg-type]  # any sized sequence
    return list(sampler)[:len(range(rank, n, world))]


def evaluate(model: Any, test: Any, indices: list[int], batch_size: int, device: Any, distributed: bool,
             autocast: bool = False) -> dict[str, float]:
    """Test loss and accuracy over every rank's indices (sums all-reduced)."""
    import torch
    import torch.distributed as dist

    images, labels = test.tensors
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss, correct, count
    was_training = model.training
    model.eval()
    with torch.no_grad():
        order = torch.tensor(indices, dtype=torch.long)
        for start in range(0, len(order), batch_size):
            ids = order[start:start + batch_size].to(images.device)
            x = images[ids].to(device, non_blocking=True)
            y = labels[ids].to(device, non_blocking=True)
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = model(x)
            sums[0] += torch.nn.functional.cross_entropy(logits.float(), y, reduction="sum").double()
            sums[1] += (logits.argmax(dim=1) == y).sum()
            sums[2] += len(y)
    model.train(was_training)
    if distributed:
        dist.all_reduce(sums)
    loss, correct, total = sums.tolist()
    return {"loss": loss / max(total, 1), "accuracy": correct / max(total, 1), "correct": int(correct), "total": int(total)}


def write_result(ckpt_dir: Path, result: dict) -> Path:
    """The final result as one JSON line in the log and in <checkpoint-dir>/result.json (atomic)."""
    line = json.dumps(result, sort_keys=True)
    print(f"trainer: result {line}", flush=True)
    path = ckpt_dir / RESULT_FILE
    tmp = ckpt_dir / f".tmp-{RESULT_FILE}.{os.getpid()}"
    tmp.write_text(line + "\n")
    os.replace(tmp, path)
    return path


def parse_result(line: str) -> dict | None:
    idx = line.find("trainer: result ")
    return json.loads(line[idx + len("trainer: result "):]) if idx >= 0 else None


# --- model --------------------------------------------------------------------------------------

def build_model(kind: str, sample_shape: tuple[int, ...], classes: int) -> Any:
    from torch import nn

    if kind == "mlp":
        features = 1
        for d in sample_shape:
            features *= d
        return nn.Sequential(nn.Flatten(), nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))
    if len(sample_shape) != 3:
        raise ConfigError(f"--model resnet18 needs image inputs [N, C, H, W], got samples of shape {sample_shape}")

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
            )
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())
            self.act = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.act(self.body(x) + self.skip(x))

    # ResNet-18 (2-2-2-2 basic blocks) with the small-image stem used for CIFAR-10 (seed 002).
    layers: list[nn.Module] = [nn.Conv2d(sample_shape[0], 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


# --- checkpoints --------------------------------------------------------------------------------

def checkpoint_steps(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Completed checkpoints (temp files never match), newest first."""
    found = []
    for p in ckpt_dir.glob("step-*.pt"):
        if m := CHECKPOINT_RE.match(p.name):
            found.append((int(m[1]), p))
    return sorted(found, reverse=True)


def newest_valid_checkpoint(ckpt_dir: Path) -> tuple[Path, dict] | None:
    import torch

    for _, path in checkpoint_steps(ckpt_dir):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            if {"model", "optimizer", "epoch", "batch_in_epoch", "global_step"} <= set(state):
                return path, state
        except Exception as exc:  # a truncated or foreign file: skip to the previous one
            log("checkpoint_skipped", path=path, error=type(exc).__name__)
    return None


def save_checkpoint(ckpt_dir: Path, state: dict, keep: int) -> Path:
    """Write to a temp file in the same directory, fsync, then rename: a reader never sees half a file."""
    import torch

    final = ckpt_dir / f"step-{state['global_step']:09d}.pt"
    tmp = ckpt_dir / f".tmp-{final.name}.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    try:
        dir_fd = os.open(ckpt_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass  # some network filesystems refuse fsync on a directory; the rename is still atomic
    for _, old in checkpoint_steps(ckpt_dir)[keep:]:
        old.unlink(missing_ok=True)
    return final


# --- training -----------------------------------------------------------------------------------

def train(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    if backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("--backend nccl needs a GPU; none is visible")
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group(backend=backend, device_id=device if use_cuda else None)
    log("joined", rank=rank, local_rank=local_rank, world_size=world, backend=backend if distributed else "none",
        device=device, restart=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), pid=os.getpid())

    data = load_data(args)
    dataset, source = data.train, data.source
    if len(dataset) < world * args.batch_size:
        raise ConfigError(f"dataset {source} has {len(dataset)} samples: fewer than one batch per rank "
                          f"({world} ranks x --batch-size {args.batch_size})")
    classes = data.classes
    sample_shape = tuple(dataset.tensors[0].shape[1:])
    augment = args.augment == "on" or (args.augment == "auto" and data.name == "cifar10")
    if augment and len(sample_shape) != 3:
        raise ConfigError(f"--augment on needs image inputs [N, C, H, W], got samples of shape {sample_shape}")

    def place(split: Any) -> tuple[Any, bool]:
        """On a GPU a split that fits stays there whole: a batch is then one gather, with no host
        loader, no per-step copy and no worker processes. uint8 images are normalised once, here."""
        x, y = split.tensors
        float_bytes = x.numel() * 4 + y.nbytes
        at = device if use_cuda and float_bytes <= DEVICE_DATA_MAX_BYTES else torch.device("cpu")
        x, y = x.to(at), y.to(at)
        if data.mean is not None and data.std is not None and not x.is_floating_point():
            x = normalise_images(x, data.mean, data.std)
        return TensorDataset(x, y), at.type == "cuda"

    dataset, on_device = place(dataset)
    test = place(data.test)[0] if data.test is not None else None
    fill = None  # augmentation pads with black pixels: 0, or their normalised value
    if data.mean is not None and data.std is not None:
        fill = torch.tensor([-m / s for m, s in zip(data.mean, data.std, strict=True)], device=device)

    torch.manual_seed(args.seed)  # identical initial weights (DDP also broadcasts rank 0's)
    model = build_model(args.model, sample_shape, classes).to(device)
    channels_last = use_cuda and len(sample_shape) == 3
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    # A world of 1 has nothing to synchronise: DDP would only add its bucket copies and, on gloo,
    # an all-reduce per step (measured: more than the step itself for a small model on CPU).
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None) if distributed and world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    # Per-rank seeding for anything random from here on (dropout); data order comes from the
    # sampler's own seed + epoch, so it is the same whatever the rank count restarts with, and
    # augmentation is reseeded per step (augment_seed).
    torch.manual_seed(args.seed + rank)
    random.seed(args.seed + rank)
    aug_gen = torch.Generator(device=device) if augment else None

    sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed,
                                                          drop_last=True)
    steps_per_epoch = len(sampler) // args.batch_size
    total_steps = steps_per_epoch * args.epochs
    warmup_steps = round(args.warmup_epochs * steps_per_epoch) if args.warmup_epochs is not None else None
    eval_ids = eval_indices(len(test), rank, world) if test is not None else []
    ckpt_dir = Path(args.checkpoint_dir)
    start_epoch, skip_batches, global_step = 0, 0, 0
    best: dict[str, Any] = {}  # the best eval so far, kept in the checkpoints
    last_eval: dict[str, Any] = {}

    # Resume: rank 0 picks the checkpoint and tells everyone its step (a plain tensor: object
    # collectives need numpy), so all ranks load the same one from the shared volume.
    found = newest_valid_checkpoint(ckpt_dir) if rank == 0 else None
    choice = torch.tensor([found[1]["global_step"] if found else -1], dtype=torch.int64, device=device)
    if distributed:
        dist.broadcast(choice, src=0)
    if int(choice.item()) >= 0:
        path = found[0] if found else ckpt_dir / f"step-{int(choice.item()):09d}.pt"
        state = found[1] if found else torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, skip_batches, global_step = state["epoch"], state["batch_in_epoch"], state["global_step"]
        best, last_eval = dict(state.get("best_eval") or {}), dict(state.get("last_eval") or {})
        if state.get("world_size") != world:
            # another sharding: the epoch's remaining samples are not the same set; redo the epoch
            skip_batches, global_step = 0, start_epoch * steps_per_epoch
        if skip_batches >= steps_per_epoch:
            start_epoch, skip_batches = start_epoch + 1, 0
        if rank == 0:
            log("resume", checkpoint=path, step=state["global_step"], epoch=start_epoch, batch=skip_batches)
    elif rank == 0:
        log("start", dataset=source, samples=len(dataset), model=args.model, world_size=world, backend=backend,
            steps_per_epoch=steps_per_epoch, total_steps=total_steps,
            **({"test_samples": len(test), "augment": int(augment)} if test is not None else {}),
            **({"warmup_steps": warmup_steps} if warmup_steps is not None else {}))

    def checkpoint(epoch: int, batch_in_epoch: int) -> None:
        if rank == 0:
            path = save_checkpoint(ckpt_dir, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                "batch_in_epoch": batch_in_epoch, "global_step": global_step, "world_size": world,
                "best_eval": best, "last_eval": last_eval,
            }, args.keep_checkpoints)
            log("checkpoint", step=global_step, epoch=epoch, path=path)

    loss_fn = torch.nn.CrossEntropyLoss()

    def autocast() -> Any:  # entering a disabled autocast still costs a few microseconds a step
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16) if use_cuda else contextlib.nullcontext()

    timed: list[tuple[int, float]] = []  # (samples, seconds) of each epoch trained in this process
    full_epoch_seconds: list[float] = []
    ddp.train()
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        started = time.perf_counter()
        # The epoch's order as one index tensor; a batch is one fancy-indexing read of the tensors
        # through a slice of it (not batch_size reads and a stack, nor a list parsed per step).
        order = torch.tensor(list(SkipSampler(sampler, skip_batches * args.batch_size)), dtype=torch.long)
        batches = order[:len(order) // args.batch_size * args.batch_size].split(args.batch_size)
        if use_cuda and not on_device:  # host memory: pinned, and worker processes if asked for
            loader: Any = DataLoader(dataset, batch_size=None, sampler=batches, num_workers=args.num_workers,
                                     pin_memory=True)
        else:
            all_inputs, all_targets = dataset.tensors
            loader = ((all_inputs[ids], all_targets[ids]) for ids in order.to(all_inputs.device).split(args.batch_size)
                      if len(ids) == args.batch_size)
        first_batch, skip_batches = skip_batches, 0
        loss_sum = torch.zeros((), device=device)
        seen = 0
        last_saved = -1
        lr = optimizer.param_groups[0]["lr"]
        for batch, (inputs, targets) in enumerate(loader, start=first_batch):
            inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            if aug_gen is not None:
                aug_gen.manual_seed(augment_seed(args.seed, rank, global_step))
                inputs = augment_batch(inputs, aug_gen, fill=fill)
            inputs = inputs.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
            if warmup_steps is not None:
                lr = lr_at(global_step, args.lr, total_steps, warmup_steps)
                for group in optimizer.param_groups:
                    group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_fn(ddp(inputs), targets)
            loss.backward()
            optimizer.step()
            global_step += 1
            loss_sum += loss.detach().float()
            seen += 1
            if args.throttle_ms:
                time.sleep(args.throttle_ms / 1000)
            if args.checkpoint_every_steps and global_step % args.checkpoint_every_steps == 0 and batch + 1 < steps_per_epoch:
                checkpoint(epoch, batch + 1)
                last_saved = global_step
        elapsed = time.perf_counter() - started
        stats = torch.stack([loss_sum, torch.tensor(float(seen), device=device)])
        if distributed:
            dist.all_reduce(stats)
        mean_loss = (stats[0] / stats[1].clamp(min=1)).item()
        samples = int(stats[1].item()) * args.batch_size
        timed.append((samples, elapsed))
        if first_batch == 0:
            full_epoch_seconds.append(elapsed)
        if rank == 0:
            log("epoch", epoch=epoch + 1, epochs=args.epochs, loss=mean_loss, samples=samples,
                samples_per_s=samples / max(elapsed, 1e-9), seconds=elapsed, step=global_step,
                **({"lr": lr} if warmup_steps is not None else {}))
        if test is not None:
            started = time.perf_counter()
            last_eval = {"epoch": epoch + 1, **evaluate(model, test, eval_ids, args.batch_size, device, distributed,
                                                         autocast=use_cuda)}
            if not best or last_eval["accuracy"] > best["accuracy"]:
                best = dict(last_eval)
            if rank == 0:
                log("eval", epoch=epoch + 1, loss=last_eval["loss"], accuracy=last_eval["accuracy"],
                    correct=last_eval["correct"], total=last_eval["total"], seconds=time.perf_counter() - started)
        due = (epoch + 1 == args.epochs
               or (args.checkpoint_every and (epoch + 1) % args.checkpoint_every == 0)
               or (args.checkpoint_every_steps and global_step % args.checkpoint_every_steps == 0))
        if due and last_saved != global_step:
            checkpoint(epoch + 1, 0)
    if distributed:
        dist.barrier()
    if rank == 0:
        log("done", step=global_step, epochs=args.epochs)
        if test is not None:
            trained = sum(n for n, _ in timed)
            seconds = sum(t for _, t in timed)
            write_result(ckpt_dir, {
                "dataset": data.name, "model": args.model, "epochs": args.epochs, "steps": global_step,
                "world_size": world, "batch_size_per_rank": args.batch_size, "augment": augment,
                "final_test_accuracy": last_eval.get("accuracy"), "final_test_loss": last_eval.get("loss"),
                "best_test_accuracy": best.get("accuracy"), "best_epoch": best.get("epoch"),
                # this process's epochs only (a resumed run times what it trained)
                "samples_per_s": trained / seconds if seconds > 0 else None,
                "seconds_per_epoch": sorted(full_epoch_seconds)[len(full_epoch_seconds) // 2] if full_epoch_seconds else None,
                "epochs_timed": len(timed),
            })
    if distributed:
        dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_config(args)
        if args.preflight:
            if args.dataset in datasets.READERS or (
                    args.dataset == "auto" and any((Path(args.data_dir) / f).is_file() for f in DATA_FILES)):
                load_data(args)
            log("preflight", status="ok", checkpoint_dir=args.checkpoint_dir)
            return 0
        return train(args)
    except ConfigError as exc:
        print(f"trainer: event=fatal exit={EXIT_CONFIG_ERROR} reason={shlex.quote(str(exc))}", file=sys.stderr, flush=True)
        record_exit_code(args.exit_code_file, EXIT_CONFIG_ERROR)
        return EXIT_CONFIG_ERROR


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown: every file is closed and renamed into place by now, and at
    # C++ static destruction c10d/gloo threads still joinable can abort a finished worker ("terminate
    # called without an active exception", SIGABRT), which torchrun takes for a failure and restarts
    # the whole group for (seen in CI after a completed run).
    os._exit(code)
