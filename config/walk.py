"""Every key of a config model, walked from its pydantic fields: what the configuration reference
(config/reference.py) lists and what the boundary sweep (tests/config/bounds.py) sets."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from config.errors import key_path

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Key:
    path: Path  # ("hosts", 0, "name"): list elements at index 0
    annotation: Any
    info: FieldInfo

    @property
    def name(self) -> str:
        return key_path(self.path)


def model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool, bool]:
    """(the model in the annotation, whether it is optional, whether it is a tuple of it)."""
    args = typing.get_args(annotation)
    optional = type(None) in args
    if typing.get_origin(annotation) is tuple and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], optional, True
    for arg in (*args, annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg, optional, False
    return None, optional, False


def walk(model: type[BaseModel], prefix: Path = ()) -> Iterator[Key]:
    """Every key of `model`: sections, their keys, and the keys of a list's first element."""
    for name, info in model.model_fields.items():
        path = (*prefix, info.alias or name)
        yield Key(path, info.annotation, info)
        sub, _, many = model_of(info.annotation)
        if sub is not None:
            yield from walk(sub, (*path, 0) if many else path)
