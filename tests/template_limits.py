"""CloudFormation's per-stack limits, checked on synthesized templates.

The template body is at most 1 MB when uploaded through S3 (what CDK does); a stack holds at most 500
resources and 200 outputs (CloudFormation quotas). Bytes are counted as CDK writes a template to
cdk.out: ``json.dumps(template, indent=1)``.
"""

from __future__ import annotations

import json
from typing import Any

MAX_TEMPLATE_BYTES = 1_048_576
MAX_RESOURCES = 500
MAX_OUTPUTS = 200


def template_limit_violations(templates: dict[str, dict[str, Any]]) -> list[str]:
    """Stack name -> template: one line per limit a template exceeds."""
    violations = []
    for stack, template in templates.items():
        size = len(json.dumps(template, indent=1))
        if size > MAX_TEMPLATE_BYTES:
            violations.append(f"{stack}: template {size} bytes > {MAX_TEMPLATE_BYTES}")
        for section, limit in (("Resources", MAX_RESOURCES), ("Outputs", MAX_OUTPUTS)):
            count = len(template.get(section, {}))
            if count > limit:
                violations.append(f"{stack}: {count} {section.lower()} > {limit}")
    return violations
