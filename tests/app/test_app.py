"""app.py as the CDK CLI runs it: context overrides, and bad input that stops before any template. The default app
itself, through `make synth` and the CDK CLI: tests/meta/test_toolchain.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths

ROOT = paths.ROOT


def run_app(tmp_path: Path, context: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # The CLI hands context and the output folder to the app through these variables.
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path)}
    env.pop("AWS_PROFILE", None)
    return subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"nodes": "99"}, "compute_groups[0].nodes = 99: between 1 and the group maximum max_nodes (4)"),
        ({"instance_type": "trn9.large"}, "compute_groups[0].instance_type = 'trn9.large': unknown instance type"),
        ({"backends": "eks,slurm"}, "unknown backend 'slurm'"),
        ({"config": "does/not/exist.yaml"}, "config = 'does/not/exist.yaml': a YAML file that exists"),
    ],
)
def test_bad_input_stops_before_any_template(tmp_path, context, message):
    proc = run_app(tmp_path, context)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and "jsii" not in proc.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_a_config_error_stops_before_the_cdk_loads(tmp_path):
    """The config is checked before aws-cdk-lib and cdk8s load (their JavaScript process, a second of imports): a
    mistake answers in a third of the time. Python's import log (-X importtime) names every module it loaded."""
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"nodes": "99"}), "CDK_OUTDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "app.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 2
    (error,) = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert error.startswith("trainium-cdk: ") and "compute_groups[0].nodes = 99" in error
    loaded = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "trainium_cdk.app.config" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("aws_cdk", "cdk8s", "jsii", "constructs")}


@pytest.mark.parametrize("environment", [{"CDK_CONTEXT_JSON": "{not json"}, {"CONTEXT_OVERFLOW_LOCATION_ENV": "/x"}])
def test_a_context_the_app_cannot_read_early_is_left_to_the_cdk(environment):
    """A context that is not JSON, or partly in the CLI's overflow file: the early check steps aside (no traceback of
    its own) and the App reads the context as before."""
    import app

    with pytest.MonkeyPatch.context() as patch:
        for name in ("CDK_CONTEXT_JSON", "CONTEXT_OVERFLOW_LOCATION_ENV"):
            patch.delenv(name, raising=False)
        for name, value in environment.items():
            patch.setenv(name, value)
        assert app.context_from_cli() is None
        app.check_config_first()  # returns: nothing to check
