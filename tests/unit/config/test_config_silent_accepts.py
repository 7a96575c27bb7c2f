"""Input the config took without a word, refused now with one line naming the field, the value and the rule.

Each was found by a user's walk through the project (issue 30): `max_nodes: 1000000000` synthesized (and the
bill said $21.5 billion an hour); `-c backends=` deployed no compute backend; `nodes: true` became one node;
`tags: {"aws:owner": x}` passed synth and failed at deploy (CloudFormation refuses the reserved prefix); a job's
env name `A=B` or `` failed only at deploy. Given as a user gives them: in the YAML file (read here by
`trn cost --config`, offline, which loads it as synth does), with `-c` on `trn`, and with `-c` on `make synth`
(tools/synth.py through the pinned CDK CLI and app.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cli_support import DEFAULT_YAML, ROOT, assert_one_clean_line, run_cli
from trainium_cdk.app.config.fields import ENV_NAME, check_environment_name
from trainium_cdk.facts.catalog import MAX_NODES_PER_GROUP


def written(tmp_path: Path, text: str) -> Path:
    """A config file of ``text`` as a user types it (every setting it leaves out takes its default)."""
    path = tmp_path / "config.yaml"
    path.write_text(text + "\n")
    return path


JOB = "workloads: {jobs: [{name: pretrain, env: %s}]}"


@pytest.mark.parametrize(("text", "line"), [
    ("compute_groups: [{max_nodes: 1000000000}]",
     "compute_groups[0].max_nodes = 1000000000: at most 100,000 nodes a group, the most any backend's service takes"),
    ("compute_groups: [{nodes: 200000, max_nodes: 200000}]", "compute_groups[0].max_nodes = 200000: at most 100,000"),
    ("compute_groups: [{nodes: true}]",
     "compute_groups[0].nodes = True: a number, not true or false (YAML reads true, false, yes, no, on and off"),
    ("compute_groups: [{max_nodes: yes}]", "compute_groups[0].max_nodes = True: a number, not true or false"),
    ("workloads: {jobs: [{name: pretrain, nodes: on}]}", "workloads.jobs[0].nodes = True: a number"),
    ("backends: []", "backends = []: at least one compute backend; allowed: eks, batch, parallelcluster, instance"),
    ('tags: {"aws:owner": ml-team}',
     "tags = 'aws:owner': a tag key not starting with aws: (reserved for AWS: CloudFormation refuses such a key"),
    ('tags: {"AWS:Owner": ml-team}', "tags = 'AWS:Owner': a tag key not starting with aws:"),
    ('tags: {owner: "aws:ml"}', "tags.owner = 'aws:ml': a tag value not starting with aws: (reserved for AWS)"),
    ('tags: {"owner;rm": x}', "tags = 'owner;rm': a tag key of 1 to 128 characters: letters, digits, spaces and "
                              "+ - = . _ : / @"),
    (f'tags: {{"{"k" * 129}": x}}', f"tags = '{'k' * 129}': a tag key of 1 to 128 characters"),
    (f"tags: {{owner: {'v' * 257}}}", "tags.owner = '" + "v" * 257 + "': a tag value of 0 to 256 characters"),
    (JOB % '{"A=B": "1"}', "workloads.jobs[0].env = 'A=B': an environment variable name: letters, digits and '_', "
                           "not starting with a digit"),
    (JOB % '{"": "1"}', "workloads.jobs[0].env = '': an environment variable name"),
    (JOB % '{"1LR": "3e-4"}', "workloads.jobs[0].env = '1LR': an environment variable name"),
    (JOB % '{"MY VAR": "1"}', "workloads.jobs[0].env = 'MY VAR': an environment variable name"),
], ids=["max_nodes 1e9", "nodes above the ceiling", "nodes true", "max_nodes yes", "job nodes on", "no backend",
        "aws: key", "AWS: key", "aws: value", "tag key character", "tag key length", "tag value length",
        "env A=B", "env empty", "env digit first", "env space"])
def test_the_yaml_file_refuses(aws_env, tmp_path, text, line):
    path = written(tmp_path, text)
    result = run_cli("cost", "--config", str(path))
    assert_one_clean_line(result, f"configuration error: {path}: {line}")


@pytest.mark.parametrize("text", [
    f"compute_groups: [{{max_nodes: {MAX_NODES_PER_GROUP}}}]",
    'tags: {"cost center": "ML platform/é 42", team: "", "app:name": "a+b=c@d"}',
    JOB % '{_X: "1", lower_case: "2", NEURON_CC_FLAGS: "--cache_dir=/fsx/x", A1: ""}',
    "compute_groups: [{nodes: 1, max_nodes: 4}]",
], ids=["the ceiling", "tags AWS takes", "env names", "numbers"])
def test_what_stays_accepted(aws_env, tmp_path, text):
    result = run_cli("cost", "--config", str(written(tmp_path, text)))
    assert result.code == 0, result.err


@pytest.mark.parametrize(("override", "line"), [
    ("backends=", "backends = '': at least one compute backend; allowed: eks, batch, parallelcluster, instance"),
    ("max_nodes=1000000000", "compute_groups[0].max_nodes = 1000000000: at most 100,000 nodes a group"),
    ("nodes=true", "nodes = 'true': a whole number of nodes, at least 1"),
])
def test_c_on_trn_refuses(aws_env, override, line):
    result = run_cli("cost", "--config", str(DEFAULT_YAML), "-c", override)
    assert_one_clean_line(result, f"configuration error: {DEFAULT_YAML}: {line}")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A working directory as the CDK CLI sees the repository (cdk.json, node_modules, the real app)."""
    project = tmp_path_factory.mktemp("project")
    cdk_json = json.loads((ROOT / "cdk.json").read_text())
    cdk_json["app"] = f"{sys.executable} {ROOT / 'app.py'}"
    cdk_json["context"]["config"] = str(DEFAULT_YAML)
    (project / "cdk.json").write_text(json.dumps(cdk_json))
    (project / "node_modules").symlink_to(ROOT / "node_modules")
    return project


@pytest.mark.parametrize(("override", "line"), [
    ("backends=", "backends = '': at least one compute backend"),
    ("max_nodes=1000000000", "compute_groups[0].max_nodes = 1000000000: at most 100,000 nodes a group"),
])
def test_c_on_make_synth_refuses(project, override, line):
    from tests.meta.test_toolchain import run_synth

    done = run_synth(project, "-c", override)
    assert done.returncode == 2, done.stdout + done.stderr
    (only,) = done.stderr.strip().splitlines()
    assert only.startswith(f"trainium-cdk: {DEFAULT_YAML}: {line}")
    assert not (project / "cdk.out").exists()


def test_the_environment_name_rule_is_one_function_for_the_config_and_the_cli():
    assert ENV_NAME.pattern == "[A-Za-z_][A-Za-z0-9_]*"
    assert check_environment_name("NEURON_RT_ROOT_COMM_ID") == "NEURON_RT_ROOT_COMM_ID"
    for bad in ("A=B", "", "1A", "A-B", "A B", "A\n", "É"):
        with pytest.raises(ValueError, match="letters, digits and '_', not starting with a digit"):
            check_environment_name(bad)
