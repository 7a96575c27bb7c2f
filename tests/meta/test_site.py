"""The documentation site builds (`mkdocs build --strict`: a broken link or anchor, or a page left out of the nav,
fails it: mkdocs.yml), and the README stays a front page whose links lead into it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import paths, readme

ROOT = paths.ROOT
README_MOST_LINES = 400


def test_the_site_builds_strict_offline(tmp_path):
    # NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor (printed on every build, not a warning).
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env, check=False, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "WARNING" not in done.stderr, done.stderr[-6000:]
    # The API reference rendered each public construct from its docstring (mkdocstrings found it).
    constructs = (tmp_path / "site" / "reference" / "api" / "constructs" / "index.html").read_text()
    for name in ("TrainiumCluster", "TrainiumBatch", "LustreStorage", "DevInstance", "SlurmCluster"):
        assert re.search(rf'id="trainium_cdk\.constructs\.\w+\.{name}"', constructs), name
    # The changelog page is the repository's CHANGELOG.md, included where it stays.
    assert "Changelog" in (tmp_path / "site" / "changelog" / "index.html").read_text()


def test_the_readme_is_a_front_page_whose_links_lead_somewhere():
    text = readme.README.read_text()
    assert len(text.splitlines()) <= README_MOST_LINES
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local and all((ROOT / link).exists() for link in local), [link for link in local if not (ROOT / link).exists()]
    # Every guide, concepts, reference and contributing page is one click from the front page.
    linked = {(ROOT / link).resolve() for link in local}
    pages = [p for p in readme.DOCS.rglob("*.md") if p.name not in ("index.md", "changelog.md")]
    assert not [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked]


def test_what_trn_prints_points_at_pages_that_exist():
    """A pointer into the docs in a message of `trn` names a page of the site. The README held the sections once;
    `trn` pointed at two, one of which ("permissions of the trn CLI") never existed."""
    pointers = []
    for path in sorted((ROOT / "trainium_cdk" / "cli").glob("*.py")):
        text = path.read_text()
        assert not re.search(r"README[,:] ", text), f"{path.name}: a pointer into the README, which is a front page now"
        pointers += re.findall(r"docs/[\w/.-]+\.md", text)
    assert pointers and all((ROOT / p).is_file() for p in pointers), pointers
