"""ParallelCluster's own validation of our cluster configurations, from its own package.

aws-parallelcluster pins CDK v1 and constructs 3, so it lives in a virtual environment of its own,
``.venv-pcluster`` at the project root (created here on first use, or by `make test` through
``python -m tests.support.pcluster_schema --setup``), and runs tools/pcluster_validate.py as a subprocess.

    python -m tests.support.pcluster_schema --setup          # create or update .venv-pcluster
    python -m tests.support.pcluster_schema CONFIG.yaml ...  # validate cluster configuration files
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import paths
from trainium_cdk.facts.versions import PARALLELCLUSTER_VERSION

ROOT = paths.ROOT
VENV = ROOT / ".venv-pcluster"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / f".installed-aws-parallelcluster-{PARALLELCLUSTER_VERSION}"
VALIDATOR = ROOT / "tools" / "pcluster_validate.py"
UPDATE_POLICIES = ROOT / "tools" / "pcluster_update_policies.py"
IMAGE_VALIDATOR = ROOT / "tools" / "pcluster_validate_image.py"
PACKAGE = f"aws-parallelcluster=={PARALLELCLUSTER_VERSION}"
INSTALL_TIMEOUT_S = 900
VALIDATE_TIMEOUT_S = 300


class PclusterUnavailable(RuntimeError):
    """The ParallelCluster environment could not be created (no network, no venv module...)."""


@dataclass(frozen=True)
class Result:
    errors: list[str]
    warnings: list[str]


@contextmanager
def _lock() -> Iterator[None]:
    # Several pytest runs may start at once on one machine: one of them builds, the others wait.
    lock = Path(tempfile.gettempdir()) / f"trainium-cdk-pcluster-{hashlib.sha256(bytes(ROOT)).hexdigest()[:12]}.lock"
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(args: Sequence[str], what: str) -> None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise PclusterUnavailable(f"{what} failed: {err}") from err
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise PclusterUnavailable(f"{what} failed (exit {done.returncode}):\n{tail}")


def ensure_venv() -> Path:
    """Create (or reuse) .venv-pcluster with the pinned aws-parallelcluster; return its python."""
    if STAMP.exists():
        return PYTHON
    with _lock():
        if STAMP.exists():
            return PYTHON
        shutil.rmtree(VENV, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(VENV)], f"creating {VENV.name} (python -m venv)")
        _run(
            [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", PACKAGE],
            f"pip install {PACKAGE} into {VENV.name}",
        )
        STAMP.touch()
    return PYTHON


def venv_or_skip(purpose: str) -> Path:
    """ensure_venv() for a test: skipped where the environment cannot be created, never in CI."""
    import os

    import pytest

    try:
        return ensure_venv()
    except PclusterUnavailable as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{purpose} must run in CI: {err}")
        pytest.skip(f"{purpose} is not available here: {err}")


def _call(tool: Path, request: list[dict[str, Any]], region: str) -> list[Any]:
    """Run a tool in the ParallelCluster environment: JSON request on stdin, JSON answer on stdout."""
    python = ensure_venv()
    env = {**os.environ, "AWS_DEFAULT_REGION": region}
    for key in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env.pop(key, None)  # offline by design: never hand it credentials
    done = subprocess.run(
        [str(python), str(tool)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tool.name} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def validate_many(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, Result]:
    """Validate cluster configurations (cluster name -> configuration) in one subprocess."""
    request = [{"name": name, "config": config} for name, config in configs.items()]
    answers = _call(VALIDATOR, request, next(iter(configs.values())).get("Region", "us-east-1"))
    return {name: Result(**answer) for name, answer in zip(configs, answers, strict=True)}


@dataclass(frozen=True)
class ImageResult:
    """ParallelCluster's check of an image configuration, and the name prefix `pcluster
    list-official-images` searches for its OS in the pinned version."""

    errors: list[str]
    warnings: list[str]
    official_image_name_prefix: str


def validate_images(configs: Mapping[str, tuple[str, Mapping[str, Any]]], image_os: str) -> dict[str, ImageResult]:
    """Validate `pcluster build-image` configurations (case -> (image id, configuration)), in one
    subprocess, each with the official image prefix of ``image_os`` (a ParallelCluster OS such as ubuntu2404)."""
    request = [{"name": image_id, "config": config, "os": image_os} for image_id, config in configs.values()]
    answers = _call(IMAGE_VALIDATOR, request, next(iter(configs.values()))[1].get("Region", "us-east-1"))
    return {case: ImageResult(**answer) for case, answer in zip(configs, answers, strict=True)}


@dataclass(frozen=True)
class Change:
    """A setting that differs between two configurations, with ParallelCluster's update policy and its
    check (SUCCEEDED, ACTION NEEDED, FAILED) with compute nodes running and with the fleet stopped."""

    path: str
    policy: str
    old: Any
    new: Any
    running: str
    stopped: str


def update_changes(
    pairs: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]], cluster_name: str = "trainium-cluster"
) -> dict[str, list[Change]]:
    """case -> the changes from a base to a target configuration, each with its update policy."""
    request = [{"name": cluster_name, "base": base, "target": target} for base, target in pairs.values()]
    answers = _call(UPDATE_POLICIES, request, next(iter(pairs.values()))[0].get("Region", "us-east-1"))
    return {case: [Change(**c) for c in answer] for case, answer in zip(pairs, answers, strict=True)}


def validate(config: Mapping[str, Any], cluster_name: str = "trainium-cluster") -> Result:
    return validate_many({cluster_name: config})[cluster_name]


def main(argv: Sequence[str]) -> int:
    if list(argv) == ["--setup"]:
        try:
            print(ensure_venv())
        except PclusterUnavailable as err:
            print(err, file=sys.stderr)
            return 1
        return 0
    import yaml

    failed = 0
    for path in argv:
        result = validate(yaml.safe_load(Path(path).read_text()), Path(path).stem)
        for line in result.errors:
            print(f"{path}: error: {line}")
        for line in result.warnings:
            print(f"{path}: warning: {line}")
        failed += bool(result.errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
