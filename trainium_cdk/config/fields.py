"""Checks that several settings share: one rule and one message each.

A field takes one as its type (``name: Name``). CIDR checks are in trainium_cdk.addressing.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from trainium_cdk.catalog import AMI_ID, AMI_ID_RULE, AZ_ID, LOG_RETENTION_DAYS
from trainium_cdk.errors import one_of

# A name that goes into resource names, Kubernetes labels and Slurm queues: a project, a compute
# group, a pipeline stage. 23 characters leave room for the suffixes stack and resource names add.
NAME = re.compile(r"^[a-z][a-z0-9-]{0,22}$")


def check_name(value: str) -> str:
    if not NAME.match(value):
        raise ValueError("lower-case letters, digits and '-', starting with a letter, at most 23 characters")
    return value


def check_log_retention(value: int) -> int:
    if value not in LOG_RETENTION_DAYS:
        raise ValueError("a CloudWatch Logs retention; " + one_of(LOG_RETENTION_DAYS))
    return value


AZ_ID_RULE = "an AZ ID such as usw2-az4 (AZ names differ per account)"


def check_az_id(value: str) -> str:
    if not AZ_ID.match(value):
        raise ValueError(AZ_ID_RULE)
    return value


def unquoted_account_id(value: object) -> object:
    """YAML reads an unquoted 111111111111 as a number (and 012345678901 loses its leading zero):
    say to quote it, before pydantic's bare "Input should be a valid string"."""
    if isinstance(value, int) and not isinstance(value, bool):
        example = str(value) if len(str(value)) == 12 else "012345678901"
        raise ValueError(
            f'a 12-digit AWS account id as a string: quote it in the YAML (account: "{example}"); unquoted, '
            "YAML reads a number"
        )
    return value


def check_account_id(value: str) -> str:
    if not re.match(r"^[0-9]{12}$", value):
        raise ValueError("a 12-digit AWS account id")
    return value


def check_ami(value: str) -> str:
    if not AMI_ID.fullmatch(value):
        raise ValueError(AMI_ID_RULE)
    return value


Name = Annotated[str, AfterValidator(check_name)]
AmiId = Annotated[str, AfterValidator(check_ami)]
LogRetentionDays = Annotated[int, AfterValidator(check_log_retention)]
AccountId = Annotated[str, BeforeValidator(unquoted_account_id), AfterValidator(check_account_id)]
