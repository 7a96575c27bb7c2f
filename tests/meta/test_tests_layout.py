"""The layout of tests/ (docs/contributing/test-harness.md, "Where a test lives"): folders by kind, paths from
tests/support/paths.py, the CLI's fixtures registered once in tests/conftest.py."""

from __future__ import annotations

import re

from tests.support import paths

FOLDERS = {"support", "unit", "app", "e2e", "meta", "data"}


def _modules():
    return sorted(paths.TESTS.rglob("*.py"))


def test_no_module_at_the_top_of_tests_but_the_package_and_its_conftest():
    assert sorted(p.name for p in paths.TESTS.glob("*.py")) == ["__init__.py", "conftest.py"]
    assert {p.name for p in paths.TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))} == FOLDERS


def test_every_folder_of_modules_is_a_package():
    # `from tests.support.helpers import ...` and pytest's module names (tests.unit.cli.test_cli_jobs) need them.
    folders = {p.parent for p in _modules()}
    assert [f for f in folders if not (f / "__init__.py").exists()] == []


def test_test_modules_hold_tests_and_support_modules_none():
    assert [p.name for p in (paths.TESTS / "support").rglob("test_*.py")] == []
    elsewhere = [p for p in _modules() if "support" not in p.relative_to(paths.TESTS).parts]
    assert [p for p in elsewhere if p.name not in ("__init__.py", "conftest.py") and not p.name.startswith("test_")] == []


def test_paths_come_from_one_module():
    # A module moved to another folder keeps reading the same files (tests/support/paths.py).
    found = [str(p.relative_to(paths.ROOT)) for p in _modules()
             if p != paths.TESTS / "support" / "paths.py" and re.search(r"Path\(__file__\)", p.read_text())]
    assert found == []


def test_the_cli_fixtures_are_registered_once():
    # pytest reads pytest_plugins only in the top conftest.py.
    found = [str(p.relative_to(paths.ROOT)) for p in _modules() if re.search(r"^pytest_plugins\b", p.read_text(), re.M)]
    assert found == ["tests/conftest.py"]


def test_every_module_of_e2e_is_marked_e2e():
    # `make test` deselects by the marker, not by the folder: a module in e2e/ without it would run there.
    unmarked = [p.name for p in (paths.TESTS / "e2e").glob("test_*.py")
                if not re.search(r"^pytestmark = pytest\.mark\.e2e$", p.read_text(), re.M)]
    assert unmarked == []
