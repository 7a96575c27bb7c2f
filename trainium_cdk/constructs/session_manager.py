"""What an instance needs to be reached with SSM Session Manager, and nothing more.

AmazonSSMManagedInstanceCore also grants ``ssm:GetParameter*`` and ``ssm:GetDocument`` on every resource:
anything that runs on the instance could read every parameter of the account, SecureStrings included. The
Session Manager guide's minimal instance policy is the agent's registration and its message channels.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam

from trainium_cdk.constructs.nag import acknowledge, nag_form

# The agent registers its own instance (a resource ARN); the message channels take none.
REGISTRATION_ACTIONS = ("ssm:UpdateInstanceInformation",)
CHANNEL_ACTIONS = (
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)
SESSION_MANAGER_ACTIONS = (*REGISTRATION_ACTIONS, *CHANNEL_ACTIONS)


def grant_session_manager(role: iam.Role) -> None:
    """Let the SSM agent on an instance of ``role`` register and carry Session Manager sessions."""
    stack = Stack.of(role)
    instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
    role.add_to_principal_policy(iam.PolicyStatement(actions=list(REGISTRATION_ACTIONS), resources=[instances]))
    role.add_to_principal_policy(iam.PolicyStatement(actions=list(CHANNEL_ACTIONS), resources=["*"]))
    acknowledge(
        role, "AwsSolutions-IAM5", ["Resource::*", f"Resource::{nag_form(stack, instances)}"],
        "Session Manager's minimal instance policy: the agent registers the instance it runs on (its ARN is "
        "known only at run time) and opens its message channels (no resource ARN); nothing readable.",
    )
