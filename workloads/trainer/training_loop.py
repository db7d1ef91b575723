"""The training loop: one worker process of the DDP run, from joining the process group to the
last checkpoint and the result (the module docstring of trainer.train says what it does)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.args import ConfigError
from trainer.checkpoints import newest_valid_checkpoint, save_checkpoint
from trainer.evaluation import eval_indices, evaluate
from trainer.events import log, write_result
from trainer.model import build_model
from trainer.training_data import SkipSampler, augment_batch, augment_seed, load_data, place


def lr_at(step: int, base_lr: float, total_steps: int, warmup_steps: int) -> float:
    """The learning rate for optimizer step `step` (0-based): linear warmup to base_lr over
    warmup_steps, then a half cosine from base_lr down to 0 at total_steps."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass(frozen=True)
class Process:
    """This worker process in the group torchrun started (a world of 1 without torchrun)."""

    distributed: bool
    rank: int
    world: int
    local_rank: int
    use_cuda: bool
    backend: str
    device: Any


def join_process_group(backend_arg: str) -> Process:
    """nccl on GPUs, gloo on CPU (--backend auto); joins torchrun's group when started by it."""
    import torch
    import torch.distributed as dist

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and backend_arg != "gloo"
    backend = backend_arg if backend_arg != "auto" else ("nccl" if use_cuda else "gloo")
    if backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("--backend nccl needs a GPU; none is visible")
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if distributed:
        dist.init_process_group(backend=backend, device_id=device if use_cuda else None)
    log("joined", rank=rank, local_rank=local_rank, world_size=world, backend=backend if distributed else "none",
        device=device, restart=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), pid=os.getpid())
    return Process(distributed, rank, world, local_rank, use_cuda, backend, device)


def resume(ckpt_dir: Path, model: Any, optimizer: Any, proc: Process, steps_per_epoch: int,
           ) -> tuple[int, int, int, dict[str, Any], dict[str, Any]] | None:
    """Load the newest readable checkpoint into the model and optimizer: (epoch, batch in that
    epoch, global step, best eval, last eval) to continue from, or None to start afresh. Rank 0
    picks the checkpoint and tells everyone its step (a plain tensor: object collectives need
    numpy), so all ranks load the same one from the shared volume."""
    import torch
    import torch.distributed as dist

    found = newest_valid_checkpoint(ckpt_dir) if proc.rank == 0 else None
    choice = torch.tensor([found[1]["global_step"] if found else -1], dtype=torch.int64, device=proc.device)
    if proc.distributed:
        dist.broadcast(choice, src=0)
    if int(choice.item()) < 0:
        return None
    path = found[0] if found else ckpt_dir / f"step-{int(choice.item()):09d}.pt"
    state = found[1] if found else torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start_epoch, skip_batches, global_step = state["epoch"], state["batch_in_epoch"], state["global_step"]
    best, last_eval = dict(state.get("best_eval") or {}), dict(state.get("last_eval") or {})
    if state.get("world_size") != proc.world:
        # another sharding: the epoch's remaining samples are not the same set; redo the epoch
        skip_batches, global_step = 0, start_epoch * steps_per_epoch
    if skip_batches >= steps_per_epoch:
        start_epoch, skip_batches = start_epoch + 1, 0
    if proc.rank == 0:
        log("resume", checkpoint=path, step=state["global_step"], epoch=start_epoch, batch=skip_batches)
    return start_epoch, skip_batches, global_step, best, last_eval


def train(args: argparse.Namespace) -> int:
    """Train to --epochs from the newest checkpoint (or from the start), rank 0 saving and reporting."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    proc = join_process_group(args.backend)
    distributed, rank, world, local_rank = proc.distributed, proc.rank, proc.world, proc.local_rank
    use_cuda, backend, device = proc.use_cuda, proc.backend, proc.device

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

    dataset, on_device = place(dataset, data, device, use_cuda)
    test = place(data.test, data, device, use_cuda)[0] if data.test is not None else None
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

    resumed = resume(ckpt_dir, model, optimizer, proc, steps_per_epoch)
    if resumed is not None:
        start_epoch, skip_batches, global_step, best, last_eval = resumed
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
