"""cfn-lint's findings are kept by the template's content (tests/support/helpers.py cfn_lint_errors): a kept entry
gives what cfn-lint gives, and a template that differs by one character is linted again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import helpers

BROKEN = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "seven", "Nope": "x"}}}}
FIXED = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "seven"}}}}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(helpers, "LINT_CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def _write(tmp_path: Path, name: str, template: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(template, indent=1))
    return path


def test_a_kept_entry_gives_what_cfn_lint_gives_under_the_files_own_name(tmp_path, cache):
    first = helpers.cfn_lint_errors(_write(tmp_path, "a.template.json", BROKEN), "us-west-2")
    assert [e.split()[0] for e in first] == ["E3002"], first
    assert len(list(cache.glob("*.json"))) == 1
    again = helpers.cfn_lint_errors(_write(tmp_path, "b.template.json", BROKEN), "us-west-2")
    assert again == [e.replace("(a.template.json:", "(b.template.json:") for e in first]
    assert len(list(cache.glob("*.json"))) == 1  # read, not linted again


def test_another_template_or_region_is_linted_again(tmp_path, cache):
    assert helpers.cfn_lint_errors(_write(tmp_path, "a.template.json", BROKEN), "us-west-2")
    assert helpers.cfn_lint_errors(_write(tmp_path, "a.template.json", FIXED), "us-west-2") == []
    assert helpers.cfn_lint_errors(_write(tmp_path, "a.template.json", FIXED), "us-east-2") == []
    assert len(list(cache.glob("*.json"))) == 3
