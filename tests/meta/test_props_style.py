"""One props style, aws-cdk-lib's as its Python binding presents it (docs/contributing/props-style.md): a public
construct or chart takes ``scope`` and ``id``, then keyword-only props; grouped settings are a typed props
dataclass; every prop with a default says so in the docstring (``:param name: ... Default: ...``, or
``@default``), as aws-cdk-lib's ``@default`` does. Walked: the package root's constructs and charts, their
``from_*`` importers, and the dataclasses exported or needed by their constructors (tests/meta/test_public_types.py)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.meta.test_public_types import PUBLIC, needed_types, public_constructs

# ":param name: text", up to the next field of the docstring.
PARAM = re.compile(r":param (\w+):(.*?)(?=\n\s*:(?:param|raises|returns?)\b|\n\s*\n|\Z)", re.S)
DEFAULT = re.compile(r"\bDefault:|@default\b")
# A props dataclass that repeats a chart's props, documented once, there.
PROPS_OF = re.compile(r"The props of :class:`(\w+)`")
# Facts, not props: a catalog entry and a pinned Neuron track are data the package ships and a user picks whole
# (DEFAULT_CATALOG.get, NEURON_TRACKS), each field explained where it is pinned.
FACT_MODULES = ("trainium_cdk.facts.catalog", "trainium_cdk.facts.versions")


def documented(doc: str | None) -> dict[str, str]:
    """Each ``:param`` of a docstring -> its text, on one line."""
    return {m.group(1): " ".join(m.group(2).split()) for m in PARAM.finditer(doc or "")}


def class_doc(cls: type) -> str:
    return (cls.__doc__ or "") + "\n" + (cls.__init__.__doc__ or "")


def importers(cls: type) -> list[tuple[str, Callable[..., Any], str]]:
    return [(f"{cls.__name__}.{name}", value.__func__, value.__func__.__doc__ or "")
            for name, value in vars(cls).items() if isinstance(value, staticmethod) and name.startswith("from_")]


def props_types() -> list[type]:
    found: dict[Any, str] = {value: name for name, value in PUBLIC.items() if isinstance(value, type)}
    for cls in public_constructs():
        found.update(needed_types(cls))
    return sorted((t for t in found if dataclasses.is_dataclass(t) and t.__module__ not in FACT_MODULES),
                  key=lambda t: t.__name__)


def signatures() -> list[tuple[str, Callable[..., Any], str]]:
    """(what, callable, docstring) of every public constructor, importer and props dataclass."""
    found = []
    for cls in public_constructs():
        found.append((cls.__name__, cls.__init__, class_doc(cls)))
        found.extend(importers(cls))
    by_name = {cls.__name__: cls for cls in public_constructs()}
    for props in props_types():
        doc = props.__doc__ or ""
        if (of := PROPS_OF.search(doc)) is not None:
            doc += "\n" + class_doc(by_name[of.group(1)])
        found.append((props.__name__, props.__init__, doc))
    return found


SIGNATURES = signatures()


def undocumented_defaults(function: Callable[..., Any], doc: str) -> list[str]:
    """The parameters of ``function`` with a default whose ``:param`` says nothing of it."""
    params = documented(doc)
    return [f"{p.name}: {'no :param' if p.name not in params else 'no Default: in ' + repr(params[p.name][:60])}"
            for p in inspect.signature(function).parameters.values()
            if p.default is not inspect.Parameter.empty and not DEFAULT.search(params.get(p.name, ""))]


def test_the_walk_finds_the_constructs_importers_and_props():
    names = {what for what, _, _ in SIGNATURES}
    assert {"TrainingNetwork", "TrainingNetwork.from_vpc", "TrainiumCluster.from_cluster_attributes",
            "LustreStorage.from_file_system_attributes", "TrainiumBatch", "TrainiumNodePools", "ComputePlacement",
            "DataRepositoryProps", "KarpenterOptions", "GroupNodes", "FsxStorageProps"} <= names


@pytest.mark.parametrize(("what", "function", "doc"), SIGNATURES, ids=[s[0] for s in SIGNATURES])
def test_every_default_is_documented(what, function, doc):
    assert undocumented_defaults(function, doc) == [], f"{what}: write each default as ':param name: ... Default: ...'"


@pytest.mark.parametrize("cls", public_constructs(), ids=lambda c: c.__name__)
def test_props_are_keyword_only_after_scope_and_id(cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # after self
    positional = [p.name for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert len(positional) == 2, f"{cls.__name__}: scope and id, then '*': {positional}"


def test_the_check_catches_a_default_the_docstring_leaves_out():
    class Example:
        """An example.

        :param size: its size. Default: 1.
        :param name: its name.
        """

        def __init__(self, *, size: int = 1, name: str = "x", color: str = "red") -> None: ...

    assert undocumented_defaults(Example.__init__, class_doc(Example)) == [
        "name: no Default: in 'its name.'", "color: no :param",
    ]
