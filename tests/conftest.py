"""Fixtures that test modules of several folders share (tests/support/ holds the code behind them).

The CLI's fixtures (``aws_env``, ``aws``, ``no_credentials``, ``no_sleep``: a moto account and recorded
AWS calls) live in tests/support/cli_support.py, registered here once for every folder: pytest reads
``pytest_plugins`` only in the top conftest.py (pytest docs, "Requiring plugins in non-root conftest.py files").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support import paths

pytest_plugins = ["tests.support.cli_support"]


@pytest.fixture
def default_config(tmp_path: Path) -> Callable[..., Path]:
    """Writes the default config (config/default.yaml) with the given backends, as a user's own file."""

    def write(*backends: str, name: str = "config.yaml") -> Path:
        raw = yaml.safe_load((paths.ROOT / "config" / "default.yaml").read_text())
        raw["backends"] = list(backends)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path

    return write
