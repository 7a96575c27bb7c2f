"""checkov (pinned in requirements-checkov.txt) over every synthesized template and every manifest in dist/.

The apps of tests/support/apps.py (every backend, every supported instance type, the pipeline app with its prod
stage) and the dist/ each writes.
A failed check must be fixed or waived in tests/checkov_waivers.yaml, with its resources and reason;
a waiver that no longer matches anything fails too, so the file never outlives its findings.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support import paths
from tests.support.apps import VARIANTS, synthesized, synthesized_pipeline
from tests.support.checkov_env import CheckovUnavailable, ensure_venv, scan
from trainium_cdk.app.dist import write_dist

WAIVERS = paths.TESTS.joinpath("checkov_waivers.yaml")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    try:
        ensure_venv()
    except CheckovUnavailable as err:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"checkov is not available here: {err}")
    root = tmp_path_factory.mktemp("checkov")
    for i, name in enumerate(sorted(VARIANTS)):
        result = synthesized(name)
        (root / "cfn").mkdir(exist_ok=True)
        for path in result.template_paths():
            shutil.copy(path, root / "cfn" / f"{i}-{path.name}")
        write_dist(result.config, root / "dist" / str(i))
    # A manifest the apps write alike (most charts) is scanned once: 51 of the 82 files differ.
    seen: set[bytes] = set()
    for path in sorted(p for p in (root / "dist").rglob("*") if p.is_file()):
        digest = hashlib.sha256(path.read_bytes()).digest()
        if digest in seen:
            path.unlink()
        seen.add(digest)
    # The pipeline app: the pipeline stack and the prod stage's stacks (the dev stage's differ by values only:
    # tests/app/test_pipeline.py).
    for path in synthesized_pipeline().checked_template_paths():
        shutil.copy(path, root / "cfn" / f"pipeline-{path.parent.name}-{path.name}")
    return {r["check_type"]: r for r in scan(root)}


def _waivers() -> list[dict]:
    waivers = yaml.safe_load(WAIVERS.read_text())
    for waiver in waivers:
        assert set(waiver) == {"check", "resources", "reason"}, waiver
        assert waiver["reason"].strip() and waiver["resources"], waiver
    assert len({w["check"] for w in waivers}) == len(waivers), "one entry per check"
    return waivers


def _waived(finding: dict, waivers: list[dict]) -> dict | None:
    for waiver in waivers:
        if waiver["check"] == finding["check_id"] and any(
            fnmatch.fnmatchcase(finding["resource"], pattern) for pattern in waiver["resources"]
        ):
            return waiver
    return None


def test_every_template_and_manifest_is_scanned(report):
    assert set(report) == {"cloudformation", "kubernetes"}
    files = {r["file_path"] for rep in report.values() for r in rep["results"]["passed_checks"]}
    assert any(f.endswith(".template.json") for f in files)
    assert any(f.endswith(".k8s.yaml") for f in files)


def test_every_failed_check_is_fixed_or_waived(report):
    waivers = _waivers()
    failed = [f for rep in report.values() for f in rep["results"]["failed_checks"]]
    passed = sum(rep["summary"]["passed"] for rep in report.values())
    unwaived = sorted({f"{f['check_id']} {f['resource']} ({Path(f['file_path']).name})"
                       for f in failed if _waived(f, waivers) is None})
    print(f"checkov: {passed} passed, {len(failed)} failed, {len(failed) - len(unwaived)} waived")
    assert unwaived == [], "\n".join(unwaived)


def test_every_waiver_still_matches_a_finding(report):
    failed = [f for rep in report.values() for f in rep["results"]["failed_checks"]]
    for waiver in _waivers():
        for pattern in waiver["resources"]:
            assert any(
                f["check_id"] == waiver["check"] and fnmatch.fnmatchcase(f["resource"], pattern) for f in failed
            ), f"stale waiver: {waiver['check']} {pattern}"
