"""The project's own error type: every bad input raises it before a template is written."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
    """A setting that cannot work, naming the field, the value and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field} = {value!r}: {allowed}")


def one_of(values: Iterable[Any]) -> str:
    """'allowed: a, b, c' for error messages."""
    return "allowed: " + ", ".join(str(v) for v in values)
