"""Fixtures that test modules of several folders share (tests/support/ holds the code behind them).

The CLI's fixtures (``aws_env``, ``aws``, ``no_credentials``, ``no_sleep``: a moto account and recorded
AWS calls) live in tests/support/cli_support.py, registered here once for every folder: pytest reads
``pytest_plugins`` only in the top conftest.py (pytest docs, "Requiring plugins in non-root conftest.py files").
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support import paths, synth_cache  # synth_cache first: it tracks every MonkeyPatch made after it

pytest_plugins = ["tests.support.cli_support"]


def pytest_configure(config: pytest.Config) -> None:
    """The controller (or a run without xdist) names the cache of synthesized apps, which its workers inherit
    through the environment (tests/support/synth_cache.py): the folder kept for this code under .pytest_cache, or
    one set by hand. ``-p no:cacheprovider`` (no .pytest_cache) gets a folder for the run, deleted after."""
    if hasattr(config, "workerinput"):
        return
    if sys.pycache_prefix:
        prune_compiled_temp_files(Path(sys.pycache_prefix), Path(tempfile.gettempdir()), paths.ROOT)
    kept = os.environ.get(synth_cache.ENV)
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        os.environ[synth_cache.ENV] = str(Path(kept).resolve())  # the workers' view, wherever they start
        return
    cache = getattr(config, "cache", None)  # none under -p no:cacheprovider
    if cache is not None:
        os.environ[synth_cache.ENV] = str(synth_cache.kept_folder(cache.mkdir(synth_cache.KEPT)))
        return
    folder = tempfile.mkdtemp(prefix="trainium-cdk-synths-")
    os.environ[synth_cache.ENV] = folder
    config.stash[_OWN_CACHE] = Path(folder)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    folder = synth_cache.folder()
    if folder is not None and not hasattr(config, "workerinput"):
        cached, uncached = synth_cache.count(folder)
        terminalreporter.write_line(f"synthesized apps: {cached} into the cache ({folder}), {uncached} uncached")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller (or a run without xdist) removes a synth cache folder of its own. A pytest-xdist worker, its
    results reported (at sessionfinish), ends without Python's teardown of its heap: the apps, templates and
    construct trees it held took 1.5 s to free after a small run and 5 s after `make test`, while the controller
    waited for it. Its exit handlers run first (the jsii kernel's stop, the removal of its cloud assemblies:
    tests/support/helpers.py); trylast: every other plugin's unconfigure has run."""
    folder = config.stash.get(_OWN_CACHE, None)
    if folder is not None:
        del os.environ[synth_cache.ENV]
        shutil.rmtree(folder, ignore_errors=True)
    if hasattr(config, "workerinput"):
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


_OWN_CACHE = pytest.StashKey[Path]()


def prune_compiled_temp_files(prefix: Path, temp: Path, root: Path) -> None:
    """`make` keeps compiled modules in one tree (PYTHONPYCACHEPREFIX=.venv/pycache, Makefile), which mirrors the
    path of each source: the modules of a temporary folder (the end-to-end tests' clones and virtual environments,
    pip's build folders: 230 MB a run) are never read again, and are dropped when a run starts. The checkout's own
    stay, wherever it is."""
    temp, root = temp.resolve(), root.resolve()
    mirror = prefix / temp.relative_to(temp.anchor)
    if not mirror.is_dir():
        return
    for child in mirror.iterdir():
        if not (root == temp / child.name or (temp / child.name) in root.parents):
            shutil.rmtree(child, ignore_errors=True)


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
