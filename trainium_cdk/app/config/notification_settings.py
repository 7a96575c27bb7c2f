"""The ``notifications`` section: who hears of the deployment's alarms and events (its SNS topic)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from trainium_cdk.app.config.base import _Model
from trainium_cdk.errors import ConfigError

# SNS CreateTopic: a topic name is 1 to 256 letters, digits, hyphens and underscores (FIFO topics end in .fifo;
# CloudWatch alarms and EventBridge rules cannot target those for notifications, hence no dot here).
TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:([a-z0-9-]+):([0-9]{12}):[A-Za-z0-9_-]{1,256}$")
TOPIC_ARN_RULE = "an SNS topic ARN, arn:aws:sns:<region>:<12-digit account>:<name> (a standard topic)"
# An address SNS can mail: one @, no spaces, a dot in the domain. SNS checks the rest when it sends the
# confirmation mail; this catches the typos that would otherwise surface as a failed deploy.
EMAIL = re.compile(r"^[^@\s,;]+@[^@\s,;]+\.[^@\s,;]+$")
EMAIL_RULE = "one e-mail address, such as ml-oncall@example.com"


def check_email(value: str) -> str:
    if not EMAIL.fullmatch(value):
        raise ValueError(EMAIL_RULE)
    return value


def check_topic_arn(value: str) -> str:
    if not TOPIC_ARN.fullmatch(value):
        raise ValueError(TOPIC_ARN_RULE)
    return value


Email = Annotated[str, AfterValidator(check_email)]
TopicArn = Annotated[str, AfterValidator(check_topic_arn)]


class NotificationSettings(_Model):
    """Where the deployment's alarms and events go: one SNS topic per deployment (in the network stack), mailed."""

    email: Email | None = Field(
        None, description="Address subscribed to the deployment's alarm topic (SNS mails a confirmation link first); "
        "default: none (subscribe to the topic named by the network stack's output AlarmTopicArn yourself).",
    )
    topic_arn: TopicArn | None = Field(
        None, description="An existing SNS topic, in the config's region, to send alarms and events to instead of "
        "creating one; its policy (and its KMS key's) must let cloudwatch.amazonaws.com and events.amazonaws.com "
        "publish. Default: a topic of the deployment's own, encrypted with its own KMS key.",
    )

    def check_region(self, region: str) -> None:
        """CloudWatch alarm actions and EventBridge's SNS targets name a topic of the alarm's or rule's own
        region (CloudWatch User Guide, "Using Amazon CloudWatch alarms": actions in the same Region)."""
        match = TOPIC_ARN.fullmatch(self.topic_arn or "")
        if match is not None and match.group(1) != region:
            raise ConfigError("notifications.topic_arn", self.topic_arn, f"a topic in the config's region {region}")
