"""What an instance needs to be reached with SSM Session Manager, and nothing more (pure: no CDK).

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
POLICY_FILE_NAME = "session-manager-policy.json"


def session_manager_policy(partition: str = "aws") -> dict[str, Any]:
    """The policy document (a managed policy of the ParallelCluster nodes, or its copy in dist/)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": list(REGISTRATION_ACTIONS),
             "Resource": f"arn:{partition}:ec2:*:*:instance/*"},
            {"Effect": "Allow", "Action": list(CHANNEL_ACTIONS), "Resource": "*"},
        ],
    }
