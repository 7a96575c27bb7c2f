"""Every page of the docs that the package, the configs, app.py and the Makefile name exists, with the section they
name (issue 48: config/default.yaml pointed to a README section that was gone); none names a README section (the
README is a front page, its sections move)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import paths

ROOT = paths.ROOT
# A docs page (docs/guide/teams.md) or the README, with an optional #section.
LINK = re.compile(r"(?<![\w/.-])((?:docs/[\w./-]+\.md|README\.md)(?:#[\w-]+)?)")
SOURCES = ("trainium_cdk", "config", "app.py", "Makefile")
SKIPPED = ("trainium_cdk/helm_charts/",)  # vendored upstream charts: their READMEs link upstream


def _files() -> list[Path]:
    found = []
    for source in SOURCES:
        path = ROOT / source
        for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            relative = file.relative_to(ROOT).as_posix()
            if not relative.startswith(SKIPPED) and file.suffix in ("", ".py", ".yaml", ".sh", ".md", ".toml"):
                found.append(file)
    return found


def _slug(heading: str) -> str:
    """A heading's anchor as mkdocs' toc writes it: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"[^\w\s-]", "", heading.lstrip("#").strip().lower())
    return re.sub(r"[\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    return {_slug(line) for line in page.read_text().splitlines() if line.startswith("#")}


def links() -> list[tuple[str, str]]:
    return [(file.relative_to(ROOT).as_posix(), match) for file in _files()
            for match in LINK.findall(file.read_text(errors="replace"))]


def test_every_docs_link_in_code_and_config_resolves():
    broken = []
    for source, link in links():
        page, _, anchor = link.partition("#")
        target = ROOT / page
        if page == "README.md" and anchor:
            broken.append(f"{source}: {link} (a README section: link the docs page instead)")
        elif not target.is_file():
            broken.append(f"{source}: {link} (no such page)")
        elif anchor and anchor not in _anchors(target):
            broken.append(f"{source}: {link} (no such section)")
    assert broken == []
    assert len(links()) > 10  # the walk finds them


def test_the_check_sees_a_broken_link(tmp_path):
    assert LINK.findall("see README.md#configuration-reference and docs/guide/nope.md") == [
        "README.md#configuration-reference", "docs/guide/nope.md"]
    assert _slug("## Sharing the platform between teams") == "sharing-the-platform-between-teams"
