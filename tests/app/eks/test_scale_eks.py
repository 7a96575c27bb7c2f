"""The EKS backend with as many compute groups as the other backends reach (50): Karpenter NodePools (one
EC2NodeClass and NodePool each, in one manifest) and managed node groups (EKS's default quota is 30 per
cluster, raised on request: 50 is tested) synthesize into templates CloudFormation accepts, and each further
group costs the same bytes."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from tests.support.helpers import config_with, resources, synth
from tests.support.reachability import manifest_objects
from tests.support.template_limits import template_limit_violations

SIZES = (10, 30, 50)
CAPACITIES = ("karpenter", "managed")


def _groups(count: int) -> list[dict[str, Any]]:
    return [{"name": f"group-{i}", "instance_type": "trn1.32xlarge", "nodes": 2, "max_nodes": 4, "az_ids": "usw2-az4"}
            for i in range(count)]


@functools.cache
def _templates(capacity: str, count: int) -> dict[str, dict[str, Any]]:
    result = synth(config_with(backends=["eks"], eks={"capacity": capacity}, compute_groups=_groups(count)), nag=False)
    return {p.name: json.loads(p.read_text()) for p in result.template_paths()}


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_fifty_groups_are_within_cloudformation_limits(capacity):
    templates = _templates(capacity, SIZES[-1])
    assert template_limit_violations(templates) == []
    eks = next(t for name, t in templates.items() if name.endswith("-eks.template.json"))
    if capacity == "karpenter":
        kinds = [o["kind"] for r in resources(eks, "Custom::AWSCDK-EKS-KubernetesResource").values()
                 for o in manifest_objects(r["Properties"]["Manifest"])]
        assert kinds.count("NodePool") == SIZES[-1]
    else:
        assert sum(r["Type"] == "AWS::EKS::Nodegroup" for r in eks["Resources"].values()) == SIZES[-1] + 1  # system nodes


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_each_further_group_costs_the_same_bytes(capacity):
    small, middle, large = (sum(len(json.dumps(t, indent=1)) for t in _templates(capacity, n).values()) for n in SIZES)
    first = (middle - small) / (SIZES[1] - SIZES[0])
    second = (large - middle) / (SIZES[2] - SIZES[1])
    assert abs(second - first) <= 0.1 * first, (first, second)
