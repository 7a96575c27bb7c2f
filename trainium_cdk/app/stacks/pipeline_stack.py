"""Pipeline deployments: a self-mutating CDK Pipeline whose stages are the app's stacks, one per account.

`cdk synth -c pipeline=true -c config=PATH` synthesizes only this stack; `cdk deploy` it once, then
every push to the branch synthesizes from the same config file (a path in the repository), updates
the pipeline, and deploys each stage in order (after a manual approval where configured), with a smoke
check of the deployed stacks after each, run in the stage's account through a role the stage creates.
"""

from __future__ import annotations

import shlex

from aws_cdk import Aspects, Aws, Environment, Stack, Stage, pipelines
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from trainium_cdk.app.config import Config, PipelineEnvironment
from trainium_cdk.app.stacks.composition import TrainingApp, compose
from trainium_cdk.constructs.nag import (
    NIST,
    NagAcknowledgments,
    acknowledge,
    acknowledge_bucket_logging,
    acknowledge_default_policy,
)
from trainium_cdk.constructs.service_trust import ServiceTrustConditions
from trainium_cdk.facts.versions import CDK_CLI_VERSION

# The synth step installs what `cdk synth` needs (requirements.txt), not the test tools.
SYNTH_INSTALL = (
    "python3 -m venv .venv",
    ".venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt -c constraints.txt",
    "npm ci --no-audit --no-fund --loglevel=error",
)


def smoke_role_name(config: Config) -> str:
    """The smoke step's role in each stage account: a fixed name, so the pipeline knows its ARN."""
    return f"{config.project}-pipeline-smoke-{config.region}"


def smoke_step_role_name(config: Config) -> str:
    """The role the smoke steps run as, in the pipeline account: a fixed name, so that each stage's smoke
    role (in another account, where no token of the pipeline stack resolves) can trust it alone."""
    return f"{config.project}-pipeline-smoke-step-{config.region}"


def smoke_step_role_arn(config: Config, pipeline_account: str) -> str:
    return f"arn:{Aws.PARTITION}:iam::{pipeline_account}:role/{smoke_step_role_name(config)}"


def synth_commands(config_path: str, overrides: dict[str, str] | None = None) -> list[str]:
    """The pipeline's synth: runtime dependencies, then `cdk synth` of the config it was made from."""
    context = [f"-c config={shlex.quote(config_path)}"]
    context += [f"-c {k}={shlex.quote(str(v))}" for k, v in sorted((overrides or {}).items())]
    return [*SYNTH_INSTALL, "npx cdk synth --quiet -c pipeline=true " + " ".join(context)]


class SmokeRoleStack(Stack):
    """The role the pipeline's smoke step assumes in a stage's account: describe calls only."""

    def __init__(self, scope: Construct, construct_id: str, *, config: Config, pipeline_account: str, **kwargs) -> None:
        super().__init__(scope, construct_id, description="trainium-cdk: pipeline smoke check role", **kwargs)
        self.role = iam.Role(
            self,
            "SmokeRole",
            role_name=smoke_role_name(config),
            # The smoke steps' role only, not the whole pipeline account: any principal there that may
            # sts:AssumeRole would otherwise read the stage account. The pipeline stack creates that role
            # before any stage deploys (IAM refuses a trust naming a role that does not exist).
            assumed_by=iam.ArnPrincipal(smoke_step_role_arn(config, pipeline_account)),
            description="Assumed by the trainium-cdk pipeline's smoke step: read-only describe calls",
            inline_policies={
                "describe": iam.PolicyDocument(
                    statements=[iam.PolicyStatement(actions=list(SMOKE_ACTIONS), resources=["*"])]
                )
            },
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            ["Resource::*"],
            "ec2:DescribeVpcs, fsx:DescribeFileSystems and eks:DescribeCluster by id need no write access; the "
            "ids come from the stage's outputs at run time.",
        )
        acknowledge(
            self.role, f"{NIST}-IAMNoInlinePolicy", None,
            "One read-only statement that belongs to this role alone (the pipeline's smoke step); a managed "
            "policy would let other principals of the stage account take it.",
        )


