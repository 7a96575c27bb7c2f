"""The package type-checks: mypy with the pydantic plugin over trainium_cdk (the wheel ships py.typed, so
an importing app's type checker reads these annotations as promises).

mypy reads the aws-cdk-lib modules the package imports and every module their types name, not all of
aws-cdk-lib: the root module names its 680 modules under ``if TYPE_CHECKING:`` (aws_quicksight alone took mypy
6 s), and a cold run over all of them took 93 s on 2 cores, 15 s over these. pyproject.toml lists the modules read
([[tool.mypy.overrides]]); the first test keeps that list equal to what the package imports. torch, transformers,
peft and kubernetes are not read either (3,900 modules): the training programs run under torch in the end-to-end
tests instead.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

from tests.support import paths

ROOT = paths.ROOT
SITE = Path(str(importlib.util.find_spec("aws_cdk").origin)).resolve().parents[1]  # the site-packages aws_cdk is in


def _file(module: str) -> Path | None:
    path = SITE.joinpath(*module.split("."))
    for found in (path / "__init__.py", path.with_suffix(".py")):
        if found.is_file():
            return found
    return None


def _imports(tree: ast.AST, module: str, is_package: bool, *, skip_submodule_list: bool = False) -> set[str]:
    """The aws_cdk modules ``tree`` imports, at any depth (jsii's modules import their types' modules under
    ``if TYPE_CHECKING:``). ``skip_submodule_list``: not the root's ``from . import x as x`` of every module."""
    found = set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if skip_submodule_list and node.level == 1 and node.module is None:
                    continue
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from aws_cdk import aws_ec2`
    return {m for m in found if m.split(".")[0] == "aws_cdk" and _file(m) is not None}


@cache
def read_cdk_modules() -> list[str]:
    """The aws_cdk modules the package imports and the modules that theirs import: what mypy must read for every
    type the package touches (an argument's type, a base class, an attribute's)."""
    imported: set[str] = set()
    for path in (ROOT / "trainium_cdk").rglob("*.py"):
        imported |= _imports(ast.parse(path.read_text()), "trainium_cdk", True)
    read = set(imported)
    for module in imported:
        path = _file(module)
        assert path is not None
        read |= _imports(ast.parse(path.read_text()), module, path.name == "__init__.py",
                         skip_submodule_list=module == "aws_cdk")
    return sorted(read)


def test_mypy_reads_the_cdk_modules_the_package_imports():
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    listed = sorted(m for o in overrides if o.get("follow_imports") == "normal" for m in o["module"])
    expected = read_cdk_modules()
    assert listed == expected, (
        "pyproject.toml's [[tool.mypy.overrides]] (follow_imports = normal) must list exactly the aws_cdk modules the "
        f"package imports and theirs: add {sorted(set(expected) - set(listed))}, "
        f"drop {sorted(set(listed) - set(expected))}"
    )


def test_mypy_finds_no_error_in_the_package():
    # Its cache under .mypy_cache: a warm run checks what changed.
    done = subprocess.run([sys.executable, "-m", "mypy", "trainium_cdk"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
