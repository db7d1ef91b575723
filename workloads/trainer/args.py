"""The trainer's command line: its options, and the checks that can fail before any process group
starts (ConfigError: exit 3, retrying will not help)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from trainer import datasets

DESCRIPTION = "DDP trainer started by torchrun: `python -m trainer.train [options]` in every worker process."
DATA_FILES = ("train.pt", "train.npz")
DATASETS = ("auto", "synthetic", *datasets.READERS)


class ConfigError(Exception):
    """The trainer's own configuration cannot work; retrying will not help."""



def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.train", description=DESCRIPTION)
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

