"""Every type a public construct's or chart's constructor needs is importable from the package root: an importing
app writes ``from trainium_cdk import ...`` for the construct and for each type its props name (the props'
dataclasses, their fields' types in turn), never a module path inside the package."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import types
import typing
from typing import Any

import aws_cdk as cdk
import cdk8s
import constructs

import trainium_cdk

PUBLIC = {name: getattr(trainium_cdk, name) for name in trainium_cdk.__all__}


def public_constructs() -> list[type]:
    """The library's constructs and charts; not the app's stacks, which take the app's config."""
    return sorted(
        (value for value in PUBLIC.values()
         if isinstance(value, type) and issubclass(value, (constructs.Construct, cdk8s.Chart))
         and not issubclass(value, cdk.Stack) and value.__module__.startswith("trainium_cdk.")),
        key=lambda cls: cls.__name__,
    )


def leaf_types(annotation: Any) -> set[type]:
    """The classes an annotation names: through X | None, Sequence[X], Mapping[K, V], Callable[..., R]."""
    if annotation is None or annotation is type(None) or annotation is Any:
        return set()
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return set()
    if origin is not None:
        found = set() if origin in (typing.Union, types.UnionType) else {origin}
        for arg in typing.get_args(annotation):
            if arg is not Ellipsis:
                found |= leaf_types(arg if not isinstance(arg, list) else typing.Tuple[tuple(arg)])  # noqa: UP006
        return found
    return {annotation} if isinstance(annotation, type) else set()


def needed_types(cls: type) -> dict[type, str]:
    """Each trainium_cdk type the constructor of ``cls`` needs -> where (the parameter, through the dataclass
    fields of the types it names)."""
    needed: dict[type, str] = {}
    todo = [(t, f"{cls.__name__}({name}=...)") for name, hint in typing.get_type_hints(cls.__init__).items()
            if name != "return" for t in leaf_types(hint)]
    while todo:
        kind, where = todo.pop()
        if not kind.__module__.startswith("trainium_cdk") or kind in needed:
            continue
        needed[kind] = where
        if dataclasses.is_dataclass(kind):
            for name, hint in typing.get_type_hints(kind).items():
                todo += [(t, f"{where}.{name}") for t in leaf_types(hint)]
    return needed


def test_the_walk_sees_the_types_of_a_constructors_props():
    """The walk itself: it finds the props types a constructor names, through X | None and Sequence[X]."""
    from trainium_cdk.constructs.storage import DataRepositoryProps, LustreStorage

    needed = needed_types(LustreStorage)
    assert needed[DataRepositoryProps] == "LustreStorage(data_repository=...)"
    assert not [t for t in needed if issubclass(t, (enum.Enum, collections.abc.Callable))]  # type: ignore[arg-type]


def test_every_type_a_public_constructor_needs_is_exported_from_the_package_root():
    assert len(public_constructs()) >= 20
    missing = {
        f"{kind.__module__}.{kind.__qualname__} ({where})"
        for cls in public_constructs()
        for kind, where in needed_types(cls).items()
        if PUBLIC.get(kind.__name__) is not kind
    }
    assert not missing, "not importable from trainium_cdk: " + "; ".join(sorted(missing))


def test_the_root_exports_slurm_clusters_settings():
    """The issue's case: SlurmCluster was exported while the type of its required ``settings`` was not."""
    settings = inspect.signature(trainium_cdk.SlurmCluster.__init__).parameters["settings"]
    assert settings.default is inspect.Parameter.empty
    hints = typing.get_type_hints(trainium_cdk.SlurmCluster.__init__)
    assert trainium_cdk.ClusterSettings is hints["settings"]
