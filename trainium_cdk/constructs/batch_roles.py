"""The IAM roles of AWS Batch compute groups: the execution and job roles every group of a stack shares
(:class:`BatchRoles`), and each group's own instance role (:class:`BatchInstanceRole`).

Every group's jobs get the same container setup, so one execution role and one job role serve them all; what
differs by group (its log group, its image) is named by resource in their policies. The instance role is the
ECS agent of a group's nodes: it is the group's own, so that a node registers only into its own compute
environment's ECS cluster (a node that could join another group's cluster could be handed that group's tasks).
Each role sits in its group's nested stack: a stack of 50 groups (AWS Batch's limit) holds 2 roles, and each
group's template 1 role, 2 policies and 1 instance profile of CloudFormation's 500 resources; the account holds 1
role per group of IAM's 1,000 roles per account (default quota, IAM user guide, "IAM and AWS STS quotas"),
each policy well under the 10,240 characters of a role's inline policies.
"""

from __future__ import annotations

import json

from aws_cdk import Fn, Stack
from aws_cdk import aws_batch as batch
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_cdk.constructs.nag import NIST, acknowledge, acknowledge_default_policy, nag_form
from trainium_cdk.constructs.service_trust import restrict_service_trust
from trainium_cdk.node.neuron_metrics import policy_statement

# What the ECS agent on a Batch node calls (AmazonEC2ContainerServiceforEC2Role, without
# ecs:CreateCluster, CloudWatch Logs and ECR on every repository): Batch owns the ECS cluster, logs go
# through the execution role, and images come from the training image's repository.
# Each on the resource type the Service Authorization Reference ("Actions, resources, and condition keys for
# Amazon Elastic Container Service") gives it: cluster* for Register/DeregisterContainerInstance and the three
# Submit*; container-instance* (arn:...:container-instance/<cluster name>/<id>, so scoped by cluster name too;
# their ecs:cluster condition key would say the same) for Poll, StartTelemetrySession and
# UpdateContainerInstancesState; ecs:DiscoverPollEndpoint and ec2:DescribeTags take no resource type, so they
# stay on "*" (they return an endpoint and the instance's own tags, and act on no cluster).
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
# AWS Batch creates one ECS cluster per compute environment, AWSBatch-<compute environment name>-<uuid>
# (ComputeEnvironmentDetail.ecsClusterArn, e.g. cluster/AWSBatch-test1-1a6929d6-f62b-3d45-b3b5-31e7f64ae0da);
# CloudFormation returns no cluster ARN, but the environment's Ref is its ARN, which ends in its name.
BATCH_ECS_CLUSTER_PREFIX = "AWSBatch-"


def neuron_metrics_statement() -> iam.PolicyStatement:
    """PutMetricData into the Neuron metrics namespace only (the action has no resource-level permissions)."""
    return iam.PolicyStatement.from_json(policy_statement())


def ecs_cluster_name_pattern(compute_environment: batch.CfnComputeEnvironment, suffix: str = "") -> str:
    """The names of the ECS cluster Batch makes for ``compute_environment`` (then ``suffix``), from its name read
    at deploy time.

    The uuid is matched by ``*``: Batch documents no form for it. The pattern admits only compute environments
    whose name begins with this one's and a hyphen; CloudFormation generates this one's with a random suffix.
    """
    name = Fn.select(1, Fn.split("/", compute_environment.ref))  # arn:...:compute-environment/<name>
    return Fn.join("", [BATCH_ECS_CLUSTER_PREFIX, name, f"-*{suffix}"])


