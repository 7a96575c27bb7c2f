"""Who holds what on EKS (issue 33, item 8): the data loader's role reads its S3 prefix only, and only the data
loader's Job may run as its service account; the cluster's admins are the roles the config names and CDK's kubectl
provider, nobody else (not CloudFormation's role, which creates the cluster).

Models over what a deploy applies: the synthesized EKS stack (its Pod Identity associations, access entries and
manifests) and the YAML `make synth` writes to dist/ (what a user applies with kubectl)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.admission_cel import Request, evaluate
from tests.support.helpers import config_with, resources, synth, template_text
from tests.support.reachability import Reachability
from trainium_cdk.app.dist import write_dist
from trainium_cdk.errors import ConfigError

ADMIN = "arn:aws:iam::123456789012:role/ml-platform-admin"
# Access policies and Kubernetes groups that make an access entry's principal a cluster admin (EKS user guide,
# "Review access policy permissions"; system:masters bypasses RBAC).
ADMIN_POLICIES = ("AmazonEKSClusterAdminPolicy", "AmazonEKSAdminPolicy")
CREATOR = "the identity that created the cluster"


@pytest.fixture(scope="module")
def app():
    return synth(
        config_with(eks={"admin_role_arns": [ADMIN], "example_images": True}, workloads={"data_loader": {"s3_uri": "s3://my-datasets/wiki/"}}),
        nag=False,
    )


@pytest.fixture(scope="module")
def dist_objects(app, tmp_path_factory) -> list[dict[str, Any]]:
    dist = tmp_path_factory.mktemp("dist")
    write_dist(app.config, dist)
    return [o for path in sorted(Path(dist, "eks").rglob("*.yaml")) for o in yaml.safe_load_all(path.read_text()) if o]


@pytest.fixture(scope="module")
def applied_objects(app) -> list[dict[str, Any]]:
    return [o for _, objects in Reachability.from_dir(app.outdir).manifests() for o in objects]


def _loader_role(template: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    """The data loader's role (logical id) and the (namespace, service account) pairs EKS Pod Identity hands it to."""
    associations = [a["Properties"] for a in resources(template, "AWS::EKS::PodIdentityAssociation").values()]
    (role_id,) = {a["RoleArn"]["Fn::GetAtt"][0] for a in associations if a["ServiceAccount"] == "data-loader"}
    return role_id, [(a["Namespace"], a["ServiceAccount"]) for a in associations if a["RoleArn"]["Fn::GetAtt"][0] == role_id]


# -- who may run as the loader's service account ---------------------------------------------------------------

def _admitted_owner(objects: list[dict[str, Any]], namespace: str, service_account: str) -> str | None:
    """What Kubernetes admits as ``service_account`` in ``namespace``: None when any pod may run as it, else the one
    Job (of those applied) whose pods the ValidatingAdmissionPolicies bound to the namespace let through, each
    evaluated by a CEL engine (tests/support/admission_cel.py) on the pod the Job controller creates."""
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = [(policies[b["spec"]["policyName"]], b) for b in objects if b["kind"] == "ValidatingAdmissionPolicyBinding"]

    def admitted(owner: dict[str, Any] | None, user: str) -> bool:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "generateName": "x-", "namespace": namespace, **({"ownerReferences": [owner]} if owner else {})},
            "spec": {"serviceAccountName": service_account, "containers": [{"name": "main", "image": "python:3.12"}]}}
        request = Request("CREATE", "pods", user, namespace=namespace, object=pod)
        return all(evaluate(policy, request, binding).allowed for policy, binding in bindings)

    if admitted(None, "a user of the namespace"):
        return None
    jobs = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Job" and o["metadata"].get("namespace") == namespace)
    owners = [f"Job/{job}" for job in jobs if admitted(
        {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "u", "controller": True, "blockOwnerDeletion": True},
        "system:serviceaccount:kube-system:job-controller")]
    (owner,) = owners or [None]
    return owner


