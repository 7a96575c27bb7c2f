"""app.py as a new user meets it: typos in -c keys, config files that cannot be read, no Node banner. Each runs the
real app in a subprocess, in a scratch working directory (dist/ lands there); the banner check synthesizes a whole
app, an end-to-end run (`make test-e2e`). dist/ written afresh, and kept when a synth fails: through `make synth` and
the CDK CLI, in tests/meta/test_toolchain.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.helpers import CDK_CONTEXT
from trainium_cdk.app.app_context import KNOWN_KEYS, check_context, unknown_keys
from trainium_cdk.app.config import ConfigError

ROOT = paths.ROOT
CONFIG = str(ROOT / "config" / "default.yaml")
# What the CDK CLI adds to cdk.json's context (seen in CDK_CONTEXT_JSON from CLI 2.1148).
CLI_CONTEXT = {
    "aws:cdk:enable-path-metadata": True, "aws:cdk:enable-asset-metadata": True,
    "aws:cdk:version-reporting": True, "aws:cdk:bundling-stacks": ["**"],
    "availability-zones:account=123456789012:region=us-west-2": ["us-west-2a"],
}
NODE20_PATH = "/usr/bin:/bin"  # the machine's end-of-life Node 20 only


def run_app(cwd: Path, context: dict[str, object], *, path: str | None = None) -> subprocess.CompletedProcess[str]:
    full = {**CDK_CONTEXT, **CLI_CONTEXT, "config": CONFIG, **context}
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(full), "CDK_OUTDIR": str(cwd / "cdk.out")}
    env.pop("JSII_NODE", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, str(ROOT / "app.py")], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )


def assert_config_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainium-cdk: "), proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


# -- context keys ------------------------------------------------------------------------------------


def test_cdk_and_cli_keys_are_not_unknown():
    assert unknown_keys({**CDK_CONTEXT, **CLI_CONTEXT, "pipeline": "true", "acknowledged-issue-numbers": [1]}) == []


@pytest.mark.parametrize("key", ["backend", "instance-type", "node", "regoin"])
def test_an_unknown_plain_key_is_rejected_with_the_known_ones(key):
    with pytest.raises(ConfigError) as err:
        check_context({**CDK_CONTEXT, key: "x"})
    assert f"'{key}'" in str(err.value) and "known: " + ", ".join(KNOWN_KEYS) in str(err.value)
    assert {"max_nodes", "az_ids", "config", "pipeline"} <= set(KNOWN_KEYS)


@pytest.mark.parametrize(
    ("context", "words"),
    [
        ({"backend": "batch"}, ("-c = 'backend'", "unknown context key", "backends")),
        ({"instance-type": "trn1n.32xlarge"}, ("'instance-type'", "instance_type")),
        ({"config": str(ROOT / "config")}, ("config = ", "not a directory")),
        ({"config": "default", "region": "eu-west-1"}, ("region = 'eu-west-1'", "-c az_ids=")),
    ],
)
def test_mistakes_stop_synth_with_one_line_and_exit_2(tmp_path, context, words):
    proc = run_app(tmp_path, context)
    assert_config_error(proc, *words)
    assert not list(tmp_path.glob("cdk.out/*.template.json")) and not (tmp_path / "dist").exists()


def test_yaml_error_through_the_app_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("project: x\nbackends: [eks\n")
    assert_config_error(run_app(tmp_path, {"config": str(bad)}), f"{bad}:3:", "valid YAML")


# -- the Node banner ---------------------------------------------------------------------------------


@pytest.mark.e2e  # a whole synth by app.py in a process of its own: `make test-e2e`
def test_app_on_a_machine_with_node_20_prints_no_banner(tmp_path):
    proc = run_app(tmp_path, {"backends": "batch"}, path=NODE20_PATH)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""


def test_an_app_that_imports_trainium_cdk_first_gets_no_banner(tmp_path):
    code = "import trainium_cdk, aws_cdk; aws_cdk.App(); print('ok')"
    env = {**os.environ, "PATH": NODE20_PATH, "PYTHONPATH": str(ROOT)}
    env.pop("JSII_NODE", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    assert "end-of-life" not in proc.stderr and proc.stderr == ""
