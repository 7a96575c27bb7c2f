"""Paths the tests read, from one place: a test module moved to another folder keeps them."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
TESTS = ROOT / "tests"
DATA = TESTS / "data"  # vendored upstream data and recorded outputs, with their sources
PACKAGE = ROOT / "trainium_cdk"
DOCS = ROOT / "docs"
