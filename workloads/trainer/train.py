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

This module is the entry point; the work lives beside it, one job a module: args (options and
their checks), training_data (load, place, augment), model, training_loop, evaluation,
checkpoints and events (log lines and the result).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from trainer import EXIT_CONFIG_ERROR, datasets, record_exit_code
from trainer.args import DATA_FILES, DATASETS, ConfigError, check_config, parse_args
from trainer.checkpoints import CHECKPOINT_RE, checkpoint_steps, newest_valid_checkpoint, save_checkpoint
from trainer.evaluation import eval_indices, evaluate
from trainer.events import RESULT_FILE, log, parse_event, parse_result, write_result
from trainer.model import build_model
from trainer.training_data import (
    DEVICE_DATA_MAX_BYTES,
    SkipSampler,
    TrainData,
    augment_batch,
    augment_seed,
    load_data,
    load_dataset,
    normalise_images,
)
from trainer.training_loop import lr_at, train

# Every name this module had before it was split, for the tests, the benchmarks and anyone who
# imported them from here.
__all__ = ["CHECKPOINT_RE", "DATASETS", "DATA_FILES", "DEVICE_DATA_MAX_BYTES", "RESULT_FILE", "ConfigError",
           "SkipSampler", "TrainData", "augment_batch", "augment_seed", "build_model", "check_config",
           "checkpoint_steps", "eval_indices", "evaluate", "load_data", "load_dataset", "log", "lr_at", "main",
           "newest_valid_checkpoint", "normalise_images", "parse_args", "parse_event", "parse_result",
           "save_checkpoint", "train", "write_result"]


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
