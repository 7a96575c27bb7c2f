"""Module size. The layers themselves (the library never imports the app or the CLI, charts build without the CDK,
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
