"""The Batch backend at AWS Batch's own limit: 50 compute groups (job queues and compute environments per
account and region) synthesize into templates CloudFormation accepts, and each further group costs the
same few resources and bytes (shared roles, one JSON output, each group a nested stack of its own); adding or
removing a group moves no other group. Every app's groups are of the largest group type (trn2.48xlarge)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import NestedStack, Stack

from tests.support.helpers import US_EAST_2, cfn_lint_errors, config_with, nag_violations, synth
from tests.support.template_limits import MAX_OUTPUTS, MAX_RESOURCES, MAX_TEMPLATE_BYTES, template_limit_violations
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import BATCH_MAX_COMPUTE_GROUPS

# The stability test's apps (27 groups, 28 after "add one") and the maximum: three sizes, no app of their own.
STABLE_GROUPS = 27
SIZES = (STABLE_GROUPS, STABLE_GROUPS + 1, BATCH_MAX_COMPUTE_GROUPS)
# Every size of the largest group type: trn2.48xlarge (16 EFA interfaces, 16 Neuron devices) writes the largest group
# template. In us-east-2: cfn-lint knows trn2 there only.
TYPE = "trn2.48xlarge"


def _groups(count: int) -> list[dict[str, Any]]:
    return [{"name": f"group-{i}", "instance_type": TYPE, "nodes": 2, "az_ids": "use2-az3"} for i in range(count)]


def _config(groups: list[dict[str, Any]], **batch: Any) -> Any:
    """Without the CPU queue (a job queue and compute environment too): the groups alone reach Batch's limit."""
    return config_with(backends=["batch"], compute_groups=groups, batch={"cpu_instance_type": None, **batch},
                       **US_EAST_2)


@functools.cache
def _synthesized(count: int) -> tuple[Any, dict[str, Path]]:
    """The app of ``count`` identical groups (cdk-nag on: a finding fails the synth), and its templates by
    file name, nested ones included."""
    result = synth(_config(_groups(count)))
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
    assert len(nested) == BATCH_MAX_COMPUTE_GROUPS
    assert nag_violations(result) == []


def _as_any_group(text: str, index: int) -> str:
    """A group's template with its name (group-7, group7 in logical ids) and CDK's hash suffixes of logical ids
    written the same for every group."""
    hash_after = r"[0-9A-F]{8}(?:[A-Z][a-z]|[^0-9A-Za-z])"  # a logical id's suffix, then a word or its end
    text = re.sub(rf"group-?{index}(?={hash_after}|[^0-9])", "GROUP", text)
    return re.sub(r"(?<=[A-Za-z0-9])[0-9A-F]{8}(?=[A-Z][a-z]|[^0-9A-Za-z])", "HASH", text)


def test_the_templates_at_the_maximum_lint_clean():
    """cfn-lint reads the parent templates and one group's: the 50 group templates differ by the group's name and
    CDK's hash suffixes only (asserted here), so the one read is the longest (cfn-lint took 45 s over all 50)."""
    _, paths = _synthesized(BATCH_MAX_COMPUTE_GROUPS)
    groups = {int(re.search(r"AWS Batch compute group group-(\d+)\"", path.read_text())[1]): path
              for name, path in paths.items() if ".nested." in name}
    assert sorted(groups) == list(range(BATCH_MAX_COMPUTE_GROUPS))
    shapes = {_as_any_group(path.read_text(), index) for index, path in groups.items()}
    assert len(shapes) == 1, "the group templates differ by more than the group's name"
    longest = max(groups.values(), key=lambda path: path.stat().st_size)
    linted = [path for path in paths.values() if ".nested." not in path.name] + [longest]
    errors = [e for path in linted for e in cfn_lint_errors(path, US_EAST_2["region"])]
    assert errors == []


def test_each_further_group_costs_the_same_bytes():
    """Bytes per extra group from 27 to 28 groups and from 28 to 50 agree within 10%: nothing per group grows
    with the number of groups (a policy or output listing every group grows by one entry each)."""
    small, middle, large = (_bytes(_synthesized(n)[1]) for n in SIZES)
    first = (middle - small) / (SIZES[1] - SIZES[0])
    second = (large - middle) / (SIZES[2] - SIZES[1])
    assert abs(second - first) <= 0.1 * first, (first, second)