SMOKE_ACTIONS = ("ec2:DescribeVpcs", "fsx:DescribeFileSystems", "eks:DescribeCluster")


def cli_version() -> str:
    """The CDK CLI version package.json pins (versions.py holds it for an installed wheel): the pipeline
    runs the CLI the workstation runs."""
    return CDK_CLI_VERSION


class TrainingStage(Stage):
    """The app's stacks in one account of the config's region."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: Config, environment: PipelineEnvironment, pipeline_account: str
    ) -> None:
        super().__init__(scope, construct_id, env=Environment(account=environment.account, region=config.region))
        # With an explicit account, CDK would look the region's AZs up (an AWS call at synth). Our
        # subnets are pinned by AZ ID, so we answer that lookup from the config instead.
        self.node.set_context(
            f"availability-zones:account={environment.account}:region={config.region}", list(config.vpc_az_ids)
        )
        self.stacks: TrainingApp = compose(self, config)
        self.smoke = SmokeRoleStack(
            self, config.stack_name("smoke"), config=config, pipeline_account=pipeline_account,
            env=Environment(account=environment.account, region=config.region),
        )
        self.smoke_role_arn = f"arn:{Aws.PARTITION}:iam::{environment.account}:role/{smoke_role_name(config)}"


class PipelineStack(Stack):
    """CodePipeline (CDK Pipelines): source from a CodeConnections repository, `make synth`, self-update,
    then one stage per environment followed by a smoke step reading the stage's stack outputs."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        config_path: str = "config/default.yaml",
        overrides: dict[str, str] | None = None,
        **kwargs,
    ) -> None:
        """:param config_path: the config file, as a path in the repository: the synth step reads it.
        :param overrides: context overrides (``region``, ``backends``...) the synth step passes again."""
        super().__init__(scope, construct_id, description="trainium-cdk: deployment pipeline", **kwargs)
        settings = config.pipeline
        assert settings is not None
        source = pipelines.CodePipelineSource.connection(
            settings.repository, settings.branch, connection_arn=settings.connection_arn
        )
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            synth=pipelines.ShellStep(
                "Synth",
                input=source,
                # The config this pipeline was synthesized from, by its path in the repository.
                commands=synth_commands(config_path, overrides),
                primary_output_directory="cdk.out",
            ),
            self_mutation=True,
            cli_version=cli_version(),
            cross_account_keys=True,
            enable_key_rotation=True,
            docker_enabled_for_synth=False,
        )
        self.smoke_step_role = iam.Role(
            self.pipeline,
            "SmokeStepRole",
            role_name=smoke_step_role_name(config),
            assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
            description="The trainium-cdk pipeline's smoke steps: assume each stage's smoke role",
        )
        self.stages: dict[str, TrainingStage] = {}
        for environment in settings.environments:
            stage = TrainingStage(
                self, environment.name, config=config, environment=environment, pipeline_account=settings.account
            )
            self.stages[environment.name] = stage
            pre = [pipelines.ManualApprovalStep(f"Approve-{environment.name}")] if environment.manual_approval else []
            self.pipeline.add_stage(stage, pre=pre, post=[self._smoke(stage, self.smoke_step_role)])
        self.pipeline.build_pipeline()
        self._role_arns_as_sub()
        self._scope_start_build()
        self._acknowledge()
        Aspects.of(self).add(ServiceTrustConditions())  # CDK Pipelines' roles trust CodeBuild and CodePipeline
        Aspects.of(self).add(NagAcknowledgments())  # its own (its stages' stacks: compose's)

    @staticmethod
    def _smoke(stage: TrainingStage, role: iam.IRole) -> pipelines.CodeBuildStep:
        """Read the deployed outputs and ask AWS that what they name exists and is ready."""
        network = stage.stacks.network
        outputs = {"VPC_ID": network.vpc_output}
        commands = ['aws ec2 describe-vpcs --vpc-ids "$VPC_ID" --query "Vpcs[0].State" --output text | grep -qx available']
        # The describe calls run in the stage's account: first assume the role the stage created there.
        assume = (
            'eval "$(aws sts assume-role --role-arn "$SMOKE_ROLE_ARN" --role-session-name smoke '
            "--query 'Credentials.[AccessKeyId,SecretAccessKey,SessionToken]' --output text "
            "| awk '{print \"export AWS_ACCESS_KEY_ID=\" $1 \" AWS_SECRET_ACCESS_KEY=\" $2 \" AWS_SESSION_TOKEN=\" $3}')\""
        )
        commands.insert(0, assume)
        if stage.stacks.storage is not None:
            outputs["FILE_SYSTEM_ID"] = stage.stacks.storage.file_system_output
            commands.append(
                'aws fsx describe-file-systems --file-system-ids "$FILE_SYSTEM_ID" '
                '--query "FileSystems[0].Lifecycle" --output text | grep -qx AVAILABLE'
            )
        eks = stage.stacks.backends.get("eks")
        if eks is not None:
            outputs["CLUSTER_NAME"] = eks.cluster_name_output  # type: ignore[attr-defined]
            commands.append(
                'aws eks describe-cluster --name "$CLUSTER_NAME" --query cluster.status --output text | grep -qx ACTIVE'
            )
        return pipelines.CodeBuildStep(
            "Smoke",
            env={"SMOKE_ROLE_ARN": stage.smoke_role_arn},
            env_from_cfn_outputs=outputs,
            commands=commands,
            role=role,
            role_policy_statements=[iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[stage.smoke_role_arn])],
        )

    def _role_arns_as_sub(self) -> None:
        """CDK Pipelines writes deploy actions' RoleArn as Fn::Join with an empty delimiter, which
        cfn-lint (E3703) rejects in a pipeline action's configuration. Escape hatch: the same ARN as
        Fn::Sub."""
        cfn = self.pipeline.pipeline.node.default_child
        assert isinstance(cfn, codepipeline.CfnPipeline)
        for i, stage in enumerate(self.resolve(cfn.stages)):
            for j, action in enumerate(stage["actions"]):
                role = (action.get("configuration") or {}).get("RoleArn")
                if isinstance(role, dict) and list(role) == ["Fn::Join"] and role["Fn::Join"][0] == "":
                    cfn.add_property_override(
                        f"Stages.{i}.Actions.{j}.Configuration.RoleArn", {"Fn::Sub": _join_as_sub(role)}
                    )

    def _scope_start_build(self) -> None:
        """CDK Pipelines lets its asset roles start, stop and read builds of any project in the account
        (``codebuild:StartBuild`` on ``*``): with a buildspec override, a build then runs as any project's
        role. Escape hatch: the pipeline's own projects only (the pipeline's CodeBuild action role, which
        starts the asset builds, is already scoped so)."""
        projects = sorted(
            (c for c in self.pipeline.node.find_all() if isinstance(c, codebuild.CfnProject)), key=lambda c: c.node.path
        )
        arns = [self.resolve(p.attr_arn) for p in projects]
        for policy in self.pipeline.node.find_all():
            if not isinstance(policy, iam.CfnPolicy):
                continue
            for i, statement in enumerate(self.resolve(policy.policy_document)["Statement"]):
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                if statement.get("Resource") == "*" and any(a.startswith("codebuild:") for a in actions):
                    policy.add_property_override(f"PolicyDocument.Statement.{i}.Resource", arns)
                    acknowledge(
                        policy, "AwsSolutions-IAM5", ["Resource::*"],
                        "cdk-nag reads the policy before escape hatches: the template grants the codebuild "
                        "actions on the pipeline's own projects only (tests/app/test_pipeline.py reads it).",
                    )

    def _acknowledge(self) -> None:
        """CDK Pipelines' own roles: scoped to the pipeline's artifacts, key, CodeBuild projects, and the
        bootstrap roles of the target accounts. cdk-nag 3 takes one finding at a time, so they are
        listed; a new kind of finding still fails."""
        artifacts = self.pipeline.pipeline.artifact_bucket
        bucket_resource = artifacts.node.default_child
        assert isinstance(bucket_resource, s3.CfnBucket)
        # A deleted or replaced artifact stays recoverable (checkov CKV_AWS_21); CodePipeline writes each
        # execution's artifacts under new keys, so versions add no copies in normal runs.
        bucket_resource.versioning_configuration = s3.CfnBucket.VersioningConfigurationProperty(status="Enabled")
        logging = ("The pipeline's artifact bucket holds build outputs only, written and read by the pipeline's own "
                   "roles; CodePipeline records each execution. Enable CloudTrail data events to audit object reads.")
        acknowledge_bucket_logging(artifacts, logging)
        acknowledge(
            artifacts, f"{NIST}-S3BucketReplicationEnabled", None,
            "Build outputs that each pipeline execution makes again from the repository: a replica would hold "
            "nothing that cannot be rebuilt.",
        )
        acknowledge_default_policy(
            self.pipeline, "CDK Pipelines' roles (source, synth, assets, self-mutation, the smoke step)"
        )
        projects = [
            self.resolve(self.get_logical_id(c))
            for c in self.pipeline.node.find_all()
            if isinstance(c, codebuild.CfnProject)
        ]
        bucket = self.resolve(self.get_logical_id(bucket_resource))
        region = self.region
        findings = [
            f"Resource::<{bucket}.Arn>/*",
            "Resource::arn:*:iam::<AWS::AccountId>:role/*",
            f"Resource::arn:<AWS::Partition>:logs:{region}:<AWS::AccountId>:log-group:/aws/codebuild/*",
            f"Resource::arn:<AWS::Partition>:codebuild:{region}:<AWS::AccountId>:report-group/*",
            *(f"Action::{a}" for a in (
                "s3:List*", "s3:GetObject*", "s3:GetBucket*", "s3:DeleteObject*", "s3:Abort*",
                "kms:ReEncrypt*", "kms:GenerateDataKey*",
            )),
            *(f"Resource::arn:<AWS::Partition>:logs:{region}:<AWS::AccountId>:log-group:/aws/codebuild/<{p}>:*"
              for p in projects),
            *(f"Resource::arn:<AWS::Partition>:codebuild:{region}:<AWS::AccountId>:report-group/<{p}>-*"
              for p in projects),
        ]
        acknowledge(
            self.pipeline,
            "AwsSolutions-IAM5",
            findings,
            "CDK Pipelines' roles act on the pipeline's own artifact bucket and key, its CodeBuild logs and "
            "reports, and assume the CDK bootstrap roles of the target accounts.",
        )
        (mutation,) = [c for c in self.pipeline.node.find_all() if isinstance(c, iam.Role) and "SelfMutation" in c.node.path]
        acknowledge(
            mutation,
            "AwsSolutions-IAM5",
            ["Resource::*"],
            "CDK Pipelines' self-mutation step reads stack states (cloudformation:DescribeStacks) and lists "
            "buckets (s3:ListBucket) of every target account before `cdk deploy`; both are read-only and the "
            "stacks and bootstrap buckets it reads are named at run time.",
        )


def _join_as_sub(join: dict) -> str:
    """``{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::..."]]}`` as an Fn::Sub string."""
    parts = []
    for part in join["Fn::Join"][1]:
        if isinstance(part, str):
            parts.append(part.replace("${", "${!"))
        elif list(part) == ["Ref"]:
            parts.append("${" + part["Ref"] + "}")
        elif list(part) == ["Fn::GetAtt"]:
            parts.append("${" + ".".join(part["Fn::GetAtt"]) + "}")
        else:
            raise ValueError(f"cannot express {part} in Fn::Sub")
    return "".join(parts)
