"""`trn` in a project directory takes the context of its last `make synth`, and advises `make` commands.

After `make synth ARGS="-c backends=batch"` and `make deploy`, a plain `trn submit` used to read the config
alone (backends: [eks]) and look for the EKS stack; every command had to repeat `-c backends=batch`. Now,
given no -c, --config or TRN_CONFIG, `trn` takes the config and overrides tools/synth.py recorded, says so in
one stderr line, once; an explicit -c or --config wins. Its advice never prints a bare `cdk deploy`, which
would skip `make deploy`'s check of the assembly (tools/assembly.py).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.cli_support import ROOT, Result, run_cli

sys.path.insert(0, str(ROOT / "tools"))
import synth as synth_tool  # noqa: E402

NOTICE = "trn: using the context of the last `make synth` (cdk.out/trainium-cdk-synth.json): "

# A stand-in for the CDK CLI's `cdk synth -o DIR ...`: an empty cloud assembly in DIR. What runs for real is
# tools/synth.py, which writes the record of the synth's arguments the way `make synth` does.
FAKE_CDK = """#!/bin/sh
out=$(printf '%s\\n' "$@" | sed -n '/^-o$/{n;p;}')
mkdir -p "$out" && echo '{"artifacts": {}}' > "$out/manifest.json"
"""


@pytest.fixture
def project(aws_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory, as a user has it: cdk.json, config/default.yaml (backends: [eks]), working dir."""
    root = tmp_path / "project"
    (root / "config").mkdir(parents=True)
    shutil.copy(ROOT / "cdk.json", root / "cdk.json")
    shutil.copy(ROOT / "config" / "default.yaml", root / "config" / "default.yaml")
    cdk = tmp_path / "cdk"
    cdk.write_text(FAKE_CDK)
    cdk.chmod(0o755)
    monkeypatch.chdir(root)
    monkeypatch.delenv("TRN_CONFIG", raising=False)
    return root


def make_synth(project: Path, *args: str) -> None:
    """`make synth ARGS="..."`: tools/synth.py with the CDK CLI stand-in."""
    assert synth_tool.synth(list(args), cdk=[str(project.parent / "cdk")]) == 0
    assert json.loads((project / "cdk.out" / synth_tool.RECORD).read_text()) == {"args": list(args)}


def notices(result: Result) -> list[str]:
    return [ln for ln in result.err.splitlines() if ln.startswith(NOTICE)]


def test_after_a_batch_synth_a_plain_submit_targets_batch_and_says_so_once(project, aws):
    make_synth(project, "-c", "backends=batch")
    result = run_cli("submit", "--name", "first")
    assert result.code == 2
    assert notices(result) == [NOTICE + "-c backends=batch; -c or --config of your own replace it"]
    error = result.err.splitlines()[-1]
    # No stack in moto's account: the Batch stack is the one looked for, and the way to it is `make`.
    assert error.startswith("trn submit: stack trainium-batch does not exist in us-west-2")
    assert 'make synth` with it in backends, e.g. ARGS="-c backends=batch", then `make plan` and `make deploy`' in error
    assert "cdk deploy" not in result.err and len(result.err.splitlines()) == 2
    assert [op for _, op, _ in aws.calls] == ["DescribeStacks"]
    assert aws.of("DescribeStacks") == [{"StackName": "trainium-batch"}]


def test_explicit_c_or_config_wins_and_says_nothing(project, aws):
    make_synth(project, "-c", "backends=batch")
    for argv in (("-c", "backends=eks"), ("--config", str(project / "config" / "default.yaml"))):
        result = run_cli("cost", *argv)
        assert result.code == 0 and notices(result) == [], result.err
        assert "EKS control plane" in result.out
    plain = run_cli("cost")
    assert notices(plain) and "EKS control plane" not in plain.out  # backends: [batch]


def test_the_synths_config_file_and_overrides_are_read(project, aws_env):
    other = project / "config" / "small.yaml"
    other.write_text((project / "config" / "default.yaml").read_text().replace("project: trainium", "project: small"))
    make_synth(project, "--quiet", "-c", "config=config/small.yaml", "--context", "nodes=1", "-c=max_nodes=1")
    result = run_cli("cost")
    assert notices(result) == [NOTICE + "-c config=config/small.yaml -c nodes=1 -c max_nodes=1; -c or --config of "
                               "your own replace it"]
    assert re.search(r"compute group train: 1 x trn1\.32xlarge", result.out), result.out


def test_a_synth_without_context_changes_nothing(project, aws_env):
    make_synth(project)
    result = run_cli("cost")
    assert result.code == 0 and result.err == "" and "EKS control plane" in result.out


def test_trn_config_is_a_config_of_ones_own(project, aws_env, monkeypatch):
    make_synth(project, "-c", "backends=batch")
    monkeypatch.setenv("TRN_CONFIG", str(project / "config" / "default.yaml"))
    result = run_cli("cost")
    assert notices(result) == [] and "EKS control plane" in result.out


def test_a_synth_config_that_went_missing_is_one_line_naming_where_it_came_from(project, aws_env):
    (project / "config" / "gone.yaml").write_text("project: gone\n")
    make_synth(project, "-c", "config=config/gone.yaml")
    (project / "config" / "gone.yaml").unlink()
    result = run_cli("cost")
    assert result.code == 2
    assert [ln.split(":", 1)[0] for ln in result.err.splitlines()] == ["trn", "trn cost"]
    assert "gone.yaml" in result.err.splitlines()[1] and "a YAML file that exists" in result.err


def test_trn_azs_writes_to_the_config_of_the_last_synth(project, aws):
    other = project / "config" / "small.yaml"
    shutil.copy(project / "config" / "default.yaml", other)
    make_synth(project, "-c", "config=config/small.yaml")
    result = run_cli("azs", "--instance-type", "trn1.32xlarge", "--write")
    assert result.code == 0, result.err
    assert f"to {other}" in result.out and notices(result)
    assert "instance_offerings" in other.read_text()
    assert "instance_offerings" not in (project / "config" / "default.yaml").read_text()


def test_no_advice_of_the_cli_is_a_bare_cdk_deploy():
    """`cdk deploy` skips `make deploy`'s check that what is deployed is what the last synth planned."""
    found = [f"{path.name}:{n}" for path in sorted((ROOT / "trainium_cdk" / "cli").glob("*.py"))
             for n, text in enumerate(path.read_text().splitlines(), 1) if re.search(r"`cdk (deploy|destroy)", text)]
    assert found == []
