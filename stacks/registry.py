"""Which wiring builds which platform."""

from __future__ import annotations

from collections.abc import Callable

from components.config import Platform, StackConfig, StackSecrets
from stacks import dev, gke, lab

BUILDERS: dict[Platform, Callable[[StackConfig, StackSecrets], dict[str, object]]] = {
    Platform.LAB: lab.build,
    Platform.DEV: dev.build,
    Platform.GKE: gke.build,
}
