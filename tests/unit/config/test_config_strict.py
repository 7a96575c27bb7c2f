"""Config input that YAML or the models used to take silently: a key named twice, a "distributed" group
of one-node instances, an unquoted account id. And the example pipeline config, synthesized as shipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.helpers import CDK_CONTEXT, config_with, resources
from trainium_cdk.app.config import ConfigError, load_config, parse_yaml
from trainium_cdk.cli import yaml_edit

ROOT = paths.ROOT
PIPELINE_EXAMPLE = "config/pipeline.example.yaml"


# -- a key named twice -------------------------------------------------------------------------------

DUPLICATE_TOP = """\
project: first
region: us-west-2
project: second
"""
DUPLICATE_IN_GROUP = """\
compute_groups:
  - name: train
    instance_type: trn1.32xlarge
    nodes: 2
    max_nodes: 4
    nodes: 4
"""


@pytest.mark.parametrize(
    ("text", "key", "first", "again", "column"),
    [(DUPLICATE_TOP, "project", 1, 3, 1), (DUPLICATE_IN_GROUP, "nodes", 4, 6, 5)],
    ids=["top level", "inside a compute group"],
)
def test_a_key_named_twice_is_refused_naming_both_lines(tmp_path, text, key, first, again, column):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"config = '{path}:{again}:{column}': each key once"), message
    assert f"key '{key}' first at line {first}, named again at line {again}" in message
    assert "\n" not in message


def test_merge_keys_still_override_as_yaml_means_them():
    data = parse_yaml("base: &b {nodes: 2, max_nodes: 4}\ngroup:\n  <<: *b\n  nodes: 3\n", "c.yaml")
    assert data["group"] == {"nodes": 3, "max_nodes": 4}


def test_trn_azs_write_refuses_a_file_with_a_key_named_twice():
    with pytest.raises(ConfigError, match=r"c\.yaml:3:1.*key 'project' first at line 1, named again at line 3"):
        yaml_edit.with_offerings(
            DUPLICATE_TOP, instance_type="trn1.32xlarge", region="us-west-2", az_ids=["usw2-az4"], path="c.yaml"
        )


def test_trn_azs_write_refuses_an_edit_whose_result_names_a_key_twice():
    """The re-parse of the edited text is strict too: a second instance_offerings block nested under a
    comment-free layout would otherwise be merged by YAML into the later one."""
    text = "project: x\ninstance_offerings: {}\n"
    new = yaml_edit.with_offerings(text, instance_type="trn1.32xlarge", region="us-west-2", az_ids=["usw2-az4"],
                                   path="c.yaml")
    assert parse_yaml(new, "c.yaml")["instance_offerings"] == {"trn1.32xlarge": {"us-west-2": ["usw2-az4"]}}
    with pytest.raises(ConfigError, match="named again at line"):
        parse_yaml(new + "instance_offerings: {}\n", "c.yaml")


# -- a "distributed" group of one-node instances ------------------------------------------------------


@pytest.mark.parametrize("backend", ["eks", "batch", "parallelcluster", "instance"])
def test_a_multi_node_group_of_a_type_without_efa_is_refused_on_every_backend(backend):
    with pytest.raises(ConfigError) as err:
        config_with(backends=[backend], group={"instance_type": "trn1.2xlarge", "nodes": 2, "max_nodes": 4})
    assert err.value.field == "compute_groups[0].nodes" and err.value.value == 2
    assert "trn1.2xlarge has no EFA" in str(err.value) and "-c nodes=1" in str(err.value)


def test_one_node_jobs_of_a_type_without_efa_may_still_run_side_by_side():
    config = config_with(backends=["batch"], group={"instance_type": "trn1.2xlarge", "nodes": 1, "max_nodes": 4})
    assert (config.compute_groups[0].nodes, config.compute_groups[0].maximum) == (1, 4)


def test_the_instance_type_override_on_the_default_config_says_to_pass_nodes_1():
    with pytest.raises(ConfigError, match=r"compute_groups\[0\]\.nodes = 2: 1: trn1\.2xlarge has no EFA"):
        load_config(None, {"instance_type": "trn1.2xlarge"})
    assert load_config(None, {"instance_type": "trn1.2xlarge", "nodes": "1"}).compute_groups[0].nodes == 1


# -- an unquoted account id ----------------------------------------------------------------------------


def test_an_unquoted_account_id_gets_a_hint_to_quote_it(tmp_path):
    text = (ROOT / PIPELINE_EXAMPLE).read_text().replace('account: "222222222222"', "account: 222222222222")
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "pipeline.environments[0].account = 222222222222" in message
    assert 'quote it in the YAML (account: "222222222222")' in message
    assert "Input should be a valid string" not in message


# -- the example pipeline config ------------------------------------------------------------------------


def test_the_example_pipeline_config_loads_with_quoted_accounts():
    config = load_config(ROOT / PIPELINE_EXAMPLE)
    assert config.pipeline is not None
    assert config.pipeline.account == "111111111111"
    assert [(e.name, e.account, e.manual_approval) for e in config.pipeline.environments] == [
        ("dev", "222222222222", False), ("prod", "333333333333", True),
    ]


@pytest.mark.e2e  # the whole app.py in a process of its own: `make test-e2e`
def test_the_example_pipeline_config_synthesizes_with_pipeline_true(tmp_path):
    """As the CDK CLI runs the app for `cdk synth -c pipeline=true -c config=config/pipeline.example.yaml`."""
    context = {**CDK_CONTEXT, "config": PIPELINE_EXAMPLE, "pipeline": "true"}
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.template.json")) == ["trainium-pipeline.template.json"]
    template = json.loads((tmp_path / "trainium-pipeline.template.json").read_text())
    (pipeline,) = resources(template, "AWS::CodePipeline::Pipeline").values()
    stages = [s["Name"] for s in pipeline["Properties"]["Stages"]]
    assert stages[:3] == ["Source", "Build", "UpdatePipeline"] and stages.index("dev") < stages.index("prod")
    # The synth step synthesizes from that config.
    commands = [c for project in resources(template, "AWS::CodeBuild::Project").values()
                for c in json.loads(project["Properties"]["Source"]["BuildSpec"])["phases"]["build"]["commands"]]
    (synth_command,) = [c for c in commands if c.startswith("npx cdk synth ")]
    assert f" -c config={PIPELINE_EXAMPLE}" in synth_command and " -c pipeline=true" in synth_command
