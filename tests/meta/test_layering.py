"""Layering: charts import neither the CDK nor the config; constructs take props, not config.

Only the stacks' adapters (and top-level helpers such as dist.py and workloads.py) read
``trainium_cdk.app.config``; a chart must also build without ``aws_cdk`` so that the ``trn`` CLI, which
renders charts, loads no CDK.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trainium_cdk

PACKAGE = Path(trainium_cdk.__file__).resolve().parent
CONFIG = "trainium_cdk.app.config"


def _nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:``, which never runs."""
    found, pending = [], [tree]
    while pending:
        node = pending.pop()
        found.append(node)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports count too; TYPE_CHECKING ones not)."""
    names: set[str] = set()
    for node in _nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path.name}: relative import; the package imports absolutely")
            names.add(node.module or "")
            # `from trainium_cdk import config` imports the module too.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _is(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _modules(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).glob("*.py"))


@pytest.mark.parametrize("path", _modules("charts"), ids=lambda p: p.name)
def test_charts_import_neither_the_cdk_nor_the_config(path):
    bad = sorted(m for m in imported_modules(path) if _is(m, "aws_cdk") or _is(m, CONFIG))
    assert not bad, f"charts/{path.name} imports {bad}: take plain values and strings, let the stack resolve tokens"


@pytest.mark.parametrize("path", _modules("constructs"), ids=lambda p: p.name)
def test_constructs_take_props_not_config(path):
    reads_config = any(_is(m, CONFIG) for m in imported_modules(path))
    assert not reads_config, f"constructs/{path.name} imports {CONFIG}: give it props, map config in its stack"


def test_the_walk_sees_the_imports_it_forbids(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from aws_cdk import Token\nfrom trainium_cdk.app import config\n"
                      "if TYPE_CHECKING:\n    import boto3\n")
    assert {"aws_cdk", "trainium_cdk.app.config"} <= imported_modules(module)
    assert "boto3" not in imported_modules(module)


def _path_of(module: str) -> Path | None:
    """The file of a module of this package, or None for any other module (or a name that is not one)."""
    if not _is(module, "trainium_cdk"):
        return None
    relative = Path(*module.split(".")[1:])
    if relative == Path():
        return PACKAGE / "__init__.py"
    for candidate in (PACKAGE / relative / "__init__.py", PACKAGE / relative.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def loaded_by(module: str) -> set[str]:
    """Every module importing ``module`` can load: the walk follows this package's modules (each with the
    packages above it, which Python runs first) through every import they contain, at any depth; other
    modules are named, not followed. A static stand-in for a fresh interpreter's ``sys.modules``, and a
    stricter one: an import inside a function counts as loaded."""
    seen: set[str] = set()
    pending = [module]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        path = _path_of(name)
        if path is not None:
            pending.extend(imported_modules(path))
    return seen


@pytest.mark.parametrize(
    "module",
    sorted(f"trainium_cdk.charts.{p.stem}" for p in (PACKAGE / "charts").glob("*.py") if p.stem != "__init__")
    + sorted(f"trainium_cdk.constructs.{p.stem}" for p in (PACKAGE / "constructs").glob("*.py") if p.stem != "__init__"),
)
def test_nothing_a_chart_or_construct_loads_reads_the_config(module):
    """Not even through another module: a construct is usable from its props alone, a chart without the CDK."""
    loaded = loaded_by(module)
    assert not any(_is(m, CONFIG) for m in loaded), f"{module} loads {CONFIG}"
    if ".charts." in module:
        assert not any(_is(m, "aws_cdk") for m in loaded), f"{module} loads aws_cdk"


def test_the_static_walk_finds_at_least_what_an_interpreter_loads():
    """The walk against a real import, for the module with the longest reach: every module of this package a
    fresh interpreter loads, the walk names too."""
    import subprocess
    import sys

    module = "trainium_cdk.constructs.eks_cluster"
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ours = {m for m in done.stdout.split() if _is(m, "trainium_cdk")}
    assert len(ours) > 10 and ours <= loaded_by(module), sorted(ours - loaded_by(module))


MAX_MODULE_LINES = 500


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> set[str]:
    """This package's modules a module's own file names (a package's __init__ for ``from package import name``)."""
    found = set()
    for name in imported_modules(path):
        if _path_of(name) is not None and _path_of(name) != path:
            found.add(name)
        elif _path_of(name.rsplit(".", 1)[0]) not in (None, path):
            found.add(name.rsplit(".", 1)[0])
    return found


def test_no_module_is_over_500_lines():
    lines = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}
    assert not long, f"split these (at most {MAX_MODULE_LINES} lines): {long}"


def test_no_two_modules_import_each_other():
    """A package's __init__ importing its modules is how packages are built; any other pair is a cycle."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    imports = {name: {m for m in _runtime_imports(path) if m in modules} for name, path in modules.items()}
    cycles = sorted(
        (a, b) for a, targets in imports.items() for b in targets
        if a < b and a in imports.get(b, set()) and not (_is(a, b) or _is(b, a))
    )
    assert not cycles, cycles
