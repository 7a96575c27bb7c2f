"""The project's own error type: every bad input raises it before a template is written."""

from __future__ import annotations

import functools
import reprlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

_Init = TypeVar("_Init", bound=Callable[..., None])


class ConfigError(ValueError):
    """A setting that cannot work, naming the field, the value and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field} = {shown(value)}: {allowed}")


# The longest value an error echoes (a 256-character tag value whole): a value of megabytes (a YAML alias bomb
# expanded) made a line of megabytes.
SHOWN_CHARACTERS = 500


def _limited_repr() -> reprlib.Repr:
    # A bounded repr: a YAML alias bomb is a few hundred bytes of nested references whose full repr is megabytes.
    limited = reprlib.Repr()
    limited.maxlevel, limited.maxlist, limited.maxtuple, limited.maxdict, limited.maxset = 3, 20, 20, 20, 20
    limited.maxstring = limited.maxother = limited.maxlong = SHOWN_CHARACTERS
    return limited


_REPR = _limited_repr()


def shown(value: Any) -> str:
    """``repr(value)``, bounded (reprlib) and cut to SHOWN_CHARACTERS."""
    text = _REPR.repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "..."


def one_of(values: Iterable[Any]) -> str:
    """'allowed: a, b, c' for error messages."""
    return "allowed: " + ", ".join(str(v) for v in values)


def names_construct_path(init: _Init) -> _Init:
    """Decorate a construct's ``__init__(self, scope, construct_id, ...)``: a ConfigError raised while it
    runs names the construct's path (``MyStack/Training.system_nodes``), so that an app with several
    constructs of a kind knows which one. An error that already names a path inside it passes unchanged."""

    @functools.wraps(init)
    def wrapper(self: Any, scope: Any, construct_id: str, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, scope, construct_id, *args, **kwargs)
        except ConfigError as err:
            path = "/".join(p for p in (scope.node.path, construct_id) if p)
            if str(err.field).startswith(f"{path}/"):
                raise
            raise ConfigError(f"{path}.{err.field}", err.value, err.allowed) from None

    return wrapper  # type: ignore[return-value]
