"""Any command a generated script runs (aws, systemctl, dnf, mount, modprobe, srun, torchrun, ...), recorded.

Installed on PATH by :func:`install` under each name, it appends one JSON line to $RECORDER_LOG: the program's
name, its arguments and its environment, as the program received them; prints what the test gave it to print
(``readlink -f`` the folder a stand-in stands for, ``scontrol show hostnames`` a host) and exits 0. A program
installed as a runner (``srun``) then runs the command that follows its options, as srun does on one node.
The other stand-ins (tests/support/slurm_standin.py, container_engine_standin.py, kubectl_standin.py, ssm_host.py)
answer for what they model; this one is for the rest, where what a script asked is all a test needs.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.support import paths

LOG = "RECORDER_LOG"
ROOT = paths.ROOT


def install(bin_dir: Path, names: Iterable[str], *, prints: Mapping[str, str] | None = None,
            runners: Iterable[str] = ()) -> Path:
    """Programs ``names`` (and ``runners``) in ``bin_dir`` that record their calls; ``prints`` maps a name to
    what it prints. Returns ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    runners = set(runners)
    for name in {*names, *runners}:
        lines = ["#!/bin/sh", f'PYTHONPATH="{ROOT}" "{sys.executable}" -m tests.support.recorder_standin "$0" "$@" || exit $?']
        if name in (prints or {}):
            lines.append(f"printf '%s\\n' {shlex.quote((prints or {})[name])}")
        if name in runners:  # the command after the runner's options
            lines += ['while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done', 'exec "$@"']
        path = bin_dir / name
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o755)
    return bin_dir


def calls(log: Path, program: str | None = None) -> list[dict[str, Any]]:
    """Every recorded call (of ``program`` only, when given), in order."""
    if not log.is_file():
        return []
    found = [json.loads(line) for line in log.read_text().splitlines()]
    return [c for c in found if program is None or c["program"] == program]


def main(argv: list[str]) -> int:
    program, args = Path(argv[0]).name, argv[1:]
    with open(os.environ[LOG], "a") as log:
        log.write(json.dumps({"program": program, "argv": args, "env": dict(os.environ)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
