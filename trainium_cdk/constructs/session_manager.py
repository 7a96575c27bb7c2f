"""Session Manager's minimal instance policy on a role of ours (its actions, and why: trainium_cdk/facts/session_manager/)."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_cdk.constructs.nag import acknowledge, acknowledge_default_policy, nag_form
from trainium_cdk.facts.session_manager import (
    CHANNEL_ACTIONS,
    REGISTRATION_ACTIONS,
    RUN_COMMAND_ACTIONS,
    SESSION_MANAGER_ACTIONS,
)

__all__ = ["RUN_COMMAND_ACTIONS", "SESSION_MANAGER_ACTIONS", "grant_session_manager", "session_manager_role"]


def session_manager_role(
    scope: Construct, construct_id: str, *, description: str, run_command: bool = False
) -> iam.Role:
    """An instance role that Session Manager reaches (and, with ``run_command``, Run Command), and nothing else."""
    role = iam.Role(scope, construct_id, assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"), description=description)
    grant_session_manager(role, run_command=run_command)
    return role


def grant_session_manager(role: iam.Role, *, run_command: bool = False) -> None:
    """Let the SSM agent on an instance of ``role`` register and carry Session Manager sessions (and, with
    ``run_command``, receive Run Command's commands and reply)."""
    stack = Stack.of(role)
    instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
    role.add_to_principal_policy(iam.PolicyStatement(actions=list(REGISTRATION_ACTIONS), resources=[instances]))
    channels = [*CHANNEL_ACTIONS, *(RUN_COMMAND_ACTIONS if run_command else ())]
    role.add_to_principal_policy(iam.PolicyStatement(actions=channels, resources=["*"]))
    acknowledge_default_policy(role, "an instance's SSM agent (Session Manager)")
    acknowledge(
        role, "AwsSolutions-IAM5", ["Resource::*", f"Resource::{nag_form(stack, instances)}"],
        "Session Manager's minimal instance policy: the agent registers the instance it runs on (its ARN is "
        "known only at run time) and opens its message channels (no resource ARN); nothing readable.",
    )
