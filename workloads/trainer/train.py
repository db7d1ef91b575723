"""DDP trainer started by torchrun: `python -m trainer.train [options]` in every worker process.

- nccl on GPUs, gloo on CPU (chosen automatically); bf16 autocast and channels_last on GPU only;
- DistributedSampler with set_epoch, per-rank seeding;
- atomic checkpoints (temp file, fsync, os.replace) every N steps and every N epochs, written by
  global rank 0 into --checkpoint-dir (the shared volume); the newest readable one is resumed
  automatically, mid-epoch included;
- a synthetic, learnable dataset by default; `train.pt` (or `train.npz`) in --data-dir when present:
  tensors `inputs` [N, ...] (float) and `targets` [N] (int class ids). Nothing is downloaded.

Log lines are `trainer: event=<name> key=value ...` (parse_event reads them back); rank 0 logs
loss and samples/s per epoch. `--preflight` only checks the configuration: the launch script runs
it before torchrun, because torchrun reports any worker failure as exit code 1 after its restarts,
so EXIT_CONFIG_ERROR (3) reaches the pod only from the preflight.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from trainer import EXIT_CONFIG_ERROR, record_exit_code

CHECKPOINT_RE = re.compile(r"^step-(\d{9})\.pt$")
DATA_FILES = ("train.pt", "train.npz")


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
    p.add_argument("--model", choices=("mlp", "resnet18"), default="resnet18")
    p.add_argument("--data-dir", default="/mnt/shared/data", help=f"uses {' or '.join(DATA_FILES)} from here when present")
    p.add_argument("--synthetic-samples", type=int, default=8192, help="size of the synthetic dataset")
    p.add_argument("--checkpoint-dir", default="/mnt/shared/checkpoints/default")
    p.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints (0: only the last epoch)")
    p.add_argument("--checkpoint-every-steps", type=int, default=0, help="also every N optimizer steps (0: off)")
    p.add_argument("--keep-checkpoints", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=2, help="DataLoader workers per rank (0 on CPU)")
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
    for name in DATA_FILES:
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
    from torch.utils.data import DataLoader
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

    dataset, source = load_dataset(args)
    if len(dataset) < world * args.batch_size:
        raise ConfigError(f"dataset {source} has {len(dataset)} samples: fewer than one batch per rank "
                          f"({world} ranks x --batch-size {args.batch_size})")
    classes = int(dataset.tensors[1].max()) + 1
    sample_shape = tuple(dataset.tensors[0].shape[1:])

    torch.manual_seed(args.seed)  # identical initial weights (DDP also broadcasts rank 0's)
    model = build_model(args.model, sample_shape, classes).to(device)
    channels_last = use_cuda and len(sample_shape) == 3
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None) if distributed else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-5)
    # Per-rank seeding for anything random from here on (augmentation, dropout); data order comes
    # from the sampler's own seed + epoch, so it is the same whatever the rank count restarts with.
    torch.manual_seed(args.seed + rank)
    random.seed(args.seed + rank)

    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True)
    steps_per_epoch = len(sampler) // args.batch_size
    total_steps = steps_per_epoch * args.epochs
    ckpt_dir = Path(args.checkpoint_dir)
    start_epoch, skip_batches, global_step = 0, 0, 0

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
        if state.get("world_size") != world:
            # another sharding: the epoch's remaining samples are not the same set; redo the epoch
            skip_batches, global_step = 0, start_epoch * steps_per_epoch
        if skip_batches >= steps_per_epoch:
            start_epoch, skip_batches = start_epoch + 1, 0
        if rank == 0:
            log("resume", checkpoint=path, step=state["global_step"], epoch=start_epoch, batch=skip_batches)
    elif rank == 0:
        log("start", dataset=source, samples=len(dataset), model=args.model, world_size=world, backend=backend,
            steps_per_epoch=steps_per_epoch, total_steps=total_steps)

    def checkpoint(epoch: int, batch_in_epoch: int) -> None:
        if rank == 0:
            path = save_checkpoint(ckpt_dir, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                "batch_in_epoch": batch_in_epoch, "global_step": global_step, "world_size": world,
            }, args.keep_checkpoints)
            log("checkpoint", step=global_step, epoch=epoch, path=path)

    loss_fn = torch.nn.CrossEntropyLoss()
    ddp.train()
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        loader = DataLoader(dataset, batch_size=args.batch_size, drop_last=True,
                            sampler=SkipSampler(sampler, skip_batches * args.batch_size),
                            num_workers=args.num_workers if use_cuda else 0, pin_memory=use_cuda)
        first_batch, skip_batches = skip_batches, 0
        started = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        seen = 0
        last_saved = -1
        for batch, (inputs, targets) in enumerate(loader, start=first_batch):
            inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            if channels_last:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_cuda):
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
        if rank == 0:
            log("epoch", epoch=epoch + 1, epochs=args.epochs, loss=mean_loss, samples=samples,
                samples_per_s=samples / max(elapsed, 1e-9), seconds=elapsed, step=global_step)
        due = (epoch + 1 == args.epochs
               or (args.checkpoint_every and (epoch + 1) % args.checkpoint_every == 0)
               or (args.checkpoint_every_steps and global_step % args.checkpoint_every_steps == 0))
        if due and last_saved != global_step:
            checkpoint(epoch + 1, 0)
    if distributed:
        dist.barrier()
    if rank == 0:
        log("done", step=global_step, epochs=args.epochs)
    if distributed:
        dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        check_config(args)
        if args.preflight:
            if any((Path(args.data_dir) / f).is_file() for f in DATA_FILES):
                load_dataset(args)
            log("preflight", status="ok", checkpoint_dir=args.checkpoint_dir)
            return 0
        return train(args)
    except ConfigError as exc:
        print(f"trainer: event=fatal exit={EXIT_CONFIG_ERROR} reason={shlex.quote(str(exc))}", file=sys.stderr, flush=True)
        record_exit_code(args.exit_code_file, EXIT_CONFIG_ERROR)
        return EXIT_CONFIG_ERROR


if __name__ == "__main__":
    sys.exit(main())
