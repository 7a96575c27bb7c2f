"""CloudWatch Logs log groups encrypted with a customer-managed KMS key: one key per deployed stack.

``encrypt_log_groups(scope)`` keys every log group under ``scope`` that has no key, including the ones CDK
makes for its own functions, when the app is synthesized (an aspect): a construct calls it once and the log
groups it or its children add later are keyed too. The key lives in the top-level stack (a nested stack's
log groups use their parent's), rotates yearly, and is kept when a stack is deleted only if one of the log
groups it encrypts is kept (their logs stay readable).

Only log groups in a template can be keyed: groups a service or an agent creates at run time (Container
Insights' /aws/containerinsights/<cluster>/..., ParallelCluster's own stack's group) are encrypted by
CloudWatch Logs with its own keys.
"""

from __future__ import annotations

import jsii
from aws_cdk import Aspects, CfnDeletionPolicy, IAspect, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import IConstruct

KEY_ID = "LogsKey"
# CloudWatch Logs user guide, "Encrypt log data in CloudWatch Logs using AWS Key Management Service": the key
# policy lets the regional logs service principal use the key, and the encryption context condition limits
# that to this account's log groups in this region.
LOGS_KEY_ACTIONS = ("kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*")


def logs_key(scope: IConstruct) -> kms.Key:
    """The key of ``scope``'s top-level stack for its log groups, created on first use."""
    stack = Stack.of(scope)
    while stack.nested_stack_parent is not None:
        stack = stack.nested_stack_parent
    existing = stack.node.try_find_child(KEY_ID)
    if isinstance(existing, kms.Key):
        return existing
    key = kms.Key(
        stack, KEY_ID, enable_key_rotation=True, removal_policy=RemovalPolicy.DESTROY,
        description=f"CloudWatch Logs log groups of {stack.stack_name}",
    )
    key.add_to_resource_policy(iam.PolicyStatement(
        principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
        actions=list(LOGS_KEY_ACTIONS),
        resources=["*"],
        conditions={"ArnLike": {
            "kms:EncryptionContext:aws:logs:arn": f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*",
        }},
    ))
    return key


@jsii.implements(IAspect)
class EncryptLogGroups:
    """Give each log group without a key its stack's logs key (see the module docstring)."""

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, logs.CfnLogGroup) or node.kms_key_id is not None:
            return
        key = logs_key(node)
        node.kms_key_id = key.key_arn
        if node.cfn_options.deletion_policy == CfnDeletionPolicy.RETAIN:
            key.apply_removal_policy(RemovalPolicy.RETAIN)


def encrypt_log_groups(scope: IConstruct) -> None:
    """Key every log group under ``scope`` (and those added to it later) with its stack's logs key."""
    Aspects.of(scope).add(EncryptLogGroups())
