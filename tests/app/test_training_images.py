"""The training image repositories of the EKS and Batch stacks (`trn image push` pushes to them).

One policy for both (TrainingImageRepository): scanned on push, immutable tags, the newest 100 kept,
retained; Batch's under a pinned logical id, both named by the TrainingImageRepositoryUri output, and
Batch's nodes and jobs may pull from it (the instance role and the execution role: the ECS agent uses
either, by its configuration), so that a job definition revision with a pushed image runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.apps import synthesized
from tests.support.helpers import resources
from trainium_cdk.app.stacks.batch_stack import TRAINING_IMAGES_LOGICAL_ID
from trainium_cdk.facts.names import OUTPUT_TRAINING_IMAGE_REPOSITORY_URI, output_key

PULL_ACTIONS = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]


@pytest.fixture(scope="module")
def app():
    return synthesized("trn1.32xlarge")  # every backend


def _repositories(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return resources(template, "AWS::ECR::Repository")


def test_both_stacks_hold_one_repository_of_the_same_policy(app):
    (eks_id, eks), = _repositories(app.template_json("eks")).items()
    (batch_id, batch), = _repositories(app.template_json("batch")).items()
    assert batch_id == TRAINING_IMAGES_LOGICAL_ID == "TrainingImageRepository"
    assert eks_id.startswith("WorkloadsTrainingImages")  # its id since the first release: never moved
    for repository in (eks, batch):
        assert (repository["DeletionPolicy"], repository["UpdateReplacePolicy"]) == ("Retain", "Retain")
        props = repository["Properties"]
        assert "RepositoryName" not in props  # create-only: a name would collide between deployments
        assert props["ImageTagMutability"] == "IMMUTABLE"
        assert props["ImageScanningConfiguration"] == {"ScanOnPush": True}
        (rule,) = json.loads(props["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
        assert rule["selection"] == {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 100}


@pytest.mark.parametrize("role", ["eks", "batch"])
def test_the_output_names_the_repository(app, role):
    template = app.template_json(role)
    (logical,) = _repositories(template)
    value = template["Outputs"][output_key(OUTPUT_TRAINING_IMAGE_REPOSITORY_URI)]["Value"]
    assert {"Ref": logical} in value["Fn::Join"][1]


def _pulls(template: dict, repository: Any) -> set[str]:
    """The roles of ``template`` whose policies may pull from ``repository`` (its ARN as the template has it)."""
    pulls = set()
    for policy in resources(template, "AWS::IAM::Policy").values():
        (role,) = policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if sorted(statement["Action"]) == PULL_ACTIONS and repository in targets:
                pulls.add(role["Ref"])
    return pulls


def test_batch_nodes_and_jobs_may_pull_from_it(app):
    """The shared execution role in the Batch stack, and each group's own instance role in its nested stack (the
    repository's ARN a parameter the Batch stack passes); the job role gets nothing."""
    template = app.template_json("batch")
    arn = {"Fn::GetAtt": [TRAINING_IMAGES_LOGICAL_ID, "Arn"]}
    roles = {k for k, r in resources(template, "AWS::IAM::Role").items()
             if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
             == "ecs-tasks.amazonaws.com"}
    execution = next(k for k in roles if "ExecutionRole" in k)
    assert _pulls(template, arn) == {execution}
    batch = app.stacks.backends["batch"]
    for nested in batch.group_stacks.values():
        group = json.loads((app.outdir / nested.template_file).read_text())
        entry = batch.resolve(batch.get_logical_id(nested.nested_stack_resource))
        passed = template["Resources"][entry]["Properties"]["Parameters"]
        (parameter,) = [name for name, value in passed.items() if value == arn]
        (instance,) = resources(group, "AWS::IAM::Role")
        assert _pulls(group, {"Ref": parameter}) == {instance}
