"""The Batch backend at AWS Batch's own limit: 50 compute groups (job queues and compute environments per
account and region) synthesize into templates CloudFormation accepts, and each further group costs the
same few resources and bytes (shared roles, one JSON output, groups past the first 25 in nested stacks)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import US_EAST_2, cfn_lint_errors, config_with, nag_violations, synth
from tests.template_limits import MAX_OUTPUTS, MAX_RESOURCES, MAX_TEMPLATE_BYTES, template_limit_violations
from trainium_cdk.catalog import BATCH_MAX_COMPUTE_GROUPS
from trainium_cdk.errors import ConfigError
from trainium_cdk.stacks.batch_stack import GROUPS_PER_TEMPLATE

SIZES = (10, 30, BATCH_MAX_COMPUTE_GROUPS)


def _groups(count: int, instance_type: str = "trn1.32xlarge", az_id: str = "usw2-az4") -> list[dict[str, Any]]:
    return [{"name": f"group-{i}", "instance_type": instance_type, "nodes": 2, "az_ids": az_id} for i in range(count)]


@functools.cache
def _synthesized(count: int, instance_type: str = "trn1.32xlarge") -> tuple[Any, dict[str, Path]]:
    """The app of ``count`` identical groups (cdk-nag on: a finding fails the synth), and its templates by
    file name, nested ones included."""
    if instance_type == "trn1.32xlarge":
        config = config_with(backends=["batch"], compute_groups=_groups(count))
    else:  # cfn-lint knows trn2 in us-east-2 only
        config = config_with(backends=["batch"], compute_groups=_groups(count, instance_type, "use2-az3"), **US_EAST_2)
    result = synth(config)
    return result, {p.name: p for p in result.template_paths()}


def _templates(paths: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {name: json.loads(path.read_text()) for name, path in paths.items()}


def _bytes(paths: dict[str, Path]) -> int:
    return sum(path.stat().st_size for path in paths.values())


@pytest.mark.parametrize("count", SIZES)
def test_every_template_is_within_cloudformation_limits(count):
    _, paths = _synthesized(count)
    templates = _templates(paths)
    assert template_limit_violations(templates) == []
    for name, template in templates.items():
        # The checker measures what CDK writes.
        assert len(json.dumps(template, indent=1, ensure_ascii=False).encode()) == paths[name].stat().st_size, name
        assert len(template.get("Resources", {})) <= MAX_RESOURCES
        assert len(template.get("Outputs", {})) <= MAX_OUTPUTS
        assert paths[name].stat().st_size <= MAX_TEMPLATE_BYTES


def test_the_maximum_is_every_group_deployed_once():
    result, paths = _synthesized(BATCH_MAX_COMPUTE_GROUPS)
    templates = _templates(paths)
    queues = [r for t in templates.values() for r in t["Resources"].values() if r["Type"] == "AWS::Batch::JobQueue"]
    environments = [
        r for t in templates.values() for r in t["Resources"].values() if r["Type"] == "AWS::Batch::ComputeEnvironment"
    ]
    assert len(queues) == len(environments) == BATCH_MAX_COMPUTE_GROUPS
    nested = [n for n in templates if n.endswith(".nested.template.json")]
    assert len(nested) == -(-BATCH_MAX_COMPUTE_GROUPS // GROUPS_PER_TEMPLATE) - 1
    assert nag_violations(result) == []


def test_the_templates_at_the_maximum_lint_clean():
    _, paths = _synthesized(BATCH_MAX_COMPUTE_GROUPS)
    errors = [e for path in paths.values() for e in cfn_lint_errors(path, "us-west-2")]
    assert errors == []


def test_each_further_group_costs_the_same_bytes():
    """Bytes per extra group from 10 to 30 groups and from 30 to 50 agree within 10%: nothing per group grows
    with the number of groups (a policy or output listing every group grows by one entry each)."""
    small, middle, large = (_bytes(_synthesized(n)[1]) for n in SIZES)
    first = (middle - small) / (SIZES[1] - SIZES[0])
    second = (large - middle) / (SIZES[2] - SIZES[1])
    assert abs(second - first) <= 0.1 * first, (first, second)


def test_the_largest_group_type_fits_the_templates_too():
    """trn2.48xlarge (16 EFA interfaces, 16 Neuron devices) writes the largest group: GROUPS_PER_TEMPLATE of
    them still fit one template."""
    _, paths = _synthesized(BATCH_MAX_COMPUTE_GROUPS, "trn2.48xlarge")
    assert template_limit_violations(_templates(paths)) == []


def test_one_group_past_the_maximum_is_refused_by_the_config():
    with pytest.raises(ConfigError, match=rf"compute_groups = {BATCH_MAX_COMPUTE_GROUPS + 1}: at most "):
        config_with(backends=["batch"], compute_groups=_groups(BATCH_MAX_COMPUTE_GROUPS + 1))
