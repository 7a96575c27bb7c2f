"""Constructs and charts take props, never the config: every public construct's and chart's parameters,
and the fields of every props dataclass they take (recursively), name no type of ``trainium_cdk.app.config``
and no callable (a callable prop is how the config used to reach SlurmCluster and TrainingWorkloads,
closed over). A static check of the types, beside import-linter's contracts on the imports (pyproject.toml);
and the default app, built, hands no construct a Config at all."""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib
import inspect
import pkgutil
import types
import typing

import cdk8s
import pytest
from constructs import Construct

import trainium_cdk
from trainium_cdk import charts as charts_package
from trainium_cdk.app.config import BatchSettings

CONFIG_PACKAGE = "trainium_cdk.app.config"


def _public_classes() -> list[type]:
    """The constructs and charts the package exports, and every chart class of trainium_cdk.charts."""
    found: dict[str, type] = {}
    for name, module in trainium_cdk._PUBLIC.items():
        if module.startswith(("trainium_cdk.constructs.", "trainium_cdk.charts.")):
            value = getattr(importlib.import_module(module), name)
            if isinstance(value, type) and issubclass(value, Construct):
                found[f"{module}.{name}"] = value
    for info in pkgutil.iter_modules(charts_package.__path__):
        module = importlib.import_module(f"trainium_cdk.charts.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, cdk8s.Chart) and value.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = value
    return [found[k] for k in sorted(found)]


CLASSES = _public_classes()


def _bad_types(hint: object, where: str, seen: set[int]) -> list[str]:
    """Where ``hint`` (a parameter's or field's type) names a config type or a callable, walking unions,
    generics and the fields of dataclasses."""
    if id(hint) in seen:
        return []
    seen.add(id(hint))
    origin = typing.get_origin(hint)
    if origin is collections.abc.Callable or hint is collections.abc.Callable or hint is typing.Callable:
        return [f"{where}: a callable ({hint})"]
    if origin is not None:  # Union, X | None, Sequence[X], Mapping[K, V], tuple[...]
        bad = _bad_types(origin, where, seen) if isinstance(origin, type) else []
        return bad + [b for arg in typing.get_args(hint) for b in _bad_types(arg, where, seen)]
    if not isinstance(hint, type):
        return []
    if hint.__module__ == CONFIG_PACKAGE or hint.__module__.startswith(CONFIG_PACKAGE + "."):
        return [f"{where}: {hint.__module__}.{hint.__qualname__}"]
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return [b for f in dataclasses.fields(hint) for b in _bad_types(hints[f.name], f"{where}.{f.name}", seen)]
    return []


def _parameters(cls: type) -> dict[str, object]:
    hints = typing.get_type_hints(cls.__init__)
    names = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "scope", "construct_id", "id")]
    missing = [p for p in names if p not in hints]
    assert not missing, f"{cls.__qualname__}: parameters without a type: {missing}"
    return {p: hints[p] for p in names}


def test_the_walk_finds_every_construct_and_chart():
    names = {c.__name__ for c in CLASSES}
    assert {"SlurmCluster", "TrainingWorkloads", "TrainiumBatch", "TrainiumCluster", "TrainingNetwork",
            "FsxStorage", "TrainiumNodePools", "DistributedTrainingJob"} <= names
    assert len(CLASSES) >= 25


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_no_prop_is_the_config_or_a_callable(cls):
    bad = [b for name, hint in _parameters(cls).items() for b in _bad_types(hint, f"{cls.__name__}.{name}", set())]
    assert bad == []


@dataclasses.dataclass(frozen=True)
class _Inner:
    settings: BatchSettings | None


@dataclasses.dataclass(frozen=True)
class _Options:
    inner: collections.abc.Sequence[_Inner]
    build: collections.abc.Callable[[str], str] | None = None


def test_the_walk_sees_a_config_or_a_callable_however_deep():
    from trainium_cdk.app.config import Config

    assert _bad_types(Config, "c", set()) == ["c: trainium_cdk.app.config.models.Config"]
    assert _bad_types(_Options, "o", set()) == [
        "o.inner.settings: trainium_cdk.app.config.backend_settings.BatchSettings",
        "o.build: a callable (collections.abc.Callable[[str], str])",
    ]
    assert _bad_types(types.SimpleNamespace, "n", set()) == []


def test_the_default_app_hands_no_construct_a_config():
    """Built for real: no construct of the app (but the stacks, which compose) holds a Config, or a function
    closed over one, in its attributes."""
    from tests.support.apps import synthesized
    from trainium_cdk.app.config import Config

    app = synthesized("trn1.32xlarge")
    stacks = {id(s) for s in app.stacks.stacks}

    def holds_config(value: object, depth: int = 0) -> bool:
        if isinstance(value, Config):
            return True
        if isinstance(value, types.FunctionType | types.MethodType | __import__("functools").partial):
            cells = [c.cell_contents for c in (getattr(value, "__closure__", None) or ())]
            cells += list(getattr(value, "args", ())) + list(getattr(value, "keywords", {}).values())
            return any(holds_config(c, depth + 1) for c in cells)
        if depth < 2 and dataclasses.is_dataclass(value) and not isinstance(value, type):
            return any(holds_config(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
        return False

    holders = []
    for stack in app.stacks.stacks:
        for construct in stack.node.find_all():
            if id(construct) in stacks or not type(construct).__module__.startswith("trainium_cdk."):
                continue
            for name, value in vars(construct).items():
                if holds_config(value):
                    holders.append(f"{construct.node.path}.{name}")
    assert holders == []
