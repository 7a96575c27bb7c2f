"""Module and function size. The layers themselves (the library never imports the app or the CLI, charts build without the CDK,
constructs take props, not the config) are import-linter's contracts in pyproject.toml, which `make test` runs
(`lint-imports`); import cycles: tests/meta/test_import_cycles.py."""

from __future__ import annotations

from pathlib import Path

import trainium_cdk

PACKAGE = Path(trainium_cdk.__file__).resolve().parent
MAX_MODULE_LINES = 500


def test_no_module_is_over_500_lines():
    lines = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}
    assert not long, f"split these (at most {MAX_MODULE_LINES} lines): {long}"


# Constructs and charts read as aws-cdk-lib's: a constructor says what it makes in named steps (issue 48). ruff has no
# rule on a function's length in lines (its PLR0915 counts statements, which a long call of props is one of).
MAX_FUNCTION_LINES = 80


def test_no_function_of_a_construct_or_chart_is_over_80_lines():
    import ast

    long = {}
    for folder in ("constructs", "charts"):
        for path in (PACKAGE / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        long[f"{folder}/{path.name}:{node.name}"] = length
    assert not long, f"split these (at most {MAX_FUNCTION_LINES} lines): {long}"
