"""Generated documentation stays in sync with the code."""

from __future__ import annotations

from pathlib import Path

from tests.support import paths
from trainium_cdk.app import docs

ROOT = paths.ROOT
README = ROOT / "README.md"


def test_the_config_reference_is_generated_from_the_model():
    text = docs.CONFIG_PAGE.read_text()
    start, end = text.index(docs.BEGIN), text.index(docs.END) + len(docs.END)
    assert text[start:end] == docs.block(), "run: make docs"


def test_the_instance_catalog_table_is_generated_from_the_catalog():
    """docs/reference/instance-catalog.md: a row per built-in type, its facts as catalog.py has them."""
    from trainium_cdk.facts.catalog import BUILTIN_INSTANCE_TYPES

    text = docs.CATALOG_PAGE.read_text()
    start, end = text.index(docs.CATALOG_BEGIN), text.index(docs.CATALOG_END) + len(docs.CATALOG_END)
    assert text[start:end] == docs.catalog_block(), "run: make docs"
    rows = [line for line in docs.catalog_table().splitlines()[2:]]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == [s.name for s in BUILTIN_INSTANCE_TYPES]
    trn1 = next(row for row in rows if row.startswith("| trn1.32xlarge |"))
    assert "| 16 | 32 | 8 / 8 |" in trn1 and "usw2-az4" in trn1


def test_reference_lists_every_section():
    reference = docs.config_reference()
    for key in ("`compute_groups[].instance_type`", "`storage.capacity_gib`", "`eks.endpoint_access`", "`network.cidr`"):
        assert key in reference


def test_the_architecture_is_generated_from_the_app():
    text = docs.ARCHITECTURE_PAGE.read_text()
    start, end = text.index(docs.ARCH_BEGIN), text.index(docs.ARCH_END) + len(docs.ARCH_END)
    generated = docs.architecture_block()
    assert text[start:end] == generated, "run: make docs"
    # Every backend's stack is in the picture, and each depends on the network.
    for stack in ("trainium-eks", "trainium-batch", "trainium-parallelcluster", "trainium-instance"):
        assert f"{stack.replace('-', '_')} --> trainium_network" in generated


def test_the_waivers_are_listed_in_one_generated_file():
    """docs/waivers.md: every cdk-nag acknowledgment of the apps and every checkov waiver, as the code has them."""
    from trainium_cdk.app import waivers

    listed = waivers.acknowledgments()
    generated = waivers.document(listed)
    assert waivers.WAIVERS_DOC.read_text() == generated, "run: make docs"
    assert {a.pack for a in listed} == set(waivers.NAG_PACKS)
    assert all(a.reason.strip() for a in listed)
    assert "| CKV_AWS_115 |" in generated
    assert "](docs/waivers.md)" in README.read_text()
    assert "](../waivers.md)" in (ROOT / "docs" / "contributing" / "quality-gates.md").read_text()


def test_the_api_reference_is_generated_and_lists_every_public_name():
    """docs/reference/api/: one mkdocstrings entry per public name of the library (``trainium_cdk.__all__``) and
    the app (``trainium_cdk.app.__all__``)."""
    import trainium_cdk
    from trainium_cdk import app

    pages = docs.api_pages()
    for name, text in pages.items():
        assert (docs.API_DIR / f"{name}.md").read_text() == text, "run: make docs"
    entries = [line for text in pages.values() for line in text.splitlines() if line.startswith("::: ")]
    assert sorted(entry.rsplit(".", 1)[1] for entry in entries) == sorted(
        package._ALIASES.get(name, name) for package in (trainium_cdk, app) for name in package.__all__
    )
    assert sorted(p.name for p in docs.API_DIR.glob("*.md")) == sorted(f"{name}.md" for name in pages)


def test_no_file_in_the_tree_keeps_a_merge_conflict():
    """A merge that kept both sides of a conflict must not keep its markers (the CHANGELOG once did)."""
    import subprocess

    root = README.parent
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    marked = []
    for name in tracked:
        path = root / name
        if path.is_symlink() or not path.is_file() or path.suffix not in {".md", ".py", ".yaml", ".yml", ".toml", ".txt", ".sh", ".json", ".cfg"}:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======":
                marked.append(f"{name}:{number}")
    assert not marked, marked


def test_the_changelog_is_a_release_log():
    """Each release's changes come under Keep a Changelog's kinds (and Upgrading), each kind once per release, in
    that order; topics are level-4 headings under a kind, never issue numbers (a log of issues is not a release log)."""
    import re

    kinds = ["Upgrading", "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
    text = (README.parent / "CHANGELOG.md").read_text()
    releases = re.split(r"^## ", text, flags=re.M)[1:]
    assert releases, "CHANGELOG.md has no release (## heading)"
    for release in releases:
        version = release.splitlines()[0]
        headings = re.findall(r"^### (.*)$", release, flags=re.M)
        assert all(h in kinds for h in headings), (version, [h for h in headings if h not in kinds])
        assert headings == sorted(set(headings), key=kinds.index), (version, headings)
        assert not re.findall(r"^#+ .*\bissues? \d", release, flags=re.M), version
