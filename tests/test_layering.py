"""Layering: charts import neither the CDK nor the config; constructs take props, not config.

Only the stacks' adapters (and top-level helpers such as dist.py and workloads.py) read
``trainium_cdk.config``; a chart must also build without ``aws_cdk`` so that the ``trn`` CLI, which
renders charts, loads no CDK.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trainium_cdk

PACKAGE = Path(trainium_cdk.__file__).resolve().parent
CONFIG = "trainium_cdk.config"
# Constructs that still import the config while other branches give them props of their own.
# The lead empties this list at merge: then no construct imports trainium_cdk.config.
CONSTRUCTS_STILL_ON_CONFIG: set[str] = set()


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports count too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
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
    if path.name in CONSTRUCTS_STILL_ON_CONFIG:
        pytest.skip(f"constructs/{path.name} is being converted on another branch (CONSTRUCTS_STILL_ON_CONFIG)")
    reads_config = any(_is(m, CONFIG) for m in imported_modules(path))
    assert not reads_config, f"constructs/{path.name} imports {CONFIG}: give it props, map config in its stack"


def test_the_allow_list_names_only_constructs_that_still_read_config():
    """A construct converted on this branch leaves the list: it cannot slip back unnoticed."""
    stale = sorted(
        name for name in CONSTRUCTS_STILL_ON_CONFIG
        if not any(_is(m, CONFIG) for m in imported_modules(PACKAGE / "constructs" / name))
    )
    assert not stale, f"no longer import the config, remove from CONSTRUCTS_STILL_ON_CONFIG: {stale}"


def test_the_walk_sees_the_imports_it_forbids(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from aws_cdk import Token\nfrom trainium_cdk import config\n")
    assert {"aws_cdk", "trainium_cdk.config"} <= imported_modules(module)


def _loaded_by(module: str) -> set[str]:
    import subprocess
    import sys

    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize(
    "module",
    sorted(f"trainium_cdk.charts.{p.stem}" for p in (PACKAGE / "charts").glob("*.py") if p.stem != "__init__")
    + sorted(f"trainium_cdk.constructs.{p.stem}" for p in (PACKAGE / "constructs").glob("*.py") if p.stem != "__init__"),
)
def test_nothing_a_chart_or_construct_loads_reads_the_config(module):
    """Not even through another module: a construct is usable from its props alone, a chart without the CDK."""
    loaded = _loaded_by(module)
    assert CONFIG not in loaded, f"{module} loads {CONFIG}"
    if ".charts." in module:
        assert not any(m == "aws_cdk" or m.startswith("aws_cdk.") for m in loaded), f"{module} loads aws_cdk"
