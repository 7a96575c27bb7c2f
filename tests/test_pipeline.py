"""CDK Pipelines deployment: self-mutating, one stage per account, smoke step, offline synth."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import cdk_nag
import pytest

from tests.helpers import CDK_CONTEXT, cfn_lint_errors, config_with, new_outdir, resources
from trainium_cdk.stacks.pipeline_stack import PipelineStack, cli_version

PIPELINE = {
    "repository": "my-org/ml-infra",
    "connection_arn": "arn:aws:codeconnections:us-west-2:111111111111:connection/0a1b2c3d",
    "environments": [{"name": "dev", "account": "222222222222"}, {"name": "prod", "account": "333333333333"}],
}


@pytest.fixture(scope="module")
def synthesized():
    outdir = new_outdir()
    app = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    cdk.Validations.of(app).add_plugins(cdk_nag.AwsSolutionsChecks(app))  # raises on a finding
    config = config_with(pipeline=PIPELINE)
    stack = PipelineStack(app, "t-pipeline", config=config, env=cdk.Environment(region=config.region))
    assembly = app.synth()
    return stack, assembly, outdir


def _template(assembly) -> dict:
    return assembly.get_stack_by_name("t-pipeline").template


def test_self_mutating_pipeline_with_a_stage_per_environment(synthesized):
    _, assembly, _ = synthesized
    (pipeline,) = resources(_template(assembly), "AWS::CodePipeline::Pipeline").values()
    stages = [s["Name"] for s in pipeline["Properties"]["Stages"]]
    assert stages[:3] == ["Source", "Build", "UpdatePipeline"]
    assert stages.index("dev") < stages.index("prod")


def test_synth_step_runs_make_synth_and_cli_is_pinned(synthesized):
    _, assembly, _ = synthesized
    projects = [json.dumps(p) for p in resources(_template(assembly), "AWS::CodeBuild::Project").values()]
    assert any("make synth ARGS='-c pipeline=true'" in p for p in projects)
    assert cli_version() == json.loads(Path("package.json").read_text())["devDependencies"]["aws-cdk"]
    assert any(f"aws-cdk@{cli_version()}" in p for p in projects)  # self-mutation uses the pinned CLI


def test_smoke_step_reads_the_stage_outputs(synthesized):
    _, assembly, _ = synthesized
    projects = [json.dumps(p) for p in resources(_template(assembly), "AWS::CodeBuild::Project").values()]
    smoke = [p for p in projects if "describe-cluster" in p]
    assert len(smoke) == 2  # dev and prod
    assert all("describe-vpcs" in p and "describe-file-systems" in p for p in smoke)


def test_stages_deploy_to_their_accounts_without_lookups(synthesized):
    stack, _, outdir = synthesized
    assert {s.account for s in stack.stages.values()} == {"222222222222", "333333333333"}
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert "missing" not in manifest  # AZs come from the config, not from an AWS lookup


def test_every_template_passes_cfn_lint(synthesized):
    _, _, outdir = synthesized
    paths = sorted(outdir.rglob("*.template.json"))
    assert len(paths) == 1 + 2 * 3  # the pipeline, then network, storage, eks per stage
    for path in paths:
        assert cfn_lint_errors(path, "us-west-2") == []


def test_deploy_roles_are_the_target_accounts_bootstrap_roles(synthesized):
    _, assembly, _ = synthesized
    (pipeline,) = resources(_template(assembly), "AWS::CodePipeline::Pipeline").values()
    roles = {
        stage["Name"]: {a["Configuration"]["RoleArn"]["Fn::Sub"] for a in stage["Actions"] if "RoleArn" in a.get("Configuration", {})}
        for stage in pipeline["Properties"]["Stages"] if stage["Name"] in ("dev", "prod")
    }
    assert roles["dev"] == {"arn:${AWS::Partition}:iam::222222222222:role/cdk-hnb659fds-cfn-exec-role-222222222222-us-west-2"}
    assert roles["prod"] == {"arn:${AWS::Partition}:iam::333333333333:role/cdk-hnb659fds-cfn-exec-role-333333333333-us-west-2"}


def test_pipeline_needs_its_config_section():
    from trainium_cdk.config import ConfigError

    with pytest.raises(ConfigError, match="pipeline.environments"):
        config_with(pipeline={**PIPELINE, "environments": []})
