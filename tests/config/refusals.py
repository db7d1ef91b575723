"""The config tests' one way to ask for a refusal or an acceptance: `config.parse` on a copy of a raw
stack config (keys as in the stack file), with the lab's SSH key as its one secret unless told."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import config


def problems(raw: dict[str, Any], secrets: set[str] | None = None) -> list[tuple[str, str]]:
    secrets = secrets if secrets is not None else ({"sshPrivateKey"} if raw["platform"] == "lab" else set())
    with pytest.raises(config.ConfigError) as info:
        config.parse(copy.deepcopy(raw), secrets)
    return info.value.problems


def reported(raw: dict[str, Any], key: str, *words: str, secrets: set[str] | None = None) -> None:
    found = problems(raw, secrets)
    assert any(k == key and all(w in m for w in words) for k, m in found), found


def accepted(raw: dict[str, Any], secrets: set[str] | None = None) -> config.StackConfig:
    secrets = secrets if secrets is not None else ({"sshPrivateKey"} if raw["platform"] == "lab" else set())
    return config.parse(copy.deepcopy(raw), secrets)

