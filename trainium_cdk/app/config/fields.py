"""Checks that several settings share: one rule and one message each.

A field takes one as its type (``name: Name``). CIDR checks are in trainium_cdk.facts.addressing.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts.catalog import AMI_ID, AMI_ID_RULE, AZ_ID, LOG_RETENTION_DAYS

# A name that goes into resource names, Kubernetes labels and Slurm queues: a project, a compute
# group, a pipeline stage. 23 characters leave room for the suffixes stack and resource names add.
NAME = re.compile(r"^[a-z][a-z0-9-]{0,22}$")


def check_name(value: str) -> str:
    if not NAME.fullmatch(value):
        raise ValueError("lower-case letters, digits and '-', starting with a letter, at most 23 characters")
    return value


def check_log_retention(value: int) -> int:
    if value not in LOG_RETENTION_DAYS:
        raise ValueError("a CloudWatch Logs retention; " + one_of(LOG_RETENTION_DAYS))
    return value


AZ_ID_RULE = "an AZ ID such as usw2-az4 (AZ names differ per account)"


def check_az_id(value: str) -> str:
    if not AZ_ID.fullmatch(value):
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
    if not re.fullmatch(r"^[0-9]{12}$", value):
        raise ValueError("a 12-digit AWS account id")
    return value


def check_ami(value: str) -> str:
    if not AMI_ID.fullmatch(value):
        raise ValueError(AMI_ID_RULE)
    return value


# An S3 key prefix of S3's own safe characters: letters, digits and ! - _ . * ' ( ) / (no spaces, quotes,
# shell or newline characters: prefixes end up in URIs that scripts print and commands take).
S3_PREFIX = re.compile(r"[A-Za-z0-9!_.*'()/-]{0,1024}")


def check_s3_prefix(value: str) -> str:
    if not S3_PREFIX.fullmatch(value) or "//" in value:
        raise ValueError("an S3 key prefix such as datasets/ (letters, digits and ! - _ . * ' ( ) /)")
    return value


# An S3 bucket name (S3 user guide, "General purpose bucket naming rules").
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def check_bucket_name(value: str) -> str:
    if not BUCKET_NAME.fullmatch(value):
        raise ValueError("an S3 bucket name: 3-63 lower-case letters, digits, '.' and '-'")
    return value


# A container image reference: registry/repository[:tag][@digest], no spaces or shell characters.
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,511}")


def image_reference(value: str) -> bool:
    """An image reference a job may name (`--image`): registry/repository[:tag][@digest], no spaces or shell, no URL
    scheme (``https://``), no unfilled ``${...}`` placeholder."""
    return bool(IMAGE.fullmatch(value)) and "://" not in value


# What the app itself passes where an image goes: a dist/ placeholder (${TRAINING_IMAGE}) or a CDK token
# (an image asset's URI, known at deploy).
IMAGE_STAND_IN = re.compile(r"\$\{[A-Z][A-Z0-9_]*\}|\$\{Token\[[A-Za-z0-9_.-]+\]\}")


def check_image(value: str) -> str:
    if not IMAGE.fullmatch(value) and not IMAGE_STAND_IN.fullmatch(value):
        raise ValueError("a container image such as 123456789012.dkr.ecr.us-west-2.amazonaws.com/train:v1 "
                         "(registry/repository:tag or @sha256:digest)")
    return value


# A relative path below a mount point: path segments of letters, digits, '_', '.' and '-', no '..'.
RELATIVE_PATH = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")


def check_relative_path(value: str) -> str:
    if not RELATIVE_PATH.fullmatch(value) or ".." in value.split("/"):
        raise ValueError("a relative path such as datasets or datasets/wiki (letters, digits, _ . - /; no ..)")
    return value


Name = Annotated[str, AfterValidator(check_name)]
AzId = Annotated[str, AfterValidator(check_az_id)]
S3Prefix = Annotated[str, AfterValidator(check_s3_prefix)]
BucketName = Annotated[str, AfterValidator(check_bucket_name)]
Image = Annotated[str, AfterValidator(check_image)]
RelativePath = Annotated[str, AfterValidator(check_relative_path)]
AmiId = Annotated[str, AfterValidator(check_ami)]
LogRetentionDays = Annotated[int, AfterValidator(check_log_retention)]
AccountId = Annotated[str, BeforeValidator(unquoted_account_id), AfterValidator(check_account_id)]


# An environment variable name as POSIX defines the portable ones (XBD 8.1: letters, digits and '_', not
# starting with a digit): the launcher and the Slurm scripts export a job's variables through the shell,
# whose `export A=B=x` means something else, and an empty name is no variable at all.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_RULE = "an environment variable name: letters, digits and '_', not starting with a digit"


def check_environment_name(name: str) -> str:
    """``name`` when it is an environment variable name (ENV_NAME), else ValueError stating the rule; used by
    the config's job env and by the CLI's ``--env KEY=VALUE``."""
    if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
        raise ValueError(ENV_NAME_RULE)
    return name


# AWS tags (the tag restrictions of the AWS Batch, ECS and EC2 user guides): keys of 1 to 128 characters,
# values of at most 256, of letters, digits, spaces and + - = . _ : / @ (CloudFormation's pattern for a tag,
# which CDK checks at synth with a traceback: ^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$); a key or value starting with aws:
# (in any case) is reserved for AWS, and CloudFormation refuses such a key at deploy.
TAG_KEY_MAX, TAG_VALUE_MAX = 128, 256
TAG_SYMBOLS = "_.:/=+-@"


def _tag_text(text: str) -> bool:
    """Every character a letter (\\p{L}), a number (\\p{N}), a separator (\\p{Z}: spaces) or one of TAG_SYMBOLS."""
    return all(c.isalpha() or c.isnumeric() or unicodedata.category(c).startswith("Z") or c in TAG_SYMBOLS
               for c in text)


# 50 tags per resource; ParallelCluster keeps 10 of them for its own (pcluster/constants.py MAX_TAGS_COUNT).
MAX_TAGS = 40
TAG_CHARACTERS = "letters, digits, spaces and + - = . _ : / @"


def check_tags(tags: dict[str, str]) -> dict[str, str]:
    """Tags CloudFormation and every tagged service accept; else a ConfigError naming the key or value."""
    if len(tags) > MAX_TAGS:
        raise ConfigError("tags", len(tags), f"at most {MAX_TAGS} tags (50 per resource; ParallelCluster keeps 10)")
    for key, value in tags.items():
        for what, text, low, high in (("key", key, 1, TAG_KEY_MAX), ("value", value, 0, TAG_VALUE_MAX)):
            if text.lower().startswith("aws:"):
                why = "reserved for AWS: CloudFormation refuses such a key at deploy" if what == "key" else "reserved for AWS"
                raise ConfigError(f"tags.{key}" if what == "value" else "tags", text,
                                  f"a tag {what} not starting with aws: ({why})")
            if not low <= len(text) <= high or not _tag_text(text):
                raise ConfigError(f"tags.{key}" if what == "value" else "tags", text,
                                  f"a tag {what} of {low} to {high} characters: {TAG_CHARACTERS}")
    return tags
