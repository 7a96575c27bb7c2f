"""The base of every configuration model: unknown keys refused, values frozen, no booleans for numbers."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _takes_numbers_only(annotation: Any) -> bool:
    """Whether a field's type is a number (int, float, maybe None) and never a boolean."""
    args = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    return bool not in args and any(arg in (int, float) for arg in args)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads true as 1 for a number: `nodes: true` became one node without a word."""
        if isinstance(value, bool) and info.field_name and _takes_numbers_only(cls.model_fields[info.field_name].annotation):
            raise ValueError("a number, not true or false (YAML reads true, false, yes, no, on and off as booleans)")
        return value
