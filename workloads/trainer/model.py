"""The models the trainer can train: a small MLP, and ResNet-18 in its CIFAR variant."""

from __future__ import annotations

from typing import Any

from trainer.args import ConfigError


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
