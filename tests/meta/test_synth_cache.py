"""The run's cache of synthesized apps (tests/support/synth_cache.py): what it returns is what a fresh synth
returns, and an entry is never shared by two apps that differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import paths, synth_cache
from tests.support.helpers import Synthesized, config_with, synth

SMALL = {"backends": ["instance"]}


@contextmanager
def cache_in(folder: Path | None) -> Iterator[None]:
    """The run's cache set to ``folder`` (None: no cache), restored after. Not a MonkeyPatch: one holding a change
    turns the cache off."""
    before = os.environ.pop(synth_cache.ENV, None)
    if folder is not None:
        os.environ[synth_cache.ENV] = str(folder)
    try:
        yield
    finally:
        os.environ.pop(synth_cache.ENV, None)
        if before is not None:
            os.environ[synth_cache.ENV] = before


def templates(result: Synthesized) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in result.outdir.rglob("*.template.json")}


def synths(folder: Path) -> list[str]:
    return (folder / synth_cache.LOG).read_text().splitlines()


def test_an_app_read_from_the_cache_is_the_app_a_fresh_synth_makes(tmp_path):
    with cache_in(tmp_path):
        first = synth(config_with(**SMALL), nag=False)
        again = synth(config_with(**SMALL), nag=False)
        # Another worker: a process of its own reads the entry and synthesizes nothing.
        other = subprocess.run(
            [sys.executable, "-c", "from tests.support.helpers import synth, config_with\n"
             f"print(synth(config_with(**{SMALL!r}), nag=False).outdir)"],
            cwd=paths.ROOT, env=os.environ.copy(), capture_output=True, text=True, check=True,
        )
    with cache_in(None):
        fresh = synth(config_with(**SMALL), nag=False)

    assert len(synths(tmp_path)) == 1
    assert again.outdir == first.outdir == Path(other.stdout.strip()) and first.outdir.parent == tmp_path
    assert templates(again) == templates(fresh) and templates(again)
    assert [s.stack_name for s in again.assembly.stacks] == [s.stack_name for s in fresh.assembly.stacks]
    # The live stacks of a cached app are composed on first use, with the names of the synthesized ones.
    assert again._stacks is None
    assert [(s.stack_name, s.artifact_id) for s in again.stacks.stacks] == [
        (s.stack_name, s.artifact_id) for s in fresh.stacks.stacks
    ]
    assert again.template_json("instance") == fresh.template_json("instance")


def test_apps_that_differ_never_share_an_entry(tmp_path):
    with cache_in(tmp_path):
        small = synth(config_with(**SMALL), nag=False)
        bigger = synth(config_with(**SMALL, instance={"instance_type": "trn1.32xlarge"}), nag=False)
        nagged = synth(config_with(**SMALL), nag=True)

    assert len({small.outdir, bigger.outdir, nagged.outdir}) == 3
    assert len(synths(tmp_path)) == 3
    assert templates(small) != templates(bigger)
    assert templates(small) == templates(nagged)  # the same app: only the flag tells their entries apart


def test_a_synth_while_a_monkeypatch_holds_a_change_is_not_cached(tmp_path):
    from trainium_cdk.facts import versions

    with cache_in(tmp_path), pytest.MonkeyPatch.context() as patch:
        patch.setattr(versions, "__doc__", "patched")
        result = synth(config_with(**SMALL), nag=False)

    assert result.outdir.parent != tmp_path
    test = "tests/meta/test_synth_cache.py::test_a_synth_while_a_monkeypatch_holds_a_change_is_not_cached"
    assert synths(tmp_path) == [f"{os.getpid()} app t uncached {test}"]  # the line names the test that synthesized


def test_the_kept_folder_is_this_codes_and_drops_other_codes(tmp_path):
    kept = tmp_path / "kept"
    stale = kept / "0123456789abcdef"
    stale.mkdir(parents=True)
    (stale / "entry").mkdir()
    own = synth_cache.kept_folder(kept)
    (own / synth_cache.LOG).write_text("a synth of the last run\n")

    assert own == kept / synth_cache.code_digest()[:16] and own.is_dir()
    assert not stale.exists()  # its digest is in none of this code's keys
    assert synth_cache.kept_folder(kept) == own and not (own / synth_cache.LOG).exists()  # a run counts its own


def test_a_second_run_of_the_same_code_synthesizes_nothing(tmp_path):
    """Two pytest runs with the same cache folder (`-o cache_dir`, as .pytest_cache between two `make test`): the
    first synthesizes this module's small app into the kept folder, the second reads it."""
    env = {k: v for k, v in os.environ.items() if k not in (synth_cache.ENV, "PYTEST_XDIST_WORKER")}

    def run() -> str:
        done = subprocess.run(
            # Without xdist, and without the CLI's fixtures (moto): this module needs neither.
            [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:tests.support.cli_support",
             "-o", f"cache_dir={tmp_path / 'cache'}",
             f"{__file__}::test_a_small_app_synthesizes"],
            cwd=paths.ROOT, env=env, capture_output=True, text=True, check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        (line,) = [x for x in done.stdout.splitlines() if x.startswith("synthesized apps:")]
        return line

    first, second = run(), run()
    folder = tmp_path / "cache" / "d" / synth_cache.KEPT / synth_cache.code_digest()[:16]
    assert first == f"synthesized apps: 1 into the cache ({folder}), 0 uncached"
    assert second == f"synthesized apps: 0 into the cache ({folder}), 0 uncached"


def test_a_small_app_synthesizes():
    assert synth(config_with(**SMALL), nag=False).template_json("instance")["Resources"]


def test_apps_share_one_copy_of_each_staged_asset(tmp_path):
    """Two EKS apps stage the same kubectl and Helm layers: each asset is one file on disk, linked into both
    assemblies, and reads as the asset it was."""
    with cache_in(tmp_path):
        one = synth(config_with(backends=["eks"]), nag=False)
        two = synth(config_with(backends=["eks"], group={"nodes": 1, "instance_type": "trn1.2xlarge"}), nag=False)
    with cache_in(None):
        fresh = synth(config_with(backends=["eks"]), nag=False)

    shared = {p.name for p in one.outdir.glob("asset.*")} & {p.name for p in two.outdir.glob("asset.*")}
    zips = sorted(n for n in shared if n.endswith(".zip"))
    assert zips, "the EKS apps stage zipped layers"
    for name in zips:
        assert (one.outdir / name).stat().st_ino == (two.outdir / name).stat().st_ino == (
            tmp_path / synth_cache.ASSETS / name).stat().st_ino
        assert (one.outdir / name).read_bytes() == (fresh.outdir / name).read_bytes()
    folders = [p for p in one.outdir.glob("asset.*") if p.is_dir()]
    for path in folders:
        assert sorted(f.relative_to(path) for f in path.rglob("*")) == sorted(
            f.relative_to(fresh.outdir / path.name) for f in (fresh.outdir / path.name).rglob("*"))
