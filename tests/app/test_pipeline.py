"""CDK Pipelines deployment: self-mutating, one stage per account, smoke step, offline synth."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest

from tests.support.apps import PIPELINE, same_but_values, synthesized_pipeline
from tests.support.helpers import cfn_lint_errors, config_with, resources
from trainium_cdk.app.config import ConfigError
from trainium_cdk.app.stacks.pipeline_stack import cli_version


@pytest.fixture(scope="module")
def synthesized():
    result = synthesized_pipeline()
    return result.stack, result.assembly, result.outdir


def _template(assembly) -> dict:
    return assembly.get_stack_by_name("t-pipeline").template


def test_self_mutating_pipeline_with_a_stage_per_environment(synthesized):
    _, assembly, _ = synthesized
    (pipeline,) = resources(_template(assembly), "AWS::CodePipeline::Pipeline").values()
    stages = [s["Name"] for s in pipeline["Properties"]["Stages"]]
    assert stages[:3] == ["Source", "Build", "UpdatePipeline"]
    assert stages.index("dev") < stages.index("prod")


def _synth_commands(assembly) -> list[str]:
    projects = resources(_template(assembly), "AWS::CodeBuild::Project").values()
    (spec,) = [json.loads(p["Properties"]["Source"]["BuildSpec"]) for p in projects
               if "pipeline=true" in p["Properties"]["Source"].get("BuildSpec", "")]
    return spec["phases"]["build"]["commands"]


def test_synth_step_uses_the_config_it_was_synthesized_from(synthesized):
    _, assembly, _ = synthesized
    commands = _synth_commands(assembly)
    assert commands[-1] == "npx cdk synth --quiet -c pipeline=true -c config=config/ml-prod.yaml -c nodes=4"
    assert not any("make " in c for c in commands)  # `make synth` installs the dev tools


def test_synth_step_installs_runtime_dependencies_only(synthesized):
    _, assembly, _ = synthesized
    installs = [c for c in _synth_commands(assembly) if "pip install" in c]
    assert installs and all("-r requirements.txt" in c and "requirements-dev" not in c for c in installs)


def test_the_config_path_is_a_repository_path():
    import app

    assert app.repository_path(None) == "config/default.yaml"
    assert app.repository_path("config/../config/prod.yaml") == "config/prod.yaml"
    with pytest.raises(ConfigError, match="a file in the repository"):
        app.repository_path("/etc/trainium.yaml")
    assert json.loads(Path("cdk.json").read_text())["context"]["config"] == "config/default.yaml"


def _commands(project: dict, phase: str = "build") -> list[str]:
    return json.loads(project["Properties"]["Source"]["BuildSpec"])["phases"].get(phase, {}).get("commands", [])


def _smoke_projects(template: dict) -> dict[str, dict]:
    """The smoke steps' CodeBuild projects, by logical id: the ones that check the cluster."""
    return {k: p for k, p in resources(template, "AWS::CodeBuild::Project").items()
            if any(c.startswith("aws eks describe-cluster ") for c in _commands(p))}


def _arn(account: str, role: str) -> dict:
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":iam::{account}:role/{role}"]]}


def _actions(statement: dict) -> list[str]:
    return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]


def test_cli_is_pinned(synthesized):
    _, assembly, _ = synthesized
    pinned = json.loads(Path("package.json").read_text())["devDependencies"]["aws-cdk"]
    assert cli_version() == pinned
    # Self-mutation uses the pinned CLI.
    (mutation,) = [p for p in resources(_template(assembly), "AWS::CodeBuild::Project").values()
                   if any(c.startswith("cdk -a . deploy t-pipeline ") for c in _commands(p))]
    assert _commands(mutation, "install") == [f"npm install -g aws-cdk@{pinned}"]


# What the smoke step reads, from which stack of its stage.
SMOKE_VARIABLES = {"VPC_ID": ("network", "VpcId"), "FILE_SYSTEM_ID": ("storage", "FileSystemId"),
                   "CLUSTER_NAME": ("eks", "ClusterName")}


