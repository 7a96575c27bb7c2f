"""mypy's reading of the aws-cdk-lib modules the package uses, cached once after set-up (Makefile's COMPILED step).

pyproject.toml lists them ([[tool.mypy.overrides]], follow_imports = normal; tests/meta/test_types.py keeps the list
equal to the package's imports). mypy reads them into .mypy_cache as it would through the package, from a file that
imports each one: what that reading yields depends on the pinned aws-cdk-lib and mypy only, like the compiled
modules. tests/meta/test_types.py then type-checks the whole package against them (3.6 s; 14 s with a cold cache).

    python -m tests.support.mypy_deps
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from tests.support import paths


def cdk_modules() -> list[str]:
    """The aws_cdk modules pyproject.toml has mypy read."""
    overrides = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    return sorted(m for o in overrides if o.get("follow_imports") == "normal" for m in o["module"])


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        importer = Path(folder) / "cdk_modules.py"
        importer.write_text("".join(f"import {module}\n" for module in cdk_modules()))
        done = subprocess.run([sys.executable, "-m", "mypy", str(importer)], cwd=paths.ROOT, check=False,
                              capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
