"""checkov, pinned in requirements-checkov.txt, in a virtual environment of its own.

checkov pins boto3 to one exact release, older than the one requirements.txt pins, so it cannot share
``.venv``: like ParallelCluster (tests/support/pcluster_schema.py) it lives in ``.venv-checkov`` at the project
root, created on first use or by `make test` through ``python -m tests.support.checkov_env --setup``, and runs
as a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support import paths
from tests.support.pcluster_schema import PclusterUnavailable, _lock, _run
from trainium_cdk.cli.yaml_edit import write_atomic

ROOT = paths.ROOT
VENV = ROOT / ".venv-checkov"
REQUIREMENTS = ROOT / "requirements-checkov.txt"
# Every transitive package of checkov pinned too (regenerate with a fresh venv and pip freeze).
CONSTRAINTS = ROOT / "constraints-checkov.txt"
PACKAGE = next(
    line.strip() for line in REQUIREMENTS.read_text().splitlines() if line.strip() and not line.startswith("#")
)
CHECKOV = VENV / "bin" / "checkov"
STAMP = VENV / f".installed-{PACKAGE.replace('==', '-')}"
SCAN_TIMEOUT_S = 900
# checkov's report depends only on the files it reads (their paths under the scanned folder and their text), the
# frameworks and checkov's own pinned packages: content-addressed, it is kept for later runs as cfn-lint's findings
# are (tests/support/helpers.py's LINT_CACHE). A scan of every app's templates took about 70 s.
SCAN_CACHE = ROOT / ".pytest_cache" / "trainium-cdk" / "checkov"


class CheckovUnavailable(PclusterUnavailable):
    """The checkov environment could not be created (no network, no venv module...)."""


def ensure_venv() -> Path:
    """Create (or reuse) .venv-checkov with the pinned checkov; return the checkov executable."""
    if STAMP.exists():
        return CHECKOV
    with _lock():
        if STAMP.exists():
            return CHECKOV
        try:
            _run([sys.executable, "-m", "venv", "--clear", str(VENV)], f"creating {VENV.name} (python -m venv)")
            _run([str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  "-r", str(REQUIREMENTS), "-c", str(CONSTRAINTS)], f"pip install {PACKAGE} into {VENV.name}")
        except PclusterUnavailable as err:
            raise CheckovUnavailable(str(err)) from err
        STAMP.touch()
    return CHECKOV


def scan(directory: Path, frameworks: Sequence[str] = ("cloudformation", "kubernetes")) -> list[dict[str, Any]]:
    """checkov's JSON report of every file under ``directory``: one report per framework (from SCAN_CACHE when the
    same files were scanned before)."""
    checkov = ensure_venv()
    key = scan_key(directory, frameworks)
    cached = SCAN_CACHE / f"{key}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    done = subprocess.run(
        [str(checkov), "--directory", str(directory), "--framework", *frameworks, "--output", "json",
         "--compact", "--skip-download"],
        capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(directory), "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
    )
    # Exit 1 means "some check failed", which the caller judges against the waivers.
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise RuntimeError(f"checkov failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    SCAN_CACHE.mkdir(parents=True, exist_ok=True)
    write_atomic(cached, json.dumps(reports))  # a reader gets a whole entry or none
    return reports


def scan_key(directory: Path, frameworks: Sequence[str]) -> str:
    """What decides a scan's report: checkov's pins, the frameworks, and each file's path (under ``directory``)
    and bytes."""
    digest = hashlib.sha256()
    for part in (REQUIREMENTS.read_bytes(), CONSTRAINTS.read_bytes(), json.dumps(list(frameworks)).encode()):
        digest.update(part + b"\0")
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def main(argv: Sequence[str]) -> int:
    if list(argv) == ["--setup"]:
        try:
            print(ensure_venv())
        except CheckovUnavailable as err:
            print(err, file=sys.stderr)
            return 1
        return 0
    print("usage: python -m tests.support.checkov_env --setup", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
