"""Confused-deputy conditions on the trust policies of roles that AWS services assume.

A role trusting a service principal (``codebuild.amazonaws.com``) can be assumed by that service on
behalf of *any* account's resource unless its trust says whose: AWS's guidance is ``aws:SourceAccount``
and ``aws:SourceArn`` on every service trust where the service sets them (IAM User Guide, "The confused
deputy problem"). :class:`ServiceTrustConditions`, an aspect, adds them to every role of a scope, including
the roles CDK creates itself (the flow log's, the cluster's, CDK Pipelines'); a statement that already
names ``aws:SourceAccount`` (a Pod Identity trust, which names its cluster) is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsii
from aws_cdk import Aws, IAspect, Stack
from aws_cdk import aws_iam as iam
from constructs import IConstruct

# What each service sets as aws:SourceArn when it assumes a role, as the resource part of an ARN in the
# role's own account and region (the service's part of the ARN is the key's first element):
# - vpc-flow-logs: the flow log (VPC User Guide, "IAM role for publishing flow logs to CloudWatch Logs").
# - ecs-tasks: the task, in the ECS cluster Batch creates (ECS Developer Guide, "Task IAM role": the trust
#   example conditions on arn:aws:ecs:<region>:<account>:*).
# - eks: the cluster (EKS User Guide, "Cross-service confused deputy prevention in Amazon EKS", 2025-08-19:
#   EKS accepts aws:SourceArn and aws:SourceAccount in a cluster role's trust).
# - codebuild: the project (CodeBuild User Guide, "Cross-service confused deputy prevention").
# - codepipeline: the pipeline (CodePipeline User Guide, "Cross-service confused deputy prevention").
SOURCE_ARNS: Mapping[str, tuple[str, str]] = {
    "vpc-flow-logs.amazonaws.com": ("ec2", "vpc-flow-log/*"),
    "ecs-tasks.amazonaws.com": ("ecs", "*"),
    "eks.amazonaws.com": ("eks", "cluster/*"),
    "codebuild.amazonaws.com": ("codebuild", "project/*"),
    "codepipeline.amazonaws.com": ("codepipeline", "*"),
}

# Services that assume a role only when a principal of the same account passed it to them
# (iam:PassRole cannot pass a role to another account's resource) and that set neither key when they do:
# EC2 instance profiles and Lambda execution roles (AWS documents no source keys for either; scanners
# that flag them treat it as a false positive, prowler-cloud/prowler#2810). A condition there would stop
# the service, not a deputy.
UNCONDITIONED: Mapping[str, str] = {
    "ec2.amazonaws.com": "instance profile roles: EC2 sets no aws:SourceAccount/aws:SourceArn when it assumes them",
    "lambda.amazonaws.com": "Lambda execution roles: Lambda sets no aws:SourceAccount/aws:SourceArn when it assumes them",
}


def source_conditions(service: str, stack: Stack, source_arn: str | None = None) -> dict[str, Any]:
    """``aws:SourceAccount`` (the stack's account) and ``aws:SourceArn`` for ``service``: ``source_arn``
    when given (one cluster), otherwise any resource of that service in the stack's account and region."""
    if source_arn is None:
        service_part, resource = SOURCE_ARNS[service]
        source_arn = f"arn:{Aws.PARTITION}:{service_part}:{stack.region}:{stack.account}:{resource}"
    return {"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": source_arn}}


def _services(statement: Mapping[str, Any]) -> list[str]:
    principal = statement.get("Principal")
    services = principal.get("Service", []) if isinstance(principal, dict) else []
    return [services] if isinstance(services, str) else list(services)


def restrict_service_trust(role: iam.CfnRole, source_arns: Mapping[str, str] | None = None) -> None:
    """Add the source conditions to each statement of ``role``'s trust that lets a service in
    :data:`SOURCE_ARNS` assume it and names no ``aws:SourceAccount`` yet (an escape hatch: the roles
    CDK creates build their trust policy themselves). ``source_arns``: exact ARNs by service."""
    stack = Stack.of(role)
    document = stack.resolve(role.assume_role_policy_document) or {}
    for i, statement in enumerate(document.get("Statement", [])):
        conditions = statement.get("Condition", {})
        if any("aws:SourceAccount" in keys for keys in conditions.values()):
            continue
        services = [s for s in _services(statement) if s in SOURCE_ARNS]
        if len(services) != 1 or statement.get("Effect") != "Allow":
            continue  # a statement trusting two services at once would need one statement each
        (service,) = services
        added = source_conditions(service, stack, (source_arns or {}).get(service))
        for operator, keys in added.items():
            role.add_property_override(
                f"AssumeRolePolicyDocument.Statement.{i}.Condition.{operator}", {**conditions.get(operator, {}), **keys}
            )


@jsii.implements(IAspect)
class ServiceTrustConditions:
    """Aspect: :func:`restrict_service_trust` on every role under the scope it is added to."""

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, iam.CfnRole):
            restrict_service_trust(node)
