"""Data on the rehearsal's /fsx: `trn rehearse --data LOCAL_DIR=/fsx/PATH` and `trn sync --rehearsal` copy a local
folder where the nodes would find it, so that a job reads in the rehearsal what it reads on the cluster."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import SHARED_MOUNT


def on_fsx(fsx: Path, path: str, *, field: str) -> Path:
    """Where ``path`` (a /fsx path as the nodes see it) is on the folder that stands for /fsx."""
    posix = PurePosixPath(path)
    if not path.startswith(f"{SHARED_MOUNT}/") or ".." in posix.parts or posix == PurePosixPath(SHARED_MOUNT):
        raise ConfigError(field, path, f"a path under {SHARED_MOUNT}/ such as {SHARED_MOUNT}/datasets/mine")
    return fsx / posix.relative_to(SHARED_MOUNT)


def seed(source: Path, destination: Path, files: Iterable[Path] | None = None) -> tuple[int, int]:
    """Copy the files of ``source`` (all of them, or ``files``, relative to it) into ``destination``, keeping their
    relative paths, modes and times; a file whose copy has the same size and time stays. (copied, unchanged)."""
    copied = unchanged = 0
    chosen = files if files is not None else (p.relative_to(source) for p in sorted(source.rglob("*")) if p.is_file())
    for relative in chosen:
        src, dst = source / relative, destination / relative
        info = src.stat()
        if dst.is_file() and dst.stat().st_size == info.st_size and int(dst.stat().st_mtime) == int(info.st_mtime):
            unchanged += 1
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        copied += 1
    return copied, unchanged
