"""cdk-nag findings of the library's constructs, each with its reason, one finding at a time (cdk-nag 3 has no
prefix match), acknowledged only in an app that asks: ``Aspects.of(app).add(NagAcknowledgments())``.

A construct records what it would acknowledge (metadata of the type ``PENDING`` on the construct, for its subtree);
the :class:`NagAcknowledgments` aspect turns each into aws-cdk-lib's ``Validations.of(...).acknowledge`` when the app
synthesizes. The app's stacks apply it (``compose``, the pipeline stack); an app of your own that runs cdk-nag applies
it to take the library's reasons, or leaves it out to judge every finding itself.

Two packs run over every app the tests synthesize: AwsSolutions and NIST 800-53 rev 5 (rule ids
``NIST.800.53.R5-...``). The helpers below give the reasons that recur, so that each stays true in one place;
docs/waivers.md lists every acknowledgment of the apps (generated: ``make docs``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jsii
from aws_cdk import Acknowledgment, IAspect, Stack, Token, Validations
from constructs import IConstruct

NIST = "NIST.800.53.R5"
# The metadata type of an acknowledgment a construct records ({"id": rule id, "reason": ...}).
PENDING = "trainium-cdk:nag-acknowledgment"


def acknowledge(construct: IConstruct, rule: str, findings: Sequence[str] | None, reason: str) -> None:
    """Record ``rule`` for ``construct`` and its children, which :class:`NagAcknowledgments` acknowledges: the whole
    rule, or each finding given (``Resource::*``, ``Policy::arn:...``) so that a new finding of the same rule
    still fails."""
    for rule_id in [f"{rule}[{finding}]" for finding in findings] if findings else [rule]:
        construct.node.add_metadata(PENDING, {"id": rule_id, "reason": reason})


def pending(construct: IConstruct) -> list[tuple[str, str]]:
    """The (rule id, reason) pairs recorded on ``construct`` itself."""
    return [(entry.data["id"], entry.data["reason"]) for entry in construct.node.metadata if entry.type == PENDING]


@jsii.implements(IAspect)
class NagAcknowledgments:
    """The cdk-nag acknowledgments of trainium-cdk's constructs, with their reasons (docs/waivers.md lists them):
    ``Aspects.of(app).add(NagAcknowledgments())`` before ``app.synth()``. Without it, cdk-nag reports every finding
    of the library's resources to your app."""

    def visit(self, node: IConstruct) -> None:
        for rule_id, reason in pending(node):
            Validations.of(node).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def acknowledge_bucket_logging(bucket: IConstruct, reason: str) -> None:
    """The bucket access-logging rule of both packs (AwsSolutions-S1, NIST S3BucketLoggingEnabled), one reason."""
    for rule in ("AwsSolutions-S1", f"{NIST}-S3BucketLoggingEnabled"):
        acknowledge(bucket, rule, None, reason)


def acknowledge_default_policy(role: IConstruct, what: str) -> None:
    """NIST IAMNoInlinePolicy on a role's DefaultPolicy, the AWS::IAM::Policy CDK's grants write: it is
    attached to this one role and names its resources; a managed policy could be attached elsewhere."""
    acknowledge(
        role, f"{NIST}-IAMNoInlinePolicy", None,
        f"The DefaultPolicy CDK writes for the grants of {what}: attached to this role only, its statements "
        "name this stack's resources; a managed policy would let other principals take them.",
    )


def acknowledge_custom_resource_lambda(function: IConstruct, name: str) -> None:
    """NIST's Lambda rules on the handler of a custom resource (CDK's framework functions, ours): ``name``
    says whose it is, e.g. "CDK's kubectl provider (aws-eks-v2)"."""
    acknowledge(
        function, f"{NIST}-LambdaConcurrency", None,
        f"{name}: a custom resource handler that CloudFormation calls only while it deploys the stack. Reserved "
        "concurrency comes out of the account's unreserved pool, of which Lambda keeps 100 (Lambda developer "
        "guide, 'Configuring reserved concurrency'): new accounts often have none to give.",
    )
    acknowledge(
        function, f"{NIST}-LambdaDLQ", None,
        f"{name}: a custom resource handler. CloudFormation invokes it asynchronously and waits for its answer; "
        "a failure is answered FAILED and rolls the deployment back, so a dead-letter queue would keep events "
        "that nothing replays.",
    )


def acknowledge_alarm_without_action(alarm: IConstruct) -> None:
    """NIST CloudWatchAlarmAction on an alarm built without a topic (a construct used alone, given no
    ``alarm_topic``): it shows on its dashboard. The app always gives the deployment's topic (tests/app/test_alarms.py)."""
    acknowledge(
        alarm, f"{NIST}-CloudWatchAlarmAction", None,
        "The alarm's state shows on the deployment's CloudWatch dashboard (its Alarms widget) and in the "
        "CloudWatch console; the construct was given no alarm_topic to notify.",
    )


def nag_form(stack: Stack, arn: str) -> str:
    """An ARN as cdk-nag names it in a finding: pseudo parameters as <AWS::...>, literals as they are."""
    for value, name in ((stack.partition, "Partition"), (stack.region, "Region"), (stack.account, "AccountId")):
        if Token.is_unresolved(value):
            arn = arn.replace(value, f"<AWS::{name}>")
    return arn


def nag_text(stack: Stack, value: str) -> str:
    """A string with tokens as cdk-nag writes it in a finding: Fn::Join's parts joined, a Ref as ``<Name>``, an
    Fn::Sub with each ``${Name}`` as ``<Name>``."""

    def text(part: Any) -> str:
        if isinstance(part, str):
            return part
        if "Ref" in part:
            return f"<{part['Ref']}>"
        if "Fn::Sub" in part and isinstance(part["Fn::Sub"], str):
            return re.sub(r"\$\{([^}]+)\}", r"<\1>", part["Fn::Sub"])
        if "Fn::Join" in part:
            separator, parts = part["Fn::Join"]
            return separator.join(text(p) for p in parts)
        raise ValueError(f"no cdk-nag text for {part}")

    return text(stack.resolve(value))

