"""The package type-checks: mypy with the pydantic plugin over trainium_cdk (the wheel ships py.typed, so
an importing app's type checker reads these annotations as promises)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from tests.support import paths

ROOT = paths.ROOT


def test_mypy_finds_no_error_in_the_package():
    # Its cache under .mypy_cache: a warm run checks what changed.
    done = subprocess.run([sys.executable, "-m", "mypy", "trainium_cdk"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
