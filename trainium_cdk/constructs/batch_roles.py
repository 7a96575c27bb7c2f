"""BatchRoles: the IAM roles of AWS Batch compute groups, one set for every group of a stack.

Every group's nodes run the same ECS agent and every group's jobs the same container setup, so one
instance role (with one instance profile), one execution role and one job role serve them all: a stack
of 50 groups (AWS Batch's limit) holds 3 roles and 1 profile, where a set per group took 200 resources
of CloudFormation's 500. What differs by group is named by resource (each group's log group, each
image repository) in the one policy of each role.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_cdk.constructs.nag import acknowledge, acknowledge_default_policy, nag_form
from trainium_cdk.constructs.service_trust import restrict_service_trust
from trainium_cdk.node.neuron_metrics import policy_statement

# What the ECS agent on a Batch node calls (AmazonEC2ContainerServiceforEC2Role, without
# ecs:CreateCluster, CloudWatch Logs and ECR on every repository): Batch owns the ECS cluster, logs go
# through the execution role, and images come from the training image's repository.
# Each on the resource type the service authorization reference gives it: the clusters and container
# instances AWS Batch creates (it names its clusters AWSBatch-<compute environment>-<id>); the poll
# endpoint and the EC2 tags have no resource type.
ECS_CLUSTER_ACTIONS = (
    "ecs:RegisterContainerInstance",
    "ecs:DeregisterContainerInstance",
    "ecs:SubmitAttachmentStateChanges",
    "ecs:SubmitContainerStateChange",
    "ecs:SubmitTaskStateChange",
)
ECS_CONTAINER_INSTANCE_ACTIONS = ("ecs:Poll", "ecs:StartTelemetrySession", "ecs:UpdateContainerInstancesState")
ECS_UNSCOPED_ACTIONS = ("ecs:DiscoverPollEndpoint", "ec2:DescribeTags")
ECS_AGENT_ACTIONS = (*ECS_CLUSTER_ACTIONS, *ECS_CONTAINER_INSTANCE_ACTIONS, *ECS_UNSCOPED_ACTIONS)
BATCH_ECS_CLUSTERS = "AWSBatch-*"


def neuron_metrics_statement() -> iam.PolicyStatement:
    """PutMetricData into the Neuron metrics namespace only (the action has no resource-level permissions)."""
    return iam.PolicyStatement.from_json(policy_statement())


class BatchRoles(Construct):
    """The instance role and profile of the Batch nodes, and the execution and job roles of their jobs.

    :param description: who the roles serve, in their descriptions; default: "AWS Batch compute groups".
    :param metrics: the nodes publish neuron-monitor's metrics (PutMetricData in the Neuron namespace);
        default false.

    Each :class:`~trainium_cdk.constructs.batch.TrainiumBatch` given these roles grants them its image
    pulls; its job definition's log driver grants the execution role writes to its log group.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, description: str = "AWS Batch compute groups",
        metrics: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        self.metrics = metrics
        stack = Stack.of(self)
        self.instance_role = iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"ECS agent on the Batch nodes of {description}",
        )
        # One profile for every compute environment: Batch names a profile (or its role) per environment.
        self.instance_profile = iam.InstanceProfile(self, "InstanceProfile", role=self.instance_role)
        clusters = stack.format_arn(service="ecs", resource="cluster", resource_name=BATCH_ECS_CLUSTERS)
        instances = stack.format_arn(
            service="ecs", resource="container-instance", resource_name=f"{BATCH_ECS_CLUSTERS}/*"
        )
        role = self.instance_role
        role.add_to_policy(iam.PolicyStatement(actions=list(ECS_CLUSTER_ACTIONS), resources=[clusters]))
        role.add_to_policy(iam.PolicyStatement(actions=list(ECS_CONTAINER_INSTANCE_ACTIONS), resources=[instances]))
        role.add_to_policy(iam.PolicyStatement(actions=list(ECS_UNSCOPED_ACTIONS), resources=["*"]))
        # Container instances are tagged when they register; nothing else may be tagged.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["ecs:TagResource"],
                resources=[instances],
                conditions={"StringEquals": {"ecs:CreateAction": ["RegisterContainerInstance"]}},
            )
        )
        reason = (
            "The ECS agent acts on the ECS clusters (AWSBatch-*) and container instances AWS Batch creates and "
            "names at run time; ecs:DiscoverPollEndpoint, ecr:GetAuthorizationToken and ec2:DescribeTags have "
            "no resource-level permissions."
        )
        if metrics:
            role.add_to_policy(neuron_metrics_statement())
            reason += " cloudwatch:PutMetricData has none either: it is limited to the Neuron metrics namespace."
        acknowledge_default_policy(role, "the ECS agent on the Batch nodes")
        acknowledge(role, "AwsSolutions-IAM5",
                    ["Resource::*", f"Resource::{nag_form(stack, clusters)}", f"Resource::{nag_form(stack, instances)}"],
                    reason)
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"ECS agent for the jobs of {description}: write their logs, pull their image",
        )
        acknowledge_default_policy(self.execution_role, "the ECS agent of the jobs (their logs, their image)")
        acknowledge(
            self.execution_role,
            "AwsSolutions-IAM5",
            ["Resource::*"],
            "ecr:GetAuthorizationToken has no resource-level permissions; image pulls are limited to the "
            "training image's repository.",
        )
        self.job_role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"Training jobs of {description}: no permissions until granted",
        )
        # ECS assumes both for tasks of this account only (confused deputy: service_trust.py).
        for task_role in (self.execution_role, self.job_role):
            restrict_service_trust(task_role.node.default_child)  # type: ignore[arg-type]