def test_the_largest_group_type_fits_the_templates_too():
    """trn2.48xlarge (16 EFA interfaces, 16 Neuron devices) writes the largest group: 50 of them fit, far below the
    limits. Measured 2026-11-26: each group's own template 29.8 KB (its launch template's user data 3.4 KB: the node
    setup is an S3 asset) and 2.4 KB more in the Batch stack (its nested stack resource, its grants, its output
    entry): the Batch stack 131 KB at 50 groups. Before, the setup was in every launch template (14 KB of user
    data), groups cost 39.7 KB each, and 50 groups needed 1,040,112 and 987,832 bytes in two templates.
    Measured 2026-11-27: 41.7 KB a group (was 39.1 KB at b4e6ce9): the job definition, which carries the launcher,
    grew from 16.7 to 19.3 KB with the native track's compile-cache counts and the EKS metrics push; the budget
    moved from 40 to 44 KB, still 1/25 of CloudFormation's 1 MB."""
    _, paths = _synthesized(BATCH_MAX_COMPUTE_GROUPS)
    templates = _templates(paths)
    assert template_limit_violations(templates) == []
    groups = {name: path.stat().st_size for name, path in paths.items() if name.endswith(".nested.template.json")}
    assert len(groups) == BATCH_MAX_COMPUTE_GROUPS
    assert max(groups.values()) <= 44 * 1024
    assert max(path.stat().st_size for path in paths.values()) <= MAX_TEMPLATE_BYTES // 4
    for name, template in templates.items():
        assert len(template.get("Resources", {})) <= MAX_RESOURCES // 4, name


def test_one_group_past_the_maximum_is_refused_by_the_config():
    with pytest.raises(ConfigError, match=rf"compute_groups = {BATCH_MAX_COMPUTE_GROUPS + 1}: at most "):
        _config(_groups(BATCH_MAX_COMPUTE_GROUPS + 1))
    # The CPU queue takes one of Batch's 50 queues and environments: 50 groups beside it are one too many.
    with pytest.raises(ConfigError, match=rf"compute_groups = {BATCH_MAX_COMPUTE_GROUPS}: at most "
                                          rf"{BATCH_MAX_COMPUTE_GROUPS - 1} groups .*batch.cpu_instance_type: null"):
        _config(_groups(BATCH_MAX_COMPUTE_GROUPS), cpu_instance_type="m7i.2xlarge")
    _config(_groups(BATCH_MAX_COMPUTE_GROUPS - 1), cpu_instance_type="m7i.2xlarge")


def _group_templates(groups: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """By group name: the template that holds the group's resources (their logical ids and properties) and the
    parent's resource of that template when it is a nested stack (its template URL and parameters), else None."""
    result = synth(_config(groups))  # as _synthesized: the same entry
    stack = result.stacks.backends["batch"]
    parent = result.template_json("batch")
    found = {}
    for name, training in stack.groups.items():
        holder = Stack.of(training)
        if holder is stack:
            found[name] = (parent, None)
            continue
        resource = holder.nested_stack_resource
        assert isinstance(holder, NestedStack) and resource is not None
        template = json.loads((result.outdir / holder.template_file).read_text())
        found[name] = (template, parent["Resources"][stack.resolve(stack.get_logical_id(resource))])
    return found


@pytest.mark.parametrize("change", ["remove the first", "add one"])
def test_adding_or_removing_a_group_moves_no_other_group(change):
    """Issue 32: groups once went into templates by list position, so removing the first of 27 moved group 26's
    named job queue from a nested template into the parent (CloudFormation creates the new queue before deleting
    the old one and fails on the name) and replaced its compute environment and job definition. Every other
    group's template is the same, logical ids and properties, and so is its entry in the parent."""
    groups = _groups(STABLE_GROUPS)
    after_groups = groups[1:] if change == "remove the first" else [*groups, *_groups(STABLE_GROUPS + 1)[-1:]]
    before, after = _group_templates(groups), _group_templates(after_groups)
    kept = [g["name"] for g in groups if g["name"] in after]
    assert len(kept) == STABLE_GROUPS - (change == "remove the first")
    for name in kept:
        assert after[name] == before[name], name
