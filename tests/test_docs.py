"""Generated documentation stays in sync with the code."""

from __future__ import annotations

from pathlib import Path

from trainium_cdk import docs

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_config_reference_is_generated_from_the_model():
    text = README.read_text()
    start, end = text.index(docs.BEGIN), text.index(docs.END) + len(docs.END)
    assert text[start:end] == docs.block(), "run: make docs"


def test_reference_lists_every_section():
    reference = docs.config_reference()
    for key in ("`compute_groups[].instance_type`", "`storage.capacity_gib`", "`eks.endpoint_access`", "`network.cidr`"):
        assert key in reference


def test_readme_architecture_is_generated_from_the_app():
    text = README.read_text()
    start, end = text.index(docs.ARCH_BEGIN), text.index(docs.ARCH_END) + len(docs.ARCH_END)
    generated = docs.architecture_block()
    assert text[start:end] == generated, "run: make docs"
    # Every backend's stack is in the picture, and each depends on the network.
    for stack in ("trainium-eks", "trainium-batch", "trainium-parallelcluster", "trainium-instance"):
        assert f"{stack.replace('-', '_')} --> trainium_network" in generated


def test_the_waivers_are_listed_in_one_generated_file():
    """docs/waivers.md: every cdk-nag acknowledgment of the apps and every checkov waiver, as the code has them."""
    from trainium_cdk import waivers

    listed = waivers.acknowledgments()
    generated = waivers.document(listed)
    assert waivers.WAIVERS_DOC.read_text() == generated, "run: make docs"
    assert {a.pack for a in listed} == set(waivers.NAG_PACKS)
    assert all(a.reason.strip() for a in listed)
    assert "| CKV_AWS_115 |" in generated
    assert "](docs/waivers.md)" in README.read_text()


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
