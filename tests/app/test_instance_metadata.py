"""Every machine the stacks launch answers the instance metadata service with IMDSv2 to one hop only: a
container (one hop further) cannot take the node's role, whatever it runs as.

Walked over the apps of every backend and instance type (tests/support/apps.py): each EC2 launch template and
instance, each EKS managed node group and Batch compute environment (both must name one of those launch
templates: EKS's own allows two hops), each Karpenter EC2NodeClass. ParallelCluster builds its own launch
templates from the cluster configuration: there, the head node's IMDS is secured (root and the cluster's
admin user only) and compute nodes take IMDSv2 only.

Then who gets past that (tests/support/metadata_model.py): no job container on any backend; the jobs of ParallelCluster and
the development instance, which are processes on the host, reach the host's role by design.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.apps import VARIANTS, synthesized
from tests.support.helpers import helm_chart_name, resources
from tests.support.metadata_model import reaching_metadata
from tests.support.reachability import Reachability
from trainium_cdk.app.dist.parallelcluster import fetched_digests
from trainium_cdk.app.parallelcluster.cluster_config import cluster_configuration, placeholder_ids


def _templates(name: str) -> dict[str, dict[str, Any]]:
    result = synthesized(name)
    return {path.name: json.loads(path.read_text()) for path in result.template_paths()}


def _logical_id(reference: Any) -> str:
    assert set(reference) == {"Ref"}, f"a launch template of this stack, not {reference}"
    return reference["Ref"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_node_and_instance_takes_imdsv2_to_one_hop(variant):
    checked: dict[str, int] = {}
    for name, template in _templates(variant).items():
        templates = resources(template, "AWS::EC2::LaunchTemplate")
        for logical_id, resource in templates.items():
            options = resource["Properties"]["LaunchTemplateData"].get("MetadataOptions", {})
            assert options.get("HttpTokens") == "required", (name, logical_id)
            assert options.get("HttpPutResponseHopLimit") == 1, (name, logical_id, options)
        for logical_id, resource in resources(template, "AWS::EC2::Instance").items():
            properties = resource["Properties"]
            if "LaunchTemplate" in properties:
                assert _logical_id(properties["LaunchTemplate"]["LaunchTemplateId"]) in templates, (name, logical_id)
            else:
                options = properties.get("MetadataOptions", {})
                assert (options.get("HttpTokens"), options.get("HttpPutResponseHopLimit")) == ("required", 1), logical_id
        for logical_id, resource in resources(template, "AWS::EKS::Nodegroup").items():
            launch_template = resource["Properties"].get("LaunchTemplate")
            assert launch_template, f"{name} {logical_id}: without a launch template EKS allows two hops"
            assert _logical_id(launch_template["Id"]) in templates, (name, logical_id)
        for logical_id, resource in resources(template, "AWS::Batch::ComputeEnvironment").items():
            launch_template = resource["Properties"]["ComputeResources"]["LaunchTemplate"]
            assert _logical_id(launch_template["LaunchTemplateId"]) in templates, (name, logical_id)
        for kind in ("AWS::EC2::LaunchTemplate", "AWS::EC2::Instance", "AWS::EKS::Nodegroup", "AWS::Batch::ComputeEnvironment"):
            checked[kind] = checked.get(kind, 0) + len(resources(template, kind))
    result = synthesized(variant)
    classes = [o for _, objs in Reachability.from_dir(result.outdir).manifests() for o in objs if o.get("kind") == "EC2NodeClass"]
    for node_class in classes:
        options = node_class["spec"]["metadataOptions"]
        assert (options["httpTokens"], options["httpPutResponseHopLimit"]) == ("required", 1), node_class["metadata"]
    backends = set(result.config.backends)
    # Each backend's machines were seen (the walk is not vacuous).
    assert checked["AWS::EKS::Nodegroup"] >= ("eks" in backends), checked
    assert checked["AWS::Batch::ComputeEnvironment"] >= len(result.config.compute_groups) * ("batch" in backends), checked
    assert checked["AWS::EC2::Instance"] >= ("instance" in backends), checked
    if "eks" in backends and result.config.eks.capacity == "karpenter":
        assert len(classes) == len(result.config.compute_groups)
    if "parallelcluster" in backends:
        configuration = cluster_configuration(result.config, placeholder_ids(result.config, fetched_digests(result.config)))
        assert configuration["HeadNode"]["Imds"] == {"Secured": True}
        assert configuration["Imds"] == {"ImdsSupport": "v2.0"}


def _chart_values(template: dict[str, Any], chart: str) -> Any:
    """A Helm chart's values as the stack passes them: JSON text, or an Fn::Join of it and deploy-time values."""
    (values,) = [c["Properties"]["Values"] for c in resources(template, "Custom::AWSCDK-EKS-HelmChart").values()
                 if helm_chart_name(c["Properties"]) == chart]
    if isinstance(values, str):
        return json.loads(values)
    parts = values["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "deploy-time" for p in parts))  # inside JSON strings


@pytest.mark.parametrize("variant", ["trn1.32xlarge", "trn1n.32xlarge+trn1.2xlarge"])
def test_system_controllers_in_the_pod_network_know_their_region_without_the_metadata_service(variant):
    """Karpenter exits at start when it can neither read AWS_REGION nor ask the metadata service; the Cluster
    Autoscaler never asks it. Both run in the pod network of system nodes that answer one hop only. (The FSx
    CSI controller falls back to its node's providerID; the CloudWatch agent and the node agents use the host
    network.)"""
    result = synthesized(variant)
    template = result.template_json("eks")
    region = result.config.region
    if result.config.eks.capacity == "karpenter":
        values = _chart_values(template, "karpenter")
        assert values.get("hostNetwork", False) is False
        assert {"name": "AWS_REGION", "value": region} in values["controller"]["env"]
    else:
        assert _chart_values(template, "cluster-autoscaler")["awsRegion"] == region


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_no_job_container_reaches_the_instance_metadata_on_any_backend(variant, tmp_path):
    """EKS job pods (none in the host network, nodes at one hop) and Batch jobs (every job definition multi-node
    parallel, in awsvpc with ECS_AWSVPC_BLOCK_IMDS: a one-node trn1.2xlarge job included) cannot take the node's
    role."""
    reaching = [str(r) for r in reaching_metadata(synthesized(variant), tmp_path) if r.container]
    assert reaching == []


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_jobs_that_are_host_processes_reach_their_hosts_role_as_documented(variant, tmp_path):
    """A Slurm job is the user's processes on the compute node and reaches its instance role (the README's security
    section says so: it is the jobs' role, for S3 and the like); the development instance's role is the developer's.
    Nothing else."""
    result = synthesized(variant)
    processes = {(r.backend, r.what) for r in reaching_metadata(result, tmp_path) if not r.container}
    backends = set(result.config.backends)
    expected = {("parallelcluster", f"jobs of queue {g.name}") for g in result.config.compute_groups
                if "parallelcluster" in backends}
    expected |= {("instance", "the developer's processes")} if "instance" in backends else set()
    assert processes == expected
