"""Reading one Secrets Manager secret, by name: what a job's role is granted for a Hugging Face token."""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

# Secrets Manager appends a hyphen and six random characters to a secret's name in its ARN: "NAME-??????" matches
# that secret and no other whose name starts with NAME (Secrets Manager user guide, "Resources: secret ARN" in
# the permissions policy examples).
ARN_SUFFIX = "-??????"


def secret_arn(scope: Construct, name: str) -> str:
    """The ARN pattern of secret ``name`` in the scope's stack's account and region."""
    return Stack.of(scope).format_arn(
        service="secretsmanager", resource="secret", resource_name=f"{name}{ARN_SUFFIX}",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def grant_secret_read(scope: Construct, grantee: iam.IGrantable, name: str) -> iam.Grant:
    """``secretsmanager:GetSecretValue`` on secret ``name`` only (not DescribeSecret, not any other secret). A
    secret under the account's default key (aws/secretsmanager) needs nothing more; one under a customer key also
    needs kms:Decrypt on that key, which its key policy grants."""
    return iam.Grant.add_to_principal(
        grantee=grantee, actions=["secretsmanager:GetSecretValue"], resource_arns=[secret_arn(scope, name)],
    )
