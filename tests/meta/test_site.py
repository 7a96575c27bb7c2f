"""The documentation site builds (`mkdocs build --strict`: a broken link or anchor, or a page left out of the nav,
fails it: mkdocs.yml), its diagrams render in a browser from the site alone, and the README stays a front page whose
links lead into it."""

from __future__ import annotations

import functools
import html
import http.server
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import headless_chromium, paths, readme

ROOT = paths.ROOT
README_MOST_LINES = 400
RENDER_S = 20  # a diagram's longest wait for mermaid (the architecture page's: 0.1 s after the load event here)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make site` builds it, once for the module."""
    built = tmp_path_factory.mktemp("site") / "site"
    # NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor (printed on every build, not a warning).
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(built)],
        cwd=ROOT, capture_output=True, text=True, env=env, check=False, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "WARNING" not in done.stderr, done.stderr[-6000:]
    return built


def test_the_site_builds_strict_offline(site):
    # The API reference rendered each public construct from its docstring (mkdocstrings found it).
    constructs = (site / "reference" / "api" / "constructs" / "index.html").read_text()
    for name in ("TrainiumCluster", "TrainiumBatch", "LustreStorage", "DevInstance", "SlurmCluster"):
        assert re.search(rf'id="trainium_cdk\.constructs\.\w+\.{name}"', constructs), name
    # The changelog page is the repository's CHANGELOG.md, included where it stays.
    assert "Changelog" in (site / "changelog" / "index.html").read_text()


_SOURCE = re.compile(r'<pre class="mermaid"><code>(.*?)</code></pre>', re.S)


def _diagrams(site: Path) -> dict[str, list[str]]:
    """Page URL -> the mermaid source of each of its diagrams, in order: every ```mermaid block of docs/, where the
    build put it (a block the build did not hand to mermaid fails here)."""
    found = {}
    for page in readme.DOCS.rglob("*.md"):
        blocks = page.read_text().count("```mermaid\n")
        if blocks:
            url = page.relative_to(readme.DOCS).with_suffix("").as_posix() + "/"
            url = url.removesuffix("index/")
            found[url] = [html.unescape(s) for s in _SOURCE.findall((site / url / "index.html").read_text())]
            assert len(found[url]) == blocks, f"{page}: {blocks} mermaid blocks, {len(found[url])} diagrams built"
    return found


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _rendered(browser: headless_chromium.Chromium, count: int) -> list[dict]:
    """The page's drawn diagrams (mkdocs-material's `div.mermaid`, each with its SVG in a closed shadow root), once
    ``count`` are drawn or RENDER_S have passed."""
    deadline = time.monotonic() + RENDER_S
    while True:
        hosts = [n for n in headless_chromium.walk(browser.document())
                 if n.get("nodeName") == "DIV" and "mermaid" in headless_chromium.classes(n)]
        drawn = [h for h in hosts if any(n.get("nodeName") == "svg" for n in headless_chromium.walk(h))]
        if len(drawn) == count or time.monotonic() > deadline:
            return drawn
        time.sleep(0.2)


def test_every_diagram_renders_in_a_browser_from_the_site_alone(site, served):
    """Each ```mermaid block of docs/ is, in Chromium, an SVG where its source was, showing the source's labels,
    with every request of the page to the site itself. mkdocs-material loads mermaid from unpkg.com unless the page
    defines it: without tools/docs-site/hooks.py the architecture picture stayed raw text here (and offline)."""
    if headless_chromium.executable() is None:
        pytest.skip("chromium is not installed (Debian's package `chromium`; .ci/run installs it)")
    diagrams = _diagrams(site)
    assert "concepts/architecture/" in diagrams
    browser = headless_chromium.Chromium()
    try:
        for url, sources in diagrams.items():
            browser.open(served + url)
            drawn = _rendered(browser, len(sources))
            assert len(drawn) == len(sources), f"{url}: {len(drawn)} of {len(sources)} diagrams drawn"
            left = [n for n in headless_chromium.walk(browser.document()) if n.get("nodeName") == "PRE"
                    and headless_chromium.text(n) in {" ".join(s.split()) for s in sources}]
            assert not left, f"{url}: a diagram's source shown as text"
            for number, (host, source) in enumerate(zip(drawn, sources, strict=True), 1):
                shown = {n["nodeValue"].strip() for n in headless_chromium.walk(host) if n.get("nodeType") == 3}
                labels = {part for label in re.findall(r'\["([^"]+)"\]', source) for part in label.split("<br/>")}
                assert labels and labels <= shown, f"{url}: diagram {number} lacks {sorted(labels - shown)[:5]}"
            outside = [u for u in browser.requested() if not u.startswith((served, "data:"))]
            assert not outside, f"{url}: loaded from outside the site: {outside}"
    finally:
        browser.close()


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
