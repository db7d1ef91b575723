"""The data the training loop reads: a file on the data volume, an official dataset (datasets.py)
or a synthetic one; placed on the GPU whole when it fits, normalised once, and augmented on the
device a whole batch at a time."""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import datasets
from trainer.args import DATA_FILES, ConfigError

# A dataset up to this size is kept on the GPU whole; a larger one streams from host memory.
DEVICE_DATA_MAX_BYTES = 4 << 30


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



def place(split: Any, data: TrainData, device: Any, use_cuda: bool) -> tuple[Any, bool]:
    """On a GPU a split that fits stays there whole: a batch is then one gather, with no host
    loader, no per-step copy and no worker processes. uint8 images are normalised once, here."""
    import torch
    from torch.utils.data import TensorDataset

    x, y = split.tensors
    float_bytes = x.numel() * 4 + y.nbytes
    at = device if use_cuda and float_bytes <= DEVICE_DATA_MAX_BYTES else torch.device("cpu")
    x, y = x.to(at), y.to(at)
    if data.mean is not None and data.std is not None and not x.is_floating_point():
        x = normalise_images(x, data.mean, data.std)
    return TensorDataset(x, y), at.type == "cuda"
