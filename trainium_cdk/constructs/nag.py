"""Acknowledge cdk-nag findings with a reason, one finding at a time (cdk-nag 3 has no prefix match)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, Stack, Token, Validations
from constructs import IConstruct


def acknowledge(construct: IConstruct, rule: str, findings: Sequence[str] | None, reason: str) -> None:
    """Acknowledge ``rule`` on ``construct`` and its children: the whole rule, or each finding given
    (``Resource::*``, ``Policy::arn:...``) so that a new finding of the same rule still fails."""
    for rule_id in [f"{rule}[{finding}]" for finding in findings] if findings else [rule]:
        Validations.of(construct).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def nag_form(stack: Stack, arn: str) -> str:
    """An ARN as cdk-nag names it in a finding: pseudo parameters as <AWS::...>, literals as they are."""
    for value, name in ((stack.partition, "Partition"), (stack.region, "Region"), (stack.account, "AccountId")):
        if Token.is_unresolved(value):
            arn = arn.replace(value, f"<AWS::{name}>")
    return arn
