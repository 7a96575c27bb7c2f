"""A container engine (`docker`, `finch`) for tests: there is no Docker engine on these machines.

Installed on PATH by :func:`install` under the engine's name, it records each call as one JSON line in
$CONTAINER_ENGINE_LOG: the program name, its arguments and everything it read on stdin (``login
--password-stdin`` gets the password there), prints one line, and exits 0; or, when the subcommand is the
one $CONTAINER_ENGINE_FAIL names (``build``), prints an error and exits 1. Nothing is built or pushed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.support import paths

LOG = "CONTAINER_ENGINE_LOG"
FAIL = "CONTAINER_ENGINE_FAIL"
ROOT = paths.ROOT


def install(bin_dir: Path, name: str = "docker") -> Path:
    """A program ``name`` in ``bin_dir`` that runs this stand-in."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m tests.support.container_engine_standin "$0" "$@"\n')
    path.chmod(0o755)
    return path


def calls(log: Path) -> list[dict[str, Any]]:
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def main(argv: list[str]) -> int:
    program, args = Path(argv[0]).name, argv[1:]
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    with open(os.environ[LOG], "a") as log:
        log.write(json.dumps({"program": program, "argv": args, "stdin": stdin}) + "\n")
    command = args[0] if args else ""
    if command and command == os.environ.get(FAIL):
        print(f"{program} {command}: failed (stand-in)")
        return 1
    print(f"{program} {command}: done (stand-in)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
