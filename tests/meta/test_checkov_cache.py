"""checkov's reports are kept by what it read (tests/support/checkov_env.py scan): a kept report is what checkov
gave, another folder with the same files reads it without running checkov, and one changed byte scans again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import checkov_env

# An S3 bucket without encryption, versioning or logging: checkov fails some of its checks.
BUCKET = {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {}}}}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    try:
        checkov_env.ensure_venv()
    except checkov_env.CheckovUnavailable as err:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"checkov is not available here: {err}")
    monkeypatch.setattr(checkov_env, "SCAN_CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def _folder(root: Path, template: dict) -> Path:
    (root / "cfn").mkdir(parents=True)
    (root / "cfn" / "a.template.json").write_text(json.dumps(template, indent=1))
    return root


def _failed(reports: list[dict]) -> list[str]:
    return sorted(f["check_id"] for r in reports for f in r["results"]["failed_checks"])


def test_a_kept_report_is_read_for_the_same_files_elsewhere_and_a_changed_file_scans_again(tmp_path, cache, monkeypatch):
    first = checkov_env.scan(_folder(tmp_path / "one", BUCKET), ("cloudformation",))
    assert "CKV_AWS_18" in _failed(first)  # access logging off: checkov itself ran
    assert len(list(cache.glob("*.json"))) == 1

    scans = []
    real_run = subprocess.run
    monkeypatch.setattr(checkov_env.subprocess, "run", lambda *a, **k: scans.append(a) or real_run(*a, **k))
    same = _folder(tmp_path / "two", BUCKET)
    assert checkov_env.scan(same, ("cloudformation",)) == first
    assert scans == []  # read, not scanned

    changed = json.loads(json.dumps(BUCKET))
    changed["Resources"]["Bucket"]["Properties"]["LoggingConfiguration"] = {"DestinationBucketName": "logs"}
    shutil.rmtree(same)
    again = checkov_env.scan(_folder(same, changed), ("cloudformation",))
    assert len(scans) == 1 and "CKV_AWS_18" not in _failed(again)
    assert len(list(cache.glob("*.json"))) == 2
