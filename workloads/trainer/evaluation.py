"""Evaluation on the test split, sharded over the ranks as DistributedSampler shards it, with the
sums all-reduced."""

from __future__ import annotations

from typing import Any


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
