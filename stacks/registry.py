"""Which wiring builds which platform."""

from __future__ import annotations

from config import DevStack, GkeStack, LabStack, StackConfig, StackSecrets
from stacks import dev, gke, lab


def build(cfg: StackConfig, secrets: StackSecrets) -> dict[str, object]:
    """The stack of `cfg`'s platform; its outputs."""
    match cfg:
        case LabStack():
            return lab.build(cfg, secrets)
        case DevStack():
            return dev.build(cfg, secrets)
        case GkeStack():
            return gke.build(cfg, secrets)
