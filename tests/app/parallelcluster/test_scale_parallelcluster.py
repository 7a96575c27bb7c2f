"""The ParallelCluster backend at ParallelCluster's own maximum of compute groups (issue 23): every
template within CloudFormation's limits and growing linearly with the groups, the cluster configuration
accepted by ParallelCluster's schema, and a config beyond the maximum refused before synth."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from typing import Any

import pytest

from tests.support.helpers import cfn_lint_errors, config_with, nag_violations, resources, synth
from tests.support.pcluster_schema import validate_many, venv_or_skip
from tests.support.template_limits import template_limit_violations
from trainium_cdk.app.config import ConfigError
from trainium_cdk.facts.catalog import PARALLELCLUSTER_MAX_COMPUTE_RESOURCES, PARALLELCLUSTER_MAX_QUEUES

MAXIMUM = min(PARALLELCLUSTER_MAX_QUEUES, PARALLELCLUSTER_MAX_COMPUTE_RESOURCES)
# Equal steps, so that the growth of each step can be compared.
SIZES = (MAXIMUM - 40, MAXIMUM - 20, MAXIMUM)
ACCOUNT = "123456789012"


def _config(groups: int, backends: tuple[str, ...] = ("parallelcluster",)):
    # Names of one length: each group adds the same bytes.
    return config_with(backends=list(backends), compute_groups=[
        {"name": f"g{i:02d}", "instance_type": "trn1.32xlarge", "nodes": 2, "az_ids": "usw2-az4"} for i in range(groups)
    ])


@pytest.fixture(scope="module")
def apps():
    return {n: synth(_config(n), nag=n == MAXIMUM, builtin_validation=n == MAXIMUM) for n in SIZES}


def _templates(result) -> dict[str, dict[str, Any]]:
    return {stack.stack_name: result.assembly.get_stack_by_name(stack.stack_name).template
            for stack in result.stacks.stacks}


def _sizes(result) -> dict[str, int]:
    return {name: len(json.dumps(t, indent=1)) for name, t in _templates(result).items()}


def test_every_template_is_within_cloudformation_limits_at_the_maximum(apps):
    assert template_limit_violations(_templates(apps[MAXIMUM])) == []


def test_template_bytes_are_counted_as_cdk_writes_them(apps):
    result = apps[MAXIMUM]
    written = {p.name.removesuffix(".template.json"): p.stat().st_size for p in result.template_paths()}
    assert written == _sizes(result)


def test_each_group_adds_the_same_bytes(apps):
    """Linear, not quadratic: the bytes a group adds are the same (within 10%) from the first step to the
    last, in every stack and in all of them."""
    small, middle, large = (_sizes(apps[n]) for n in SIZES)
    rows = {name: (small[name], middle[name], large[name]) for name in large}
    rows["all stacks"] = tuple(sum(s.values()) for s in (small, middle, large))
    for name, (a, b, c) in rows.items():
        first, second = b - a, c - b
        assert abs(second - first) <= 0.1 * max(first, second), (name, first, second)


def test_the_app_at_the_maximum_has_no_nag_finding_and_lints_clean(apps):
    result = apps[MAXIMUM]
    assert nag_violations(result) == []
    for path in result.template_paths():
        assert cfn_lint_errors(path, result.config.region) == [], path.name


def _as_deployed(value: Any) -> Any:
    """The configuration as the custom resource receives it: intrinsics resolved to ids of the right shape."""
    if isinstance(value, list):
        return [_as_deployed(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Fn::Sub"}:
        return value["Fn::Sub"].replace("${AWS::AccountId}", ACCOUNT)
    if set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(_as_deployed(parts))
    if set(value) in ({"Fn::ImportValue"}, {"Ref"}):
        name = next(iter(value.values()))
        digest = hashlib.sha256(name.encode()).hexdigest()[:17]
        for word, prefix in (("Subnet", "subnet-"), ("SecurityGroup", "sg-"), ("FileSystem", "fs-")):
            if word in name:
                return prefix + digest
        if "Policy" in name:
            return f"arn:aws:iam::{ACCOUNT}:policy/{name}"
        raise AssertionError(f"no deployed value for {name}")
    return {k: _as_deployed(v) for k, v in value.items()}


def _intrinsics(value) -> list[str]:
    """The CloudFormation functions (Fn::..., Ref) left anywhere in a value."""
    if isinstance(value, dict):
        return [k for k in value if k.startswith("Fn::") or k == "Ref"] + [f for v in value.values() for f in _intrinsics(v)]
    return [f for v in value for f in _intrinsics(v)] if isinstance(value, list) else []


@pytest.fixture(scope="module")
def pcluster():
    return venv_or_skip("ParallelCluster's schema")


def test_the_cluster_configuration_at_the_maximum_passes_parallelcluster_schema(pcluster, apps):
    result = apps[MAXIMUM]
    (cluster,) = resources(result.template_json("parallelcluster"), "Custom::PclusterCluster").values()
    configuration = _as_deployed(cluster["Properties"]["ClusterConfiguration"])
    assert len(configuration["Scheduling"]["SlurmQueues"]) == MAXIMUM
    assert not _intrinsics(configuration)  # every value as deployed
    outcome = validate_many({"t-cluster": configuration})["t-cluster"]
    assert outcome.errors == [] and outcome.warnings == []


def test_the_limits_are_parallelclusters_own(pcluster):
    probe = "from pcluster import constants as c; print(c.MAX_NUMBER_OF_QUEUES, c.MAX_NUMBER_OF_COMPUTE_RESOURCES_PER_CLUSTER)"
    done = subprocess.run([str(pcluster), "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(PARALLELCLUSTER_MAX_QUEUES), str(PARALLELCLUSTER_MAX_COMPUTE_RESOURCES)]


def test_one_group_more_is_refused_with_the_limit():
    with pytest.raises(ConfigError) as caught:
        _config(MAXIMUM + 1)
    message = str(caught.value)
    assert "\n" not in message
    assert re.match(rf"compute_groups = {MAXIMUM + 1}: at most {MAXIMUM} ", message), message
    assert "parallelcluster" in message


def test_other_backends_are_not_held_to_parallelclusters_limit():
    assert len(_config(MAXIMUM + 1, backends=("eks",)).compute_groups) == MAXIMUM + 1
