"""Synthesized cloud assemblies shared on disk by the workers of one test run.

`make test` runs pytest-xdist workers (Makefile's PYTEST line), each a process of its own: a
`functools.cache` shares an app only within one worker, so each worker synthesized the shared apps again
(10-45 s a full app). The controller (or a run without xdist) creates one folder for the run and hands it
to its workers through the environment (tests/conftest.py); an entry is a cloud assembly keyed by what
decides its output:

- the config's full dump (``Config.model_dump_json()``), the cdk-nag flag and the CDK context (cdk.json);
- the backend registry (a test may register its own backend: tests/app/test_backends.py);
- a digest of the package's files (trainium_cdk/**), the test support code that builds apps (tests/support/*.py),
  cdk.json, constraints.txt and the requirements files, so that a folder kept across runs never returns an app of
  other code.

The folder is kept across runs: ``.pytest_cache/d/trainium-cdk-synth/<code digest>/`` (KEPT), so that a second `make
test` on the same code synthesizes nothing; the controller deletes the folders of other code digests when a run
starts (tests/conftest.py). ``TRN_TEST_SYNTH_CACHE`` set by hand names another folder.

The first worker to need an entry synthesizes it under an exclusive ``fcntl.flock`` on the entry's lock file;
the others wait on the lock, then read the assembly from disk (``cx_api.CloudAssembly(directory)``). A synth
while a ``pytest.MonkeyPatch`` holds a change (the ``monkeypatch`` fixture, ``MonkeyPatch.context()``) is never
cached: what it patched (a version pin, an environment variable) is not in the key.

Every real synth appends a line to ``synths.log`` in the folder; the controller prints their count at the end.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _pytest import monkeypatch as _monkeypatch

from tests.support import paths

ENV = "TRN_TEST_SYNTH_CACHE"
KEPT = "trainium-cdk-synth"  # under pytest's cache folder (.pytest_cache/d/): <code digest>/<entry>, kept_folder()
OFF = "TRN_TEST_SYNTH_CACHE_OFF"  # =1: every synth fresh, as before the cache (still counted in the log)
LOG = "synths.log"
ASSETS = "assets"  # the one copy of each staged asset (share_assets)
_DONE = "complete"  # written last into an entry: a worker killed mid-synth leaves no entry others would read

# Every MonkeyPatch made in this process (the fixture's and MonkeyPatch.context()'s), to tell whether one holds
# a change at synth time.
_PATCHES: weakref.WeakSet[Any] = weakref.WeakSet()
_init = _monkeypatch.MonkeyPatch.__init__


def _tracked_init(self: Any) -> None:
    _init(self)
    _PATCHES.add(self)


_monkeypatch.MonkeyPatch.__init__ = _tracked_init  # type: ignore[method-assign]


def patched() -> bool:
    """Whether a MonkeyPatch of this process holds a change (set, deleted, chdir, sys.path) but pytest's own on its
    Config (the tmp_path plugin's, for the whole session)."""
    return any(
        any(not isinstance(target, pytest.Config) for target, _, _ in p._setattr)
        or p._setitem or p._cwd is not None or p._savesyspath is not None
        for p in list(_PATCHES)
    )


def folder() -> Path | None:
    """The run's cache folder, or None (no cache: the plain synth)."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


@functools.cache
def code_digest() -> str:
    """A digest of what else decides a synth's output: the package's files, cdk.json, the requirements locks."""
    digest = hashlib.sha256()
    files = sorted(p for p in (paths.ROOT / "trainium_cdk").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files += sorted((paths.ROOT / "tests" / "support").glob("*.py"))
    files += [paths.ROOT / "cdk.json", paths.ROOT / "constraints.txt", *sorted(paths.ROOT.glob("requirements*.txt"))]
    for path in files:
        digest.update(str(path.relative_to(paths.ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def kept_folder(kept: Path) -> Path:
    """This code's folder in ``kept``, made; the folders of other code are deleted (their entries can never be read
    again: their digest is in every key)."""
    own = kept / code_digest()[:16]
    if kept.is_dir():
        for other in kept.iterdir():
            if other != own:
                shutil.rmtree(other, ignore_errors=True)
    own.mkdir(parents=True, exist_ok=True)
    (own / LOG).unlink(missing_ok=True)  # the log counts this run's synths
    return own


def key(kind: str, config: Any, **extra: Any) -> str:
    """The entry of one synth: its kind, the config's full dump, the flags and context in ``extra``, the backend
    registry and the code digest."""
    from trainium_cdk.app import backends

    registry = [repr(b) for b in backends._REGISTRY.values()]
    text = json.dumps(
        {"kind": kind, "config": json.loads(config.model_dump_json()), "extra": extra, "backends": registry,
         "code": code_digest()},
        sort_keys=True, default=repr,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def entry(kind: str, config: Any, synth: Callable[[Path], None], **extra: Any) -> tuple[Path, bool] | None:
    """The folder of the synth's cloud assembly and whether this call synthesized it (``synth(outdir)`` writes
    it), or None when nothing may be cached (no folder for the run, or a MonkeyPatch holds a change)."""
    root = folder()
    if root is None or os.environ.get(OFF) == "1" or patched():
        return None
    name = key(kind, config, **extra)
    outdir = root / name
    with _locked(root / f"{name}.lock"):
        if (outdir / _DONE).exists():
            return outdir, False
        if outdir.exists():  # a synth that died halfway
            shutil.rmtree(outdir)
        start = time.monotonic()
        synth(outdir)
        share_assets(root, outdir)
        (outdir / _DONE).write_text("")
        log(root, f"{os.getpid()} {kind} {config.project} {name} {time.monotonic() - start:.1f}s {_test()}")
    return outdir, True


def share_assets(root: Path, outdir: Path) -> None:
    """Every ``asset.<hash>`` of the assembly, file or folder, made hard links to one copy in ``root/assets``: the
    name is the hash of the content (the CDK's asset staging), and most apps stage the same kubectl and Helm layers
    (tens of MB each: 4.8 GB for a run's 112 entries before, kept across runs)."""
    store = root / ASSETS
    store.mkdir(exist_ok=True)
    staged = [
        p for p in outdir.rglob("asset.*")
        if not any(part.startswith("asset.") for part in p.relative_to(outdir).parts[:-1])  # not inside an asset
    ]
    for path in staged:
        kept = store / path.name
        folder = path.is_dir()

        def link(source: Path, target: Path, folder: bool = folder) -> None:
            if folder:
                shutil.copytree(source, target, copy_function=os.link)
            else:
                os.link(source, target)

        try:
            if not kept.exists():
                partial = store / f".{path.name}.{os.getpid()}"
                link(path, partial)
                try:
                    partial.rename(kept)
                except OSError:  # another worker's copy got there first (a folder is not replaced)
                    shutil.rmtree(partial)
            else:
                partial = path.with_name(f".{path.name}.{os.getpid()}")
                link(kept, partial)
                if folder:
                    shutil.rmtree(path)
                partial.replace(path)
        except OSError:  # no hard links on this file system: the assembly keeps its own copy
            if folder:
                shutil.rmtree(partial, ignore_errors=True)
            else:
                partial.unlink(missing_ok=True)


def log(root: Path, line: str) -> None:
    with (root / LOG).open("a") as out:
        out.write(line + "\n")


def log_uncached(kind: str, config: Any) -> None:
    """Count a synth that the cache did not hold (turned off, or a MonkeyPatch held a change)."""
    root = folder()
    if root is not None:
        log(root, f"{os.getpid()} {kind} {config.project} uncached {_test()}")


def _test() -> str:
    """The test that asked for the synth (pytest's PYTEST_CURRENT_TEST, without its phase)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]


def count(root: Path) -> tuple[int, int]:
    """The run's synths: (cached entries written, uncached)."""
    lines = (root / LOG).read_text().splitlines() if (root / LOG).exists() else []
    uncached = sum(line.split()[3] == "uncached" for line in lines)
    return len(lines) - uncached, uncached
