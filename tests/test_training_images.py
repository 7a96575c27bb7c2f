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

from tests.apps import synthesized
from tests.helpers import resources
from trainium_cdk.names import OUTPUT_TRAINING_IMAGE_REPOSITORY_URI, output_key
from trainium_cdk.stacks.batch_stack import TRAINING_IMAGES_LOGICAL_ID

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


def test_batch_nodes_and_jobs_may_pull_from_it(app):
    template = app.template_json("batch")
    roles = {k for k, r in resources(template, "AWS::IAM::Role").items()
             if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
             in ("ec2.amazonaws.com", "ecs-tasks.amazonaws.com")}
    pulls: dict[str, bool] = {}
    for policy in resources(template, "AWS::IAM::Policy").values():
        (role,) = policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if sorted(statement["Action"]) == PULL_ACTIONS and {"Fn::GetAtt": [TRAINING_IMAGES_LOGICAL_ID, "Arn"]} in targets:
                pulls[role["Ref"]] = True
    instance = next(k for k in roles if "InstanceRole" in k)
    execution = next(k for k in roles if "ExecutionRole" in k)
    assert pulls == {instance: True, execution: True}  # the job role gets nothing
