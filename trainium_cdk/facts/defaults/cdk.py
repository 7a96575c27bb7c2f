"""The project's defaults (trainium_cdk/facts/defaults/__init__.py) as the CDK values constructs take."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_logs as logs

from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts import defaults
from trainium_cdk.facts.catalog import LOG_RETENTION_DAYS

# The config's removal policy -> CloudFormation's.
REMOVAL_POLICIES = {name: RemovalPolicy[name.upper()] for name in defaults.REMOVAL_POLICIES}


def retention(days: int) -> logs.RetentionDays:
    """A retention in days as the CDK enum (CloudWatch Logs accepts only the days of LOG_RETENTION_DAYS)."""
    if days not in LOG_RETENTION_DAYS:
        raise ConfigError("log retention days", days, one_of(LOG_RETENTION_DAYS))
    return logs.RetentionDays[LOG_RETENTION_DAYS[days]]


def removal_policy(name: str) -> RemovalPolicy:
    """The config's removal policy (``retain``, ``destroy``) as the CDK enum."""
    if name not in REMOVAL_POLICIES:
        raise ConfigError("removal_policy", name, one_of(REMOVAL_POLICIES))
    return REMOVAL_POLICIES[name]


LOG_RETENTION = retention(defaults.LOG_RETENTION_DAYS)
