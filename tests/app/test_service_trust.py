"""Confused-deputy conditions: every role an AWS service assumes says for whose resources.

Walks every IAM role of every synthesized variant (tests/support/apps.py: every backend and instance type, the
pipeline app with its stages) and of an app with the EKS workloads that add roles (data loader, Hugging
Face token reader). A statement trusting a service principal must carry ``aws:SourceAccount`` and the
resource it acts for: ``aws:SourceArn``, or for EKS Pod Identity, which documents session tags instead,
the cluster's ARN (which names the account) as ``aws:RequestTag/eks-cluster-arn``. The services exempted are listed in
trainium_cdk/constructs/service_trust.py (UNCONDITIONED), each with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.apps import PIPELINE, VARIANTS, synthesized, synthesized_pipeline
from tests.support.helpers import config_with, resources, synth
from trainium_cdk.constructs.pod_identity import (
    CLUSTER_ARN_TAG,
    NAMESPACE_TAG,
    POD_IDENTITY_PRINCIPAL,
    SERVICE_ACCOUNT_TAG,
)
from trainium_cdk.constructs.service_trust import UNCONDITIONED

WORKLOADS = {
    "workloads": {"data_loader": {"s3_uri": "s3://my-datasets/wiki/"}},
    "hugging_face": {"token_secret": "hf-token"},
}


@pytest.fixture(scope="module")
def templates() -> dict[str, dict[str, Any]]:
    """Every template of every variant, by "<variant>/<file name>"."""
    paths: dict[str, Path] = {}
    for name in sorted(VARIANTS):
        paths.update({f"{name}/{p.name}": p for p in synthesized(name).template_paths()})
    paths.update({f"workloads/{p.name}": p for p in synth(config_with(**WORKLOADS), nag=False).template_paths()})
    paths.update({f"pipeline/{p.parent.name}/{p.name}": p for p in synthesized_pipeline().template_paths()})
    return {name: json.loads(path.read_text()) for name, path in paths.items()}


def _service_trusts(templates: dict[str, dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(where, service, statement) for every statement of every role's trust naming a service principal."""
    found = []
    for name, template in templates.items():
        for logical_id, role in resources(template, "AWS::IAM::Role").items():
            for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
                services = statement.get("Principal", {}).get("Service", [])
                for service in [services] if isinstance(services, str) else services:
                    found.append((f"{name}:{logical_id}", service, statement))
    return found


def _own_account(where: str) -> Any:
    """The account a template deploys to: a pipeline stage's (a literal), else the deploying one's."""
    for environment in PIPELINE["environments"]:
        if f"/assembly-t-pipeline-{environment['name']}/" in where:
            return environment["account"]
    return {"Ref": "AWS::AccountId"}


def _condition(statement: dict[str, Any], key: str) -> Any:
    return next((keys[key] for keys in statement.get("Condition", {}).values() if key in keys), None)


def test_the_walk_sees_every_kind_of_service_role(templates):
    services = {service for _, service, _ in _service_trusts(templates)}
    assert services >= {
        POD_IDENTITY_PRINCIPAL, "vpc-flow-logs.amazonaws.com", "ecs-tasks.amazonaws.com", "eks.amazonaws.com",
        "codebuild.amazonaws.com", "codepipeline.amazonaws.com", "ec2.amazonaws.com", "lambda.amazonaws.com",
    }
    roles = {where.split(":")[1] for where, service, _ in _service_trusts(templates) if service == POD_IDENTITY_PRINCIPAL}
    for role in ("KarpenterControllerRole", "EksFsxCsiRole", "EksVpcCniRole", "ObservabilityCloudWatchAgentRole",
                 "WorkloadsDataLoaderRole", "WorkloadsHfTokenRole", "ClusterAutoscalerControllerRole"):
        assert any(r.startswith(role) for r in roles), role


def test_every_service_trust_names_its_account_and_resource(templates):
    missing = []
    for where, service, statement in _service_trusts(templates):
        if service in UNCONDITIONED:
            continue
        if service == POD_IDENTITY_PRINCIPAL:
            if _condition(statement, CLUSTER_ARN_TAG) is None:
                missing.append(f"{where} ({service})")
            continue
        account = _condition(statement, "aws:SourceAccount")
        source = _condition(statement, "aws:SourceArn")
        if account != _own_account(where) or source is None:
            missing.append(f"{where} ({service})")
    assert missing == []


def test_pod_identity_roles_name_their_cluster_and_service_account(templates):
    for where, service, statement in _service_trusts(templates):
        if service != POD_IDENTITY_PRINCIPAL:
            continue
        assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"], where
        (cluster,) = [k for k, r in resources(templates[where.split(":")[0]], "AWS::EKS::Cluster").items()]
        assert statement["Condition"]["ArnEquals"] == {CLUSTER_ARN_TAG: {"Fn::GetAtt": [cluster, "Arn"]}}, where
        assert _condition(statement, NAMESPACE_TAG) and _condition(statement, SERVICE_ACCOUNT_TAG), where
    # The association and the trust name the same service account.
    template = next(t for name, t in templates.items() if name.startswith("workloads/") and "-eks." in name)
    (association,) = [a["Properties"] for a in resources(template, "AWS::EKS::PodIdentityAssociation").values()
                      if a["Properties"]["ServiceAccount"] == "data-loader"]
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    (statement,) = resources(template, "AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert _condition(statement, NAMESPACE_TAG) == association["Namespace"]
    assert _condition(statement, SERVICE_ACCOUNT_TAG) == "data-loader"


def test_the_cluster_role_names_its_cluster(templates):
    for name, template in templates.items():
        for cluster in resources(template, "AWS::EKS::Cluster").values():
            role_id = cluster["Properties"]["RoleArn"]["Fn::GetAtt"][0]
            (statement,) = resources(template, "AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
            arn = _condition(statement, "aws:SourceArn")
            assert arn["Fn::Join"][1][-1].endswith(f':cluster/{cluster["Properties"]["Name"]}'), name
