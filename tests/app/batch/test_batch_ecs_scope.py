"""Each AWS Batch compute group's nodes reach only their own compute environment's ECS cluster (issue 33, item 1).

AWS Batch makes one ECS cluster per compute environment, ``AWSBatch-<compute environment name>-<uuid>``; a node
whose ECS agent could register into another group's cluster could be handed that group's tasks (its image, its
job role's credentials). The instance roles' policies are read from the synthesized templates and evaluated as IAM
does (tests/support/iam_model.py), on the ARNs of clusters as Batch names them, the compute environments' names being what
CloudFormation generates at deploy.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import aws_cdk as cdk
import pytest

from tests.support.helpers import US_EAST_2, config_with, synth
from tests.support.iam_model import RolePolicies
from tests.support.lifecycle import batch_effects
from trainium_cdk.constructs.batch_roles import (
    ECS_CLUSTER_ACTIONS,
    ECS_CONTAINER_INSTANCE_ACTIONS,
    ECS_UNSCOPED_ACTIONS,
)

ACCOUNT = "123456789012"
REGION = US_EAST_2["region"]
# The uuid Batch appends to the cluster's name (a describe-compute-environments answer's ecsClusterArn).
UUID = "1a6929d6-f62b-3d45-b3b5-31e7f64ae0da"
CONTAINER_INSTANCE_ID = "0123456789abcdef0123456789abcdef"
# A compute environment of someone else in the account, and one whose name begins like the groups' own.
OTHER_ENVIRONMENTS = ("research-queue-ce", "ComputeEnvironment-S2GHcgfanPkxYl8i")
# Two groups, the name of one the start of the other's.
GROUPS = ("train", "train-big")


def _group(name: str) -> dict[str, Any]:
    return {"name": name, "instance_type": "trn1.32xlarge", "nodes": 2, "max_nodes": 4, "az_ids": "use2-az3"}


@pytest.fixture(scope="module")
def app():
    return synth(config_with(**US_EAST_2, backends=["batch"], compute_groups=[_group(g) for g in GROUPS],
                             storage={"enabled": False}))


def _logical_id(element: Any) -> tuple[cdk.Stack, str]:
    resource = element.node.default_child if not isinstance(element, cdk.CfnElement) else element
    stack = cdk.Stack.of(resource)
    return stack, stack.resolve(stack.get_logical_id(resource))


def generated_name(logical_id: str) -> str:
    """A compute environment name as CloudFormation generates one: the logical id, cut, and a random suffix."""
    return f"{logical_id[:20]}-{hashlib.sha256(logical_id.encode()).hexdigest()[:16]}"


class Group:
    """One group's compute environment, as deployed, and its nodes' instance role, as IAM sees it."""

    def __init__(self, app, name: str) -> None:
        training = app.stacks.backends["batch"].groups[name]
        holder, environment = _logical_id(training.compute_environment)
        self.environment = generated_name(environment)
        stack, role = _logical_id(training.instance_role)
        template = json.loads((app.outdir / stack.template_file).read_text())
        refs = {
            "AWS::Region": REGION, "AWS::AccountId": ACCOUNT,
            environment: f"arn:aws:batch:{REGION}:{ACCOUNT}:compute-environment/{self.environment}",
        } if stack is holder else {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT}
        self.policies = RolePolicies(template, role, refs)


def cluster(environment: str) -> str:
    return f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/AWSBatch-{environment}-{UUID}"


def container_instance(environment: str) -> str:
    return f"arn:aws:ecs:{REGION}:{ACCOUNT}:container-instance/AWSBatch-{environment}-{UUID}/{CONTAINER_INSTANCE_ID}"


def _reaches(group: Group, environment: str) -> dict[str, bool]:
    """What the group's nodes may do in ``environment``'s ECS cluster: each agent action, and tagging on register."""
    reach = {a: group.policies.allows(a, cluster(environment)) for a in ECS_CLUSTER_ACTIONS}
    reach |= {a: group.policies.allows(a, container_instance(environment)) for a in ECS_CONTAINER_INSTANCE_ACTIONS}
    reach["ecs:TagResource"] = group.policies.allows(
        "ecs:TagResource", container_instance(environment), {"ecs:CreateAction": "RegisterContainerInstance"})
    return reach


@pytest.mark.parametrize("name", GROUPS)
def test_a_groups_nodes_register_into_their_own_cluster(app, name):
    group = Group(app, name)
    assert _reaches(group, group.environment) == dict.fromkeys(
        (*ECS_CLUSTER_ACTIONS, *ECS_CONTAINER_INSTANCE_ACTIONS, "ecs:TagResource"), True)


@pytest.mark.parametrize("name", GROUPS)
def test_a_groups_nodes_reach_no_other_groups_cluster(app, name):
    """Failed on the old code: every group's nodes shared one role, on every AWSBatch-* cluster of the account."""
    group = Group(app, name)
    for other in GROUPS:
        if other != name:
            assert not any(_reaches(group, Group(app, other).environment).values()), other


@pytest.mark.parametrize("name", GROUPS)
@pytest.mark.parametrize("environment", OTHER_ENVIRONMENTS)
def test_a_groups_nodes_reach_no_other_compute_environments_cluster(app, name, environment):
    assert not any(_reaches(Group(app, name), environment).values())


@pytest.mark.parametrize("name", GROUPS)
def test_tagging_is_only_on_register(app, name):
    group = Group(app, name)
    assert not group.policies.allows("ecs:TagResource", container_instance(group.environment))
    assert not group.policies.allows("ecs:TagResource", cluster(group.environment),
                                     {"ecs:CreateAction": "RegisterContainerInstance"})


def test_what_takes_no_resource_stays_on_every_resource(app):
    """ecs:DiscoverPollEndpoint and ec2:DescribeTags have no resource type (Service Authorization Reference)."""
    group = Group(app, GROUPS[0])
    assert all(group.policies.allows(a, "*") for a in ECS_UNSCOPED_ACTIONS)
    assert not group.policies.allows("ecs:CreateCluster", "*")
    assert not group.policies.allows("ecs:RegisterContainerInstance", "*")


def test_upgrading_from_the_shared_profile_updates_the_environments_in_place(app):
    """The environments keep their generated names (create-only: a name would replace each environment, and its
    running jobs with it): moving to the group's own profile is an infrastructure update (tests/support/lifecycle.py)."""
    training = app.stacks.backends["batch"].groups[GROUPS[0]]
    holder, environment = _logical_id(training.compute_environment)
    after = json.loads((app.outdir / holder.template_file).read_text())
    assert "ComputeEnvironmentName" not in after["Resources"][environment]["Properties"]
    before = json.loads(json.dumps(after))
    # What the old template passed: the shared profile of the Batch stack, a parameter of the group's template.
    before["Resources"][environment]["Properties"]["ComputeResources"]["InstanceRole"] = {
        "Ref": "referencetotbatchRolesInstanceProfileArn"}
    (effect,) = batch_effects(before, after)
    assert effect.why.startswith("infrastructure update (InstanceRole)"), effect
