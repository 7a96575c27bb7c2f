"""AmiLookup: an AMI found by name and description at deploy time, kept for the life of the stack.

For AMIs AWS publishes no immutable SSM parameter for (the Neuron DLAMI of a given SDK release: Neuron
publishes only `latest`), a custom resource runs DescribeImages in the stack's region when the stack is
created and keeps the newest match until the query itself changes (the handler,
``trainium_cdk/lambdas/ami_lookup/index.py``). Synth stays offline: nothing is looked up before deploy.
One function per stack serves every lookup of the stack.
"""

from __future__ import annotations

from pathlib import Path

import jsii
from aws_cdk import CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from trainium_cdk.constructs.log_encryption import encrypt_log_groups
from trainium_cdk.constructs.nag import (
    NIST,
    acknowledge,
    acknowledge_custom_resource_lambda,
    acknowledge_default_policy,
)
from trainium_cdk.facts.defaults.cdk import LOG_RETENTION
from trainium_cdk.facts.versions import AmiQuery
from trainium_cdk.lambdas import ami_lookup as handler_package

RESOURCE_TYPE = "Custom::AmiLookup"
HANDLER_DIR = Path(handler_package.__file__).resolve().parent
# cdk-nag's AwsSolutions-L1 asks for the newest runtime of the family aws-cdk-lib knows.
RUNTIME = lambda_.Runtime.PYTHON_3_14
TIMEOUT = Duration.seconds(60)
PROVIDER_ID = "TrainiumAmiLookupProvider"
# Compiled files change the asset's hash (and the template) without changing the code.
ASSET_EXCLUDE = ["__pycache__", "*.pyc"]


@jsii.implements(ec2.IMachineImage)
class ImageIdImage:
    """A Linux machine image given by its id (a literal or a token such as an AmiLookup's): what
    ec2.MachineImage.generic_linux cannot take when the id is only known at deploy time."""

    def __init__(self, image_id: str) -> None:
        self.image_id = image_id

    def get_image(self, scope: Construct) -> ec2.MachineImageConfig:  # noqa: ARG002 - jsii interface
        return ec2.MachineImageConfig(
            image_id=self.image_id, os_type=ec2.OperatingSystemType.LINUX, user_data=ec2.UserData.for_linux()
        )


class AmiLookupProvider(Construct):
    """The stack's one lookup function: DescribeImages only, logging to a log group of its own."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="AMI lookup at deploy time: ec2:DescribeImages and its own log group only",
        )
        self.role.add_to_policy(iam.PolicyStatement(actions=["ec2:DescribeImages"], resources=["*"]))
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            handler="index.handler",
            code=lambda_.Code.from_asset(str(HANDLER_DIR), exclude=ASSET_EXCLUDE),
            timeout=TIMEOUT,
            role=self.role,
            log_group=self.log_group,
            description="trainium-cdk: the newest AMI matching a name/description filter, kept for the stack's life",
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            ["Resource::*"],
            "ec2:DescribeImages supports no resource-level permissions (Service Authorization Reference: "
            "resource types none); it only reads AMI metadata.",
        )
        what = "trainium-cdk's AMI lookup (trainium_cdk/lambdas/ami_lookup)"
        acknowledge_default_policy(self.role, what)
        acknowledge_custom_resource_lambda(self.function, what)
        acknowledge(
            self.function, f"{NIST}-LambdaInsideVPC", None,
            f"{what} calls EC2's DescribeImages only, a regional AWS API: inside a VPC it would reach the same "
            "API through a NAT gateway or an EC2 interface endpoint, and it reads nothing in the VPC.",
        )
        encrypt_log_groups(self)

    @staticmethod
    def of(scope: Construct) -> AmiLookupProvider:
        stack = Stack.of(scope)
        existing = stack.node.try_find_child(PROVIDER_ID)
        return existing if isinstance(existing, AmiLookupProvider) else AmiLookupProvider(stack, PROVIDER_ID)


class AmiLookup(Construct):
    """The newest AMI matching ``query`` in the stack's region, resolved when the stack is created and
    kept until ``query`` changes (a redeploy never moves it).

    :param query: the owner, name and description the AMI must have (versions.AmiQuery).
    """

    def __init__(self, scope: Construct, construct_id: str, *, query: AmiQuery) -> None:
        super().__init__(scope, construct_id)
        self.query = query
        provider = AmiLookupProvider.of(self)
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=provider.function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties={"Owners": [query.owner], "Filters": query.filters()},
        )
        self.image_id = self.resource.get_att_string("ImageId")
        self.machine_image: ec2.IMachineImage = ImageIdImage(self.image_id)
