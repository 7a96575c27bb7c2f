"""What an instance needs to be reached with SSM Session Manager (and Run Command), and nothing more (pure: no CDK).

AmazonSSMManagedInstanceCore also grants ``ssm:GetParameter*`` and ``ssm:GetDocument`` on every resource:
anything that runs on the instance (a Slurm job, a container) could read every parameter of the account,
SecureStrings included. The Session Manager guide's minimal instance policy is the agent's registration
(of its own instance) and its message channels (which take no resource ARN).
"""

from __future__ import annotations

from typing import Any

REGISTRATION_ACTIONS = ("ssm:UpdateInstanceInformation",)
CHANNEL_ACTIONS = (
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)
SESSION_MANAGER_ACTIONS = (*REGISTRATION_ACTIONS, *CHANNEL_ACTIONS)
# Run Command (`trn submit` to Slurm and the development instance: ssm:SendCommand): the agent receives
# commands and sends their output through the Message Delivery Service, ec2messages (Systems Manager user
# guide, "Reference: ec2messages, ssmmessages, and other API operations"; the actions
# AmazonSSMManagedInstanceCore grants for it). None of them takes a resource ARN.
RUN_COMMAND_ACTIONS = (
    "ec2messages:AcknowledgeMessage",
    "ec2messages:DeleteMessage",
    "ec2messages:FailMessage",
    "ec2messages:GetEndpoint",
    "ec2messages:GetMessages",
    "ec2messages:SendReply",
)
POLICY_FILE_NAME = "session-manager-policy.json"


def session_manager_policy(partition: str = "aws", *, run_command: bool = False) -> dict[str, Any]:
    """The policy document (a managed policy of the ParallelCluster head node, or its copy in dist/);
    ``run_command``: the instance also runs Run Command's commands (`trn submit`)."""
    channels = [*CHANNEL_ACTIONS, *(RUN_COMMAND_ACTIONS if run_command else ())]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": list(REGISTRATION_ACTIONS),
             "Resource": f"arn:{partition}:ec2:*:*:instance/*"},
            {"Effect": "Allow", "Action": channels, "Resource": "*"},
        ],
    }