def test_smoke_step_reads_the_stage_outputs(synthesized):
    _, assembly, outdir = synthesized
    template = _template(assembly)
    projects = _smoke_projects(template)
    assert len(projects) == 2  # dev and prod
    (pipeline,) = resources(template, "AWS::CodePipeline::Pipeline").values()
    for stage in [s for s in pipeline["Properties"]["Stages"] if s["Name"] in ("dev", "prod")]:
        (smoke,) = [a for a in stage["Actions"] if a["Name"] == "Smoke"]
        variables = {v["name"]: v["value"] for v in json.loads(smoke["Configuration"]["EnvironmentVariables"])}
        assert sorted(variables) == sorted(SMOKE_VARIABLES)
        for name, (stack, output) in SMOKE_VARIABLES.items():
            namespace = re.fullmatch(rf"#{{(tpipeline{stage['Name']}t{stack}[0-9A-F]{{8}})\.{output}}}", variables[name])
            assert namespace, variables[name]  # the output of that stack of the stage, which it has:
            stage_template = outdir / f"assembly-t-pipeline-{stage['Name']}" / f"{namespace[1]}.template.json"
            assert output in json.loads(stage_template.read_text())["Outputs"]
        commands = _commands(projects[smoke["Configuration"]["ProjectName"]["Ref"]])[1:]
        assert [c.split(" --")[0] for c in commands] == [
            "aws ec2 describe-vpcs", "aws fsx describe-file-systems", "aws eks describe-cluster"]
        assert all(f'"${name}"' in command for name, command in zip(SMOKE_VARIABLES, commands, strict=True))


def test_smoke_step_runs_in_the_stage_account(synthesized):
    stack, assembly, _ = synthesized
    template = _template(assembly)
    projects = _smoke_projects(template).values()
    for project in projects:
        commands = _commands(project)
        assert commands[0].startswith('eval "$(aws sts assume-role --role-arn "$SMOKE_ROLE_ARN"')
    smoke_roles = [_arn(account, "t-pipeline-smoke-us-west-2") for account in ("222222222222", "333333333333")]
    assert sorted((p["Properties"]["Environment"]["EnvironmentVariables"] for p in projects), key=json.dumps) == [
        [{"Name": "SMOKE_ROLE_ARN", "Type": "PLAINTEXT", "Value": arn}] for arn in smoke_roles]
    # The step's own role may only assume those roles; no role of the pipeline's account describes what they do.
    (step_role,) = [k for k, r in resources(template, "AWS::IAM::Role").items()
                    if r["Properties"].get("RoleName") == "t-pipeline-smoke-step-us-west-2"]
    assumes = [s for lid, s in _statements(template) if "sts:AssumeRole" in _actions(s)
               and {"Ref": step_role} in template["Resources"][lid]["Properties"]["Roles"]]
    assert [s["Resource"] for s in assumes] == [smoke_roles]
    assert not [a for _, s in _statements(template) for a in _actions(s) if a.startswith(("ec2:", "eks:", "fsx:"))]
    # Each stage creates its role, trusting the smoke steps' role, with describe calls only.
    for name, account in (("dev", "222222222222"), ("prod", "333333333333")):
        stage_stack = stack.stages[name].smoke
        template = cdk.assertions.Template.from_stack(stage_stack).to_json()
        (role,) = resources(template, "AWS::IAM::Role").values()
        assert role["Properties"]["RoleName"] == "t-pipeline-smoke-us-west-2"
        assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [{
            "Action": "sts:AssumeRole", "Effect": "Allow",
            "Principal": {"AWS": _arn("111111111111", "t-pipeline-smoke-step-us-west-2")}}]
        actions = role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]["Action"]
        assert sorted(actions) == ["ec2:DescribeVpcs", "eks:DescribeCluster", "fsx:DescribeFileSystems"]
        assert stage_stack.account == account


def test_manual_approval_before_the_stages_that_ask_for_it(synthesized):
    _, assembly, _ = synthesized
    (pipeline,) = resources(_template(assembly), "AWS::CodePipeline::Pipeline").values()
    stages = {s["Name"]: s["Actions"] for s in pipeline["Properties"]["Stages"]}
    approvals = {
        name: [a["Name"] for a in actions if a["ActionTypeId"]["Category"] == "Approval"] for name, actions in stages.items()
    }
    assert approvals["prod"] == ["Approve-prod"] and approvals["dev"] == []
    (approve,) = [a for a in stages["prod"] if a["Name"] == "Approve-prod"]
    assert approve["RunOrder"] < min(a["RunOrder"] for a in stages["prod"] if a["Name"] != "Approve-prod")


def test_stages_deploy_to_their_accounts_without_lookups(synthesized):
    stack, _, outdir = synthesized
    assert {s.account for s in stack.stages.values()} == {"222222222222", "333333333333"}
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert "missing" not in manifest  # AZs come from the config, not from an AWS lookup


