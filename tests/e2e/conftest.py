"""Fixtures the end-to-end modules share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.rehearsal import Stage


@pytest.fixture
def stage(tmp_path: Path) -> Stage:
    """An empty launch-rehearsal stage (trainium_cdk/rehearsal/) in the test's own folder."""
    return Stage(tmp_path)
