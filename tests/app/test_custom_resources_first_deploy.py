"""Each custom resource of every variant, as its provider meets it on a first deploy: the calls its handler makes,
against the permissions its role has (tests/support/iam_model.py), the class of defect that stopped ParallelCluster's
provider (tests/app/parallelcluster/test_parallelcluster_provider.py evaluates that one with ParallelCluster's own
statements). The calls are the providers' own:

- CDK's kubectl provider (aws-eks-v2 KubectlProvider; its handler, lib/kubectl-handler): ``eks:DescribeCluster`` of
  the cluster for a kubeconfig, then ``helm`` or ``kubectl`` as the cluster's admin: an access entry of its role with
  AmazonEKSClusterAdminPolicy on the cluster; a Helm chart shipped as an asset is read from S3 first
  (``s3:GetObject`` of that object). The provider framework's function invokes the handler.
- The AMI lookup (trainium_cdk/lambdas/ami_lookup): ``ec2:DescribeImages``, which has no resource-level permissions.
- CDK's restriction of the VPC's default security group: it revokes that group's rules (``ec2:Revoke...``).

A custom resource of another kind fails the test until its calls are modelled here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.apps import VARIANTS, synthesized
from tests.support.helpers import resources
from tests.support.iam_model import RolePolicies, resolve

ACCOUNT, PARTITION = "123456789012", "aws"
CLUSTER_ADMIN = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


def refs_of(template: dict[str, Any], region: str) -> dict[str, str]:
    """What CloudFormation gives each resource's Ref and Arn: names from the logical ids."""
    refs = {"AWS::AccountId": ACCOUNT, "AWS::Region": region, "AWS::Partition": PARTITION}
    for logical_id, resource in template["Resources"].items():
        kind = resource["Type"]
        name = f"t-{logical_id}"
        if kind == "AWS::IAM::Role":
            refs[logical_id], refs[f"{logical_id}.Arn"] = name, f"arn:aws:iam::{ACCOUNT}:role/{name}"
        elif kind == "AWS::Lambda::Function":
            refs[logical_id] = name
            refs[f"{logical_id}.Arn"] = f"arn:aws:lambda:{region}:{ACCOUNT}:function:{name}"
        elif kind == "AWS::EC2::VPC":
            refs[logical_id], refs[f"{logical_id}.DefaultSecurityGroup"] = f"vpc-{logical_id}", f"sg-{logical_id}"
        elif kind == "AWS::EKS::Cluster":
            refs[logical_id], refs[f"{logical_id}.Arn"] = name, f"arn:aws:eks:{region}:{ACCOUNT}:cluster/{name}"
        else:
            refs[logical_id] = name
    return refs


def handler_of(template: dict[str, Any], service_token: Any) -> tuple[str, str]:
    """(the function the custom resource's token names, the function that does the work): the provider framework's
    onEvent function passes the event to the handler its environment names (USER_ON_EVENT_FUNCTION_ARN)."""
    (function,) = service_token["Fn::GetAtt"][:1]
    variables = template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {})
    user = variables.get("USER_ON_EVENT_FUNCTION_ARN")
    return function, user["Fn::GetAtt"][0] if user else function


def role_of(template: dict[str, Any], function: str, refs: dict[str, str]) -> RolePolicies:
    (role,) = template["Resources"][function]["Properties"]["Role"]["Fn::GetAtt"][:1]
    return RolePolicies(template, role, refs)


def custom_resources(variant: str) -> list[tuple[str, dict[str, Any], str, dict[str, Any]]]:
    """(stack, template, logical id, resource) of every custom resource of the variant's templates."""
    result = synthesized(variant)
    found = []
    for path in result.template_paths():
        template = json.loads(path.read_text())
        for logical_id, resource in template["Resources"].items():
            if resource["Type"].startswith("Custom::") and resource["Type"] != "Custom::PclusterCluster":
                found.append((path.name, template, logical_id, resource))
    return found


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_custom_resource_s_handler_may_make_its_calls(variant):
    region = synthesized(variant).config.region
    kinds: set[str] = set()
    for stack, template, logical_id, resource in custom_resources(variant):
        kind = resource["Type"]
        refs = refs_of(template, region)
        framework, handler = handler_of(template, resource["Properties"]["ServiceToken"])
        handler_arn = refs[f"{handler}.Arn"]
        if framework != handler:  # the framework's function may invoke the handler
            assert role_of(template, framework, refs).allows("lambda:InvokeFunction", handler_arn), (stack, logical_id)
        role = role_of(template, handler, refs)
        if kind in ("Custom::AWSCDK-EKS-KubernetesResource", "Custom::AWSCDK-EKS-HelmChart"):
            kinds.add(kind)
            (cluster,) = resources(template, "AWS::EKS::Cluster")
            assert role.allows("eks:DescribeCluster", refs[f"{cluster}.Arn"]), (stack, logical_id)
            admins = [e["Properties"] for e in resources(template, "AWS::EKS::AccessEntry").values()
                      if e["Properties"]["PrincipalArn"] == {"Fn::GetAtt": [role.role, "Arn"]}]
            (entry,) = admins
            assert [(resolve(p["PolicyArn"], refs), p["AccessScope"]["Type"]) for p in entry["AccessPolicies"]] == [
                (CLUSTER_ADMIN, "cluster")], (stack, logical_id)
            url = resource["Properties"].get("ChartAssetURL")
            if url is not None:  # a vendored chart, an asset of the stack
                found = re.fullmatch(r"s3://([^/]+)/(.+)", resolve(url, refs))
                assert found, url
                assert role.allows("s3:GetObject", f"arn:aws:s3:::{found[1]}/{found[2]}"), (stack, logical_id)
            else:
                assert str(resource["Properties"].get("Repository", "")).startswith("oci://public.ecr.aws/") or \
                    "Manifest" in resource["Properties"], (stack, logical_id)  # public charts need no credentials
        elif kind == "Custom::AmiLookup":
            kinds.add(kind)
            assert role.allows("ec2:DescribeImages", "*"), (stack, logical_id)
        elif kind == "Custom::VpcRestrictDefaultSG":  # CDK's: revokes the default group's rules
            group = resolve(resource["Properties"]["DefaultSecurityGroupId"], refs)
            arn = f"arn:aws:ec2:{region}:{ACCOUNT}:security-group/{group}"
            for action in ("ec2:RevokeSecurityGroupIngress", "ec2:RevokeSecurityGroupEgress"):
                assert role.allows(action, arn), (stack, logical_id, action)
        else:
            raise AssertionError(f"{stack} {logical_id}: no model of {kind}'s calls: add one here")
    backends = synthesized(variant).config.backends
    assert ("Custom::AWSCDK-EKS-HelmChart" in kinds) == ("eks" in backends)
    assert ("Custom::AmiLookup" in kinds) == ("instance" in backends)
