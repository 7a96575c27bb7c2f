"""The package type-checks: mypy with the pydantic plugin over trainium_cdk (the wheel ships py.typed, so
an importing app's type checker reads these annotations as promises).

mypy reads the aws-cdk-lib modules the package imports and every module their types name, not all of
aws-cdk-lib: the root module names its 680 modules under ``if TYPE_CHECKING:`` (aws_quicksight alone took mypy
6 s), and a cold run over all of them took 93 s on 2 cores, 15 s over these. pyproject.toml lists the modules read
([[tool.mypy.overrides]]); the first test keeps that list equal to what the package imports. `make test`'s
set-up has mypy read them into .mypy_cache once (tests/support/mypy_deps.py), as it compiles the modules: a run
then takes 3.6 s, the package alone. torch, transformers, peft and kubernetes are not read either (3,900 modules):
the training programs run under torch in the end-to-end tests instead.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import subprocess
import sys
import tokenize
from functools import cache
from pathlib import Path

from tests.support import mypy_deps, paths

ROOT = paths.ROOT
SITE = Path(str(importlib.util.find_spec("aws_cdk").origin)).resolve().parents[1]  # the site-packages aws_cdk is in


def _file(module: str) -> Path | None:
    path = SITE.joinpath(*module.split("."))
    for found in (path / "__init__.py", path.with_suffix(".py")):
        if found.is_file():
            return found
    return None


def _import_lines(text: str) -> str:
    """A jsii module's imports: the lines between its docstring (the README, with code examples that import
    modules too) and its first class but the helper class of its lazy imports. The list of a package's own
    modules (``from . import x as x``, the root's names all 680) comes after its classes."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    first = next(t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE))
    lines = text.splitlines()[first.end[0] if first.type == tokenize.STRING else 0:]
    body = next((i for i, line in enumerate(lines)
                 if line.startswith(("class ", "@jsii")) and not line.startswith("class _LazyImport")), len(lines))
    return "\n".join(lines[:body])


def _imports(text: str, module: str, is_package: bool) -> set[str]:
    """The aws_cdk modules that ``text`` imports, at any depth (jsii's modules import their types' modules under
    ``if TYPE_CHECKING:``). Read line by line: parsing aws-cdk-lib's large modules took 15 s."""
    found = set()
    package = module.split(".") if is_package else module.split(".")[:-1]
    for dots, name, names in re.findall(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+\(?([\w, \t*]+)", text, re.M):
        base = ".".join(package[: len(package) - len(dots) + 1] + ([name] if name else [])) if dots else name
        found.add(base)
        found.update(f"{base}.{n.split()[0]}" for n in names.split(",") if n.strip() not in ("", "*"))
    found.update(re.findall(r"^[ \t]*import[ \t]+([\w.]+)", text, re.M))
    return {m for m in found if m.split(".")[0] == "aws_cdk" and _file(m) is not None}


@cache
def read_cdk_modules() -> list[str]:
    """The aws_cdk modules the package imports and the modules that theirs import: what mypy must read for every
    type the package touches (an argument's type, a base class, an attribute's)."""
    imported: set[str] = set()
    for path in (ROOT / "trainium_cdk").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported.add(node.module)
                imported.update(f"{node.module}.{a.name}" for a in node.names)
    imported = {m for m in imported if m.split(".")[0] == "aws_cdk" and _file(m) is not None}
    read = set(imported)
    for module in imported:
        path = _file(module)
        assert path is not None
        read |= _imports(_import_lines(path.read_text()), module, path.name == "__init__.py")
    return sorted(read)


def test_mypy_reads_the_cdk_modules_the_package_imports():
    listed = mypy_deps.cdk_modules()
    expected = read_cdk_modules()
    assert listed == expected, (
        "pyproject.toml's [[tool.mypy.overrides]] (follow_imports = normal) must list exactly the aws_cdk modules the "
        f"package imports and theirs: add {sorted(set(expected) - set(listed))}, "
        f"drop {sorted(set(listed) - set(expected))}"
    )


def test_mypy_finds_no_error_in_the_package():
    # Its cache under .mypy_cache: a warm run checks what changed. Set-up reads the aws_cdk modules into it once
    # (tests/support/mypy_deps.py): every module of the package is checked, against them.
    done = subprocess.run([sys.executable, "-m", "mypy", "trainium_cdk"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
