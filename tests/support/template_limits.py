"""CloudFormation's limits on one template (user guide, "CloudFormation quotas"), checked on synthesized
templates: what `cdk synth` passes and a deploy would still refuse."""

from __future__ import annotations

import json
from typing import Any

# Template body in an S3 object (CDK uploads every template there): 1 MB.
MAX_TEMPLATE_BYTES = 1_048_576
MAX_RESOURCES = 500
MAX_OUTPUTS = 200


def template_limit_violations(templates: dict[str, dict[str, Any]]) -> list[str]:
    """One line per limit a template breaks (stack name -> template dict); its size is that of the JSON
    as CDK writes it (indented by one space, UTF-8)."""
    violations = []
    for name, template in templates.items():
        size = len(json.dumps(template, indent=1, ensure_ascii=False).encode())
        resources = len(template.get("Resources", {}))
        outputs = len(template.get("Outputs", {}))
        if size > MAX_TEMPLATE_BYTES:
            violations.append(f"{name}: {size} bytes > {MAX_TEMPLATE_BYTES}")
        if resources > MAX_RESOURCES:
            violations.append(f"{name}: {resources} resources > {MAX_RESOURCES}")
        if outputs > MAX_OUTPUTS:
            violations.append(f"{name}: {outputs} outputs > {MAX_OUTPUTS}")
    return violations
