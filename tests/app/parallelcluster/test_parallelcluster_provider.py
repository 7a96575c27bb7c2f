"""The ParallelCluster stack as its provider meets it on a first deploy: the provider's role (ParallelCluster's own
statements, transcribed with their source in tests/data/upstream/parallelcluster-provider-role.json, plus what the
stack passes in the provider's AdditionalIamPolicies) may attach every managed policy the cluster configuration gives
a node role, and read every script its configuration validator reads (HeadObject, which needs s3:GetObject), as IAM
decides it (tests/support/iam_model.py). The pcluster CLI's files say how to create the policies so that the same
statements allow them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.helpers import US_EAST_2, config_with, quality_synth, resources
from tests.support.iam_model import Statements, resolve
from tests.support.paths import DATA
from trainium_cdk.app.parallelcluster.cluster_config import placeholder_names
from trainium_cdk.facts.catalog import SUPPORTED_TRAINING_TYPES

UPSTREAM = DATA / "upstream" / "parallelcluster-provider-role.json"
ACCOUNT, REGION = "123456789012", "us-east-2"
# What CloudFormation gives at deploy: generated names carry a random suffix.
DEPLOYED = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "PclusterCustomResourceBucket": "t-provider-bucket-x1"}
# ParallelCluster's node roles, as it names them (the statements' role/parallelcluster/*).
NODE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/parallelcluster/t-cluster/t-cluster-RoleHeadNode-X1Y2"

PROMETHEUS = config_with(
    **US_EAST_2, backends=["parallelcluster"], observability={"prometheus": True},
    compute_groups=[{"name": t.replace(".", "-"), "instance_type": t, "nodes": 1, "max_nodes": 2,
                     "az_ids": "use2-az2" if t == "trn1.2xlarge" else "use2-az3"} for t in SUPPORTED_TRAINING_TYPES],
)


@pytest.fixture(scope="module")
def deployed():
    """The stack's template, its cluster configuration and the ARNs CloudFormation would give its policies."""
    result = quality_synth(PROMETHEUS)
    template = result.template_json("parallelcluster")
    stack = result.stacks.backends["parallelcluster"].stack_name
    refs = dict(DEPLOYED)
    for logical_id, policy in resources(template, "AWS::IAM::ManagedPolicy").items():
        path = policy["Properties"].get("Path", "/")
        refs[logical_id] = f"arn:aws:iam::{ACCOUNT}:policy{path}{stack}-{logical_id}-A1B2C3"
    (cluster,) = resources(template, "Custom::PclusterCluster").values()
    (provider,) = resources(template, "AWS::CloudFormation::Stack").values()
    return template, cluster["Properties"]["ClusterConfiguration"], provider, refs


def provider_role(template: dict[str, Any], provider: dict[str, Any], refs: dict[str, str]) -> Statements:
    """ParallelCluster's statements and the documents of the policies the stack adds to the provider's role."""
    upstream = json.loads(UPSTREAM.read_text())["statements"]
    added = resolve(provider["Properties"]["Parameters"].get("AdditionalIamPolicies", ""), refs).split(",")
    by_arn = {refs[k]: p for k, p in resources(template, "AWS::IAM::ManagedPolicy").items()}
    documents = [by_arn[arn]["Properties"]["PolicyDocument"] for arn in added if arn]
    return Statements([*upstream, *(s for d in documents for s in d["Statement"])], refs)


def node_policies(configuration: dict[str, Any], refs: dict[str, str]) -> list[str]:
    roles = [configuration["HeadNode"], *configuration["Scheduling"]["SlurmQueues"]]
    return sorted({resolve(p["Policy"], refs) for role in roles for p in role["Iam"].get("AdditionalIamPolicies", [])})


def validated_scripts(value: Any) -> list[Any]:
    """Every CustomActions script URL of the configuration (ParallelCluster's UrlValidator reads each)."""
    if isinstance(value, dict):
        own = [value["Script"]] if "Script" in value else []
        return own + [u for k, v in value.items() if k != "Script" for u in validated_scripts(v)]
    if isinstance(value, list):
        return [u for v in value for u in validated_scripts(v)]
    return []


def test_the_provider_may_attach_every_policy_the_nodes_get(deployed):
    template, configuration, provider, refs = deployed
    role = provider_role(template, provider, refs)
    policies = node_policies(configuration, refs)
    # The head node's Session Manager, the compute nodes' CloudWatch metrics and Prometheus remote write.
    assert len(policies) == 3
    for arn in policies:
        assert role.allows("iam:GetPolicy", arn), arn  # AdditionalIamPolicyValidator
        for action in ("iam:AttachRolePolicy", "iam:DetachRolePolicy"):  # create, and update or delete
            assert role.allows(action, NODE_ROLE, {"iam:PolicyARN": arn}), (action, arn)


def test_the_provider_may_read_every_script_its_validator_reads(deployed):
    template, configuration, provider, refs = deployed
    role = provider_role(template, provider, refs)
    urls = sorted({resolve(u, refs) for u in validated_scripts(configuration)})
    # The head node's two actions and the queues' two: setup, head node setup, Lustre tuning.
    assert len(urls) == 3 and all(u.startswith(f"s3://cdk-hnb659fds-assets-{ACCOUNT}-{REGION}/t-cluster/") for u in urls)
    for url in urls:
        bucket, key = url.removeprefix("s3://").split("/", 1)
        assert role.allows("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}"), url


def test_the_provider_reads_the_clusters_scripts_and_nothing_else(deployed):
    template, _, provider, refs = deployed
    role = provider_role(template, provider, refs)
    assets = f"arn:aws:s3:::cdk-hnb659fds-assets-{ACCOUNT}-{REGION}"
    assert not role.allows("s3:GetObject", f"{assets}/other-stack/abc.sh")
    assert not role.allows("s3:PutObject", f"{assets}/t-cluster/abc.sh")
    assert not role.allows("iam:AttachRolePolicy", NODE_ROLE,
                           {"iam:PolicyARN": f"arn:aws:iam::{ACCOUNT}:policy/AdministratorAccessOfMine"})


def test_the_cli_files_say_to_create_the_policies_where_parallelcluster_may_attach_them():
    sources = placeholder_names(PROMETHEUS)
    arns = [n for n in sources if n.endswith("_POLICY_ARN")]
    assert sorted(arns) == ["NEURON_METRICS_POLICY_ARN", "PROMETHEUS_POLICY_ARN", "SESSION_MANAGER_POLICY_ARN"]
    role = Statements(json.loads(UPSTREAM.read_text())["statements"], DEPLOYED)
    for name in arns:
        assert "aws iam create-policy --path /parallelcluster/" in sources[name], name
        # What that command creates: a policy under the path, whatever the user names it.
        arn = f"arn:aws:iam::{ACCOUNT}:policy/parallelcluster/my-{name.lower()}"
        assert role.allows("iam:AttachRolePolicy", NODE_ROLE, {"iam:PolicyARN": arn})
