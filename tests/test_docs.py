"""Generated documentation stays in sync with the code."""

from __future__ import annotations

from pathlib import Path

from trainium_cdk import docs

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_config_reference_is_generated_from_the_model():
    text = README.read_text()
    start, end = text.index(docs.BEGIN), text.index(docs.END) + len(docs.END)
    assert text[start:end] == docs.block(), "run: .venv/bin/python -m trainium_cdk.docs --write"


def test_reference_lists_every_section():
    reference = docs.config_reference()
    for key in ("`compute_groups[].instance_type`", "`storage.capacity_gib`", "`eks.endpoint_access`", "`network.cidr`"):
        assert key in reference
