"""The CDK context app.py accepts: the project's own keys, and whatever the CDK itself puts there.

`cdk synth -c backend=batch` (a typo of ``backends``) used to synthesize the default app without a word;
every plain key that is not known now stops synth. Keys the CDK writes have a shape of their own:
feature flags (``@aws-cdk/...``), ``aws:cdk:...`` settings and cached lookups (``availability-zones:...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trainium_cdk.app.config import OVERRIDES
from trainium_cdk.errors import ConfigError

APP_KEYS = ("config", "pipeline")
KNOWN_KEYS = (*APP_KEYS, *OVERRIDES)
# Plain keys the CDK CLI itself keeps in context (cdk.json, cdk.context.json).
CDK_PLAIN_KEYS = ("cli-telemetry", "acknowledged-issue-numbers")
_PLAIN = re.compile(r"^[A-Za-z0-9_.-]+$")


def unknown_keys(context: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in context if _PLAIN.fullmatch(k) and k not in KNOWN_KEYS and k not in CDK_PLAIN_KEYS)


def check_context(context: Mapping[str, Any]) -> None:
    """Raise ConfigError for the first unknown plain key, listing the known ones."""
    unknown = unknown_keys(context)
    if unknown:
        raise ConfigError(
            "-c", unknown[0], "unknown context key (a typo?); known: " + ", ".join(KNOWN_KEYS)
        )