def _pods_as(objects: list[dict[str, Any]], namespace: str, service_account: str) -> list[str]:
    """The workloads whose pods run as ``service_account`` in ``namespace``, as kind/name."""
    found = []
    for o in objects:
        spec = o.get("spec", {})
        pod_specs = [t["template"]["spec"] for t in spec.get("tasks", [])] or (
            [spec["template"]["spec"]] if "template" in spec else [spec] if o["kind"] == "Pod" else []
        )
        if o["metadata"].get("namespace") == namespace and any(
            p.get("serviceAccountName") == service_account for p in pod_specs
        ):
            found.append(f"{o['kind']}/{o['metadata']['name']}")
    return found


@pytest.mark.parametrize("where", ["applied by the stack", "dist/"])
def test_only_the_data_loader_job_runs_as_its_service_account(app, applied_objects, dist_objects, where):
    objects = applied_objects if where == "applied by the stack" else dist_objects
    _, bound = _loader_role(app.template_json("eks"))
    assert bound == [("training", "data-loader")]
    (namespace, service_account), = bound
    # Any pod of the namespace that names the service account would get the role, unless admission refuses it.
    assert _admitted_owner(objects, namespace, service_account) == "Job/data-loader"
    # ... and the Job itself still runs as it, in the namespace (and on the claim) where training reads.
    assert _pods_as(objects, namespace, service_account) == ["Job/data-loader"]
    (job,) = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "data-loader"]
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "data", "persistentVolumeClaim": {"claimName": "fsx-lustre"}}]


def test_a_job_naming_the_loaders_service_account_is_refused_before_deploy():
    with pytest.raises(ConfigError) as err:
        config_with(workloads={"jobs": [{"name": "sneaky", "service_account": "data-loader"}]})
    assert "workloads.jobs.0.service_account" in str(err.value) or "service_account" in str(err.value)
    assert "data-loader is the data loader's" in str(err.value) and "\n" not in str(err.value)


# -- what the loader's role may read -----------------------------------------------------------------------------