class BatchInstanceRole(Construct):
    """The instance role of one compute group's Batch nodes: its ECS agent acts on its own compute environment's
    cluster only (:meth:`scope_to`), pulls its images and reads its node setup (granted by the group).

    :param description: whose nodes, in the role's description.
    :param metrics: the nodes publish neuron-monitor's metrics (PutMetricData in the Neuron namespace).
        Default: false.
    """

    def __init__(self, scope: Construct, construct_id: str, *, description: str, metrics: bool = False) -> None:
        super().__init__(scope, construct_id)
        self.metrics = metrics
        self.role = iam.Role(
            self, "Role", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"ECS agent on the Batch nodes of {description}",
        )
        self.role.add_to_policy(iam.PolicyStatement(actions=list(ECS_UNSCOPED_ACTIONS), resources=["*"]))
        reason = (
            "ecs:DiscoverPollEndpoint, ecr:GetAuthorizationToken and ec2:DescribeTags have no resource-level "
            "permissions."
        )
        if metrics:
            self.role.add_to_policy(neuron_metrics_statement())
            reason += " cloudwatch:PutMetricData has none either: it is limited to the Neuron metrics namespace."
        acknowledge_default_policy(self.role, "the ECS agent on the Batch nodes")
        acknowledge(self.role, "AwsSolutions-IAM5", ["Resource::*"], reason)

    def scope_to(self, compute_environment: batch.CfnComputeEnvironment) -> iam.Policy:
        """The ECS agent's actions on ``compute_environment``'s cluster and its container instances.

        A policy of its own, not the role's DefaultPolicy: it names the environment, which names the role's
        profile, so CloudFormation attaches it after creating the environment. No node runs before then: the
        environment starts at 0 vCPUs and launches nodes for jobs only.
        """
        stack = Stack.of(self)
        clusters = stack.format_arn(service="ecs", resource="cluster", resource_name=ecs_cluster_name_pattern(
            compute_environment))
        instances = stack.format_arn(
            service="ecs", resource="container-instance",
            resource_name=ecs_cluster_name_pattern(compute_environment, "/*"),
        )
        policy = iam.Policy(self, "EcsAgent", roles=[self.role], statements=[
            iam.PolicyStatement(actions=list(ECS_CLUSTER_ACTIONS), resources=[clusters]),
            iam.PolicyStatement(actions=list(ECS_CONTAINER_INSTANCE_ACTIONS), resources=[instances]),
            # Container instances are tagged when they register; nothing else may be tagged.
            iam.PolicyStatement(
                actions=["ecs:TagResource"], resources=[instances],
                conditions={"StringEquals": {"ecs:CreateAction": ["RegisterContainerInstance"]}},
            ),
        ])
        acknowledge(policy, f"{NIST}-IAMNoInlinePolicy", None,
                    "The ECS agent's policy on its own compute environment's cluster: attached to that group's "
                    "instance role only; a managed policy would let other principals take it.")
        # cdk-nag names the resources with the environment's name as its template JSON.
        logical_id = stack.resolve(stack.get_logical_id(compute_environment))
        name = json.dumps({"Fn::Select": [1, {"Fn::Split": ["/", {"Ref": logical_id}]}]}, separators=(",", ":"))
        findings = [
            stack.format_arn(service="ecs", resource="cluster", resource_name=f"{BATCH_ECS_CLUSTER_PREFIX}{name}-*"),
            stack.format_arn(service="ecs", resource="container-instance",
                             resource_name=f"{BATCH_ECS_CLUSTER_PREFIX}{name}-*/*"),
        ]
        acknowledge(policy, "AwsSolutions-IAM5", [f"Resource::{nag_form(stack, f)}" for f in findings],
                    "The ECS agent acts on the ECS cluster AWS Batch creates for this compute environment, "
                    "AWSBatch-<its name>-<uuid>, and that cluster's container instances: Batch names them at run "
                    "time.")
        return policy


class BatchRoles(Construct):
    """The execution and job roles of the jobs of one or more compute groups.

    :param description: who the roles serve, in their descriptions. Default: "AWS Batch compute groups".

    Each :class:`~trainium_cdk.constructs.batch.TrainiumBatch` given these roles grants the execution role its
    image pulls; its job definition's log driver grants it writes to its log group. Its nodes' instance role is
    its own (:class:`BatchInstanceRole`).
    """

    def __init__(self, scope: Construct, construct_id: str, *, description: str = "AWS Batch compute groups") -> None:
        super().__init__(scope, construct_id)
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