def test_the_stages_templates_differ_by_values_only():
    """The dev stage deploys the prod stage's app to another account: the same stacks, resources, types and property
    structure; what differs is values (the account, the stage's name in ids). So cfn-lint and checkov read prod's."""
    result = synthesized_pipeline()
    dev, prod = result.stage_templates("dev"), result.stage_templates("prod")
    assert sorted(dev) == sorted(prod) == ["eks", "network", "smoke", "storage"]
    for stack in dev:
        assert dev[stack] != prod[stack] or stack == "smoke"  # values differ (the smoke role's template holds none)
        assert same_but_values(dev[stack], prod[stack]), stack
    # The comparison sees a change of structure: a property more on one resource.
    changed = json.loads(json.dumps(prod["storage"]))
    next(iter(changed["Resources"].values())).setdefault("Properties", {})["Extra"] = "x"
    assert not same_but_values(changed, prod["storage"])


def test_every_template_passes_cfn_lint():
    result = synthesized_pipeline()
    # The pipeline, then network, storage, eks and the smoke role per stage.
    assert len(result.template_paths()) == 1 + 2 * 4
    paths = result.checked_template_paths()
    assert len(paths) == 1 + 4 and all("dev" not in p.parent.name for p in paths)  # the dev stage: above
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
    with pytest.raises(ConfigError, match="pipeline.environments"):
        config_with(pipeline={**PIPELINE, "environments": []})


def _statements(template: dict) -> list[tuple[str, dict]]:
    return [
        (logical_id, statement)
        for logical_id, policy in resources(template, "AWS::IAM::Policy").items()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_no_policy_starts_builds_outside_the_pipeline(synthesized):
    """CDK Pipelines gives its asset roles codebuild:StartBuild on `*`: with a buildspec override, a build
    would run as any project's role in the pipeline account. Every codebuild grant names the pipeline's
    own projects."""
    _, assembly, _ = synthesized
    template = _template(assembly)
    projects = [{"Fn::GetAtt": [logical_id, "Arn"]} for logical_id in resources(template, "AWS::CodeBuild::Project")]
    starts = [(lid, s) for lid, s in _statements(template) if "codebuild:StartBuild" in _actions(s)]
    # No Docker asset role: the deployed app (EKS, eks.example_images off) builds no image.
    assert {lid.split("DefaultPolicy")[0] for lid, _ in starts} >= {"PipelineAssetsFileRole", "PipelineCodeBuildActionRole"}
    assert not [lid for lid, _ in starts if "Docker" in lid]
    for logical_id, statement in starts:
        arns = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert arns and all(arn in projects for arn in arns), (logical_id, statement["Resource"])
    assert not [lid for lid, s in _statements(template)
                if s["Resource"] == "*" and any(a.startswith("codebuild:") for a in _actions(s))]


def test_each_smoke_role_trusts_only_the_smoke_steps_role(synthesized):
    stack, assembly, _ = synthesized
    template = _template(assembly)
    (step_role_id,) = [k for k, r in resources(template, "AWS::IAM::Role").items()
                       if r["Properties"].get("RoleName") == "t-pipeline-smoke-step-us-west-2"]
    smoke_projects = list(_smoke_projects(template).values())
    assert len(smoke_projects) == 2
    assert all(p["Properties"]["ServiceRole"] == {"Fn::GetAtt": [step_role_id, "Arn"]} for p in smoke_projects)
    for name in ("dev", "prod"):
        role_template = cdk.assertions.Template.from_stack(stack.stages[name].smoke).to_json()
        (role,) = resources(role_template, "AWS::IAM::Role").values()
        (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"AWS": _arn("111111111111", "t-pipeline-smoke-step-us-west-2")}


def test_cdk_nag_reports_nothing_unacknowledged(synthesized):
    """cdk-nag AwsSolutions runs in the pipeline app's synth (tests/support/apps.py), over the pipeline stack and
    every stage's stacks, and fails it on a finding not acknowledged; the report says so too."""
    _, _, outdir = synthesized
    report = json.loads((outdir / "validation-report.json").read_text())
    plugins = {p["pluginName"]: p for p in report["pluginReports"]}
    assert plugins["AwsSolutions"]["conclusion"] == "success"
    assert plugins["AwsSolutions"].get("violations", []) == []