def test_the_loader_reads_its_prefix_and_nothing_else_of_the_bucket(app):
    template = app.template_json("eks")
    role_id, _ = _loader_role(template)
    statements = [
        s for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    bucket = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::my-datasets"]]}
    objects = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::my-datasets/wiki/*"]]}
    assert statements == [
        {"Action": "s3:ListBucket", "Condition": {"StringLike": {"s3:prefix": ["wiki/*"]}}, "Effect": "Allow",
         "Resource": bucket},
        {"Action": "s3:GetObject", "Effect": "Allow", "Resource": objects},
    ]


# -- who is a cluster admin --------------------------------------------------------------------------------------

def _kubectl_handler_roles(template: dict[str, Any]) -> set[str]:
    """The roles of the Lambda functions that run kubectl (those with the kubectl layer): CDK's kubectl provider."""
    layers = set(resources(template, "AWS::Lambda::LayerVersion"))
    kubectl_layers = {k for k in layers if "KubectlLayer" in k}
    return {
        f["Properties"]["Role"]["Fn::GetAtt"][0] for f in resources(template, "AWS::Lambda::Function").values()
        if kubectl_layers & {layer.get("Ref") for layer in f["Properties"].get("Layers", []) if isinstance(layer, dict)}
    }


def _cluster_admins(template: dict[str, Any]) -> set[str]:
    """Every principal with cluster admin: access entries with an admin policy or group, and the creator when
    BootstrapClusterCreatorAdminPermissions is not false (EKS's default is true: CreateAccessConfigRequest)."""
    (cluster,) = resources(template, "AWS::EKS::Cluster").values()
    admins = set()
    if cluster["Properties"].get("AccessConfig", {}).get("BootstrapClusterCreatorAdminPermissions", True) is not False:
        admins.add(CREATOR)
    for entry in resources(template, "AWS::EKS::AccessEntry").values():
        props = entry["Properties"]
        policies = {template_text(p["PolicyArn"]).rsplit("/", 1)[-1] for p in props.get("AccessPolicies", [])}
        if policies & set(ADMIN_POLICIES) or "system:masters" in props.get("KubernetesGroups", []):
            principal = props["PrincipalArn"]
            admins.add(principal if isinstance(principal, str) else f"role {principal['Fn::GetAtt'][0]}")
    return admins


def test_cluster_admins_are_the_configured_roles_and_the_kubectl_provider(app):
    template = app.template_json("eks")
    (kubectl_role,) = _kubectl_handler_roles(template)
    assert _cluster_admins(template) == {ADMIN, f"role {kubectl_role}"}


# -- where the S3 gateway endpoint leads ---------------------------------------------------------------------------

def _text(value: Any) -> Any:
    """A policy value with the partition resolved (the tests' stacks name no account: AWS::AccountId stays a Ref)."""
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join("aws" if p == {"Ref": "AWS::Partition"} else p for p in parts)
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def test_the_s3_endpoint_reaches_the_accounts_buckets_the_named_ones_and_awss(app):
    (endpoint,) = resources(app.template_json("network"), "AWS::EC2::VPCEndpoint").values()
    statements = {s.pop("Sid"): s for s in endpoint["Properties"]["PolicyDocument"]["Statement"]}
    for statement in statements.values():
        assert statement.pop("Effect") == "Allow" and statement.pop("Principal") == {"AWS": "*"}
        resource = _text(statement["Resource"])
        statement["Resource"] = sorted(resource) if isinstance(resource, list) else resource  # CDK sorts them
    region = "us-west-2"
    aws_owned = [
        f"prod-{region}-starport-layer-bucket", f"al2023-repos-{region}-de612dc2", f"al2023-{region}",
        f"aws-ssm-{region}", f"amazon-ssm-{region}", f"amazon-ssm-packages-{region}", f"{region}-birdwatcher-prod",
        f"aws-ssm-distributor-file-{region}", f"aws-ssm-document-attachments-{region}",
        f"patch-baseline-snapshot-{region}", f"{region}-aws-parallelcluster", f"amazon-ecs-agent-{region}",
        f"prod-registry-k8s-io-{region}", "fsx-lustre-client-repo", "fsx-lustre-client-repo-public-keys",
    ]
    # The data loader's bucket (config) and Neuron's, where the BERT-large example's dataset lies.
    named = ["my-datasets", "neuron-s3"]
    assert statements == {
        "ThisAccountsBuckets": {
            "Action": "s3:*", "Resource": "*",
            "Condition": {"StringEquals": {"aws:ResourceAccount": {"Ref": "AWS::AccountId"}}},
        },
        "ConfiguredBuckets": {
            "Action": "s3:*",
            "Resource": sorted(arn for b in named for arn in (f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*")),
        },
        "AwsOwnedBuckets": {"Action": "s3:GetObject", "Resource": sorted(f"arn:aws:s3:::{b}/*" for b in aws_owned)},
        "CloudFormationResponses": {
            "Action": "s3:PutObject",
            "Resource": sorted(["arn:aws:s3:::cloudformation-custom-resource-response-uswest2/*",
                                f"arn:aws:s3:::cloudformation-waitcondition-{region}/*"]),
        },
    }


def test_buckets_of_other_accounts_are_named_in_the_config():
    from trainium_cdk.app.stacks.network_stack import endpoint_buckets

    config = config_with(network={"az_ids": ["usw2-az4", "usw2-az3"], "s3_buckets": ["public-corpus"]},
                         storage={"data_repository": {"bucket_name": "team-data"}})
    assert {"public-corpus", "team-data"} <= set(endpoint_buckets(config))
    with pytest.raises(ConfigError) as err:
        config_with(network={"az_ids": ["usw2-az4", "usw2-az3"], "s3_buckets": ["Not_A_Bucket"]})
    assert "network.s3_buckets" in str(err.value) and "\n" not in str(err.value)
