"""Every exported construct works twice in one stack (issue 48), as aws-cdk-lib's do: two of it under two ids, on the
same imported VPC, groups and cluster, synthesize under cdk-nag, and each resource of the first has its twin in the
second (nothing pinned to one logical id, nothing made once per stack behind the app's back).

Names that AWS keeps unique per account (a cluster's name, a repository's) are the app's to give: each construct
that takes one gets two."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import cdk8s
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from tests.support.helpers import add_nag_packs, config_with, new_outdir
from tests.unit.constructs.test_constructs_alone import CLUSTER_GROUP, ENV, STACK, TRN1, Imported
from trainium_cdk import (
    DEFAULT_CATALOG,
    BatchCpuQueue,
    BatchRoles,
    BatchTaskRules,
    ClusterAutoscaler,
    ClusterAutoscalerOptions,
    ClusterObservability,
    EfaLaunchTemplate,
    GroupNodes,
    KarpenterController,
    KarpenterOptions,
    LustreStorage,
    MetricsWorkspace,
    SlurmAccountingDatabase,
    SlurmCluster,
    TrainingImageRepository,
    TrainingNetwork,
    TrainingWorkloads,
    TrainingWorkloadsOptions,
    TrainiumBatch,
    TrainiumCluster,
    TrainiumNodeGroup,
)
from trainium_cdk.app.adapters.parallelcluster import cluster_settings
from trainium_cdk.constructs.api_access import ApiAccessHost
from trainium_cdk.constructs.dev_instance import DevInstance
from trainium_cdk.constructs.nag import NagAcknowledgments
from trainium_cdk.constructs.network import ComputePlacement


class Shared(Imported):
    """What both copies share: one import of each thing (an import is a construct of the stack too)."""

    @functools.cache  # noqa: B019 (one stack per instance, which lives as long as the test)
    def cluster(self, stack: cdk.Stack) -> Any:
        return super().cluster(stack)

    @functools.cache  # noqa: B019
    def cluster_of(self, stack: cdk.Stack, name: str) -> Any:
        """A cluster of its own for copy ``name``: what a cluster runs once (Karpenter, the Cluster Autoscaler: one
        Helm release each, added to the cluster as aws-cdk-lib's add_helm_chart does) goes in two clusters."""
        return eks.Cluster.from_cluster_attributes(
            stack, f"Cluster{name}", cluster_name=f"their-cluster-{name.lower()}",
            cluster_security_group_id=CLUSTER_GROUP, vpc=self.vpc,
            kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
                stack, f"Kubectl{name}", service_token=f"arn:aws:lambda:us-west-2:123456789012:function:k-{name}",
                role=iam.Role.from_role_arn(stack, f"KubectlRole{name}", "arn:aws:iam::123456789012:role/kubectl")),
        )

    @functools.cache  # noqa: B019
    def file_system(self, stack: cdk.Stack) -> Any:
        return super().file_system(stack)


def _slurm_settings() -> Any:
    return cluster_settings(config_with(backends=["parallelcluster"], compute_groups=[
        {"name": "pretrain", "instance_type": "trn1.32xlarge", "nodes": 2, "az_ids": "usw2-az4"}]))


# Each builds the construct under ``name`` (and, where AWS wants a name unique in the account, one made of it).
BUILDERS: dict[str, Callable[[cdk.Stack, Shared, str], Any]] = {
    "TrainingNetwork": lambda s, i, n: TrainingNetwork(
        s, n, az_ids=["usw2-az1", "usw2-az2"], compute_groups=[ComputePlacement(name="pretrain", az_ids=("usw2-az1",))]),
    "LustreStorage": lambda s, i, n: LustreStorage(s, n, vpc=i.vpc, subnet=i.subnet, clients=[i.efa_group]),
    "EfaLaunchTemplate": lambda s, i, n: EfaLaunchTemplate(
        s, n, spec=TRN1, security_groups=[i.efa_group], placement_group=None, root_volume_gib=100),
    "TrainiumCluster": lambda s, i, n: TrainiumCluster(
        s, n, vpc=i.vpc, subnets=i.vpc.private_subnets, system_nodes=1),
    "TrainiumNodeGroup": lambda s, i, n: TrainiumNodeGroup(
        s, n, cluster=i.cluster(s), group=GroupNodes(n.lower(), TRN1, max_nodes=4), subnets=[i.subnet],
        security_groups=[i.efa_group], placement_group=None),
    "KarpenterController": lambda s, i, n: KarpenterController(
        s, n, cluster=i.cluster_of(s, n), cluster_name=f"their-cluster-{n.lower()}",
        options=KarpenterOptions(node_selector={"role": "system"}), after=[]),
    "ClusterAutoscaler": lambda s, i, n: ClusterAutoscaler(
        s, n, cluster=i.cluster_of(s, n), cluster_name=f"their-cluster-{n.lower()}",
        options=ClusterAutoscalerOptions(node_selector={"role": "system"}), after=[]),
    "ClusterObservability": lambda s, i, n: ClusterObservability(
        s, n, cluster=i.cluster(s), cluster_name="their-cluster", file_system_id="fs-0123456789abcdef0"),
    "TrainingWorkloads": lambda s, i, n: TrainingWorkloads(
        s, n, cluster=i.cluster(s), options=TrainingWorkloadsOptions(data_loader_bucket="their-datasets")),
    "TrainiumBatch": lambda s, i, n: TrainiumBatch(
        s, n, group=GroupNodes(n.lower(), TRN1, max_nodes=2), vpc=i.vpc, subnets=[i.subnet],
        security_groups=[i.efa_group], storage=i.file_system(s)),
    "BatchCpuQueue": lambda s, i, n: BatchCpuQueue(
        s, n, vpc=i.vpc, subnets=[i.subnet], image_uri="public.ecr.aws/neuron/train:1", storage=i.file_system(s)),
    "BatchRoles": lambda s, i, n: BatchRoles(s, n),
    "MetricsWorkspace": lambda s, i, n: MetricsWorkspace(s, n, alias=f"their-metrics-{n.lower()}"),
    "BatchTaskRules": lambda s, i, n: BatchTaskRules(s, n, vpc=i.vpc, default_security_group_id="sg-0ddddddddddddddd1"),
    "TrainingImageRepository": lambda s, i, n: TrainingImageRepository(s, n, images_kept=10),
    "SlurmCluster": lambda s, i, n: SlurmCluster(
        s, n, cluster_name=f"their-slurm-{n.lower()}", settings=_slurm_settings(), head_node_subnet=i.subnet,
        compute_subnets={"pretrain": i.subnet}, security_group=i.efa_group),
    "SlurmAccountingDatabase": lambda s, i, n: SlurmAccountingDatabase(
        s, n, vpc=i.vpc, subnets=i.vpc.private_subnets, database_name=f"slurm_{n.lower()}"),
    "DevInstance": lambda s, i, n: DevInstance(
        s, n, vpc=i.vpc, spec=DEFAULT_CATALOG.get("trn1.2xlarge"), storage=i.file_system(s),
        storage_client_group=i.efa_group),
    "ApiAccessHost": lambda s, i, n: ApiAccessHost(
        s, n, vpc=i.vpc, subnets=i.vpc.private_subnets,
        api=ec2.SecurityGroup.from_security_group_id(s, f"{n}Api", CLUSTER_GROUP)),
}


def _types(template: dict[str, Any], exclude: set[str]) -> Counter[str]:
    return Counter(r["Type"] for k, r in template["Resources"].items() if k not in exclude)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_two_in_one_stack(name):
    build = BUILDERS[name]
    one_app = cdk.App(outdir=str(new_outdir()))
    one = cdk.Stack(one_app, STACK, env=ENV)
    build(one, Shared(one), "First")
    single = one_app.synth().get_stack_by_name(STACK).template

    app = cdk.App(outdir=str(new_outdir()))
    add_nag_packs(app)
    cdk.Aspects.of(app).add(NagAcknowledgments())
    stack = cdk.Stack(app, STACK, env=ENV)
    shared = Shared(stack)
    build(stack, shared, "First")
    build(stack, shared, "Second")
    double = app.synth().get_stack_by_name(STACK).template
    # Every resource of one copy twice, except what a stack has once whatever it holds (CDK's own singletons: a
    # provider framework, the custom resource that writes a bucket's notifications, ...), which the single stack has
    # once too.
    once = {k for k in single["Resources"] if k in double["Resources"] and "First" not in k}
    assert _types(double, once) == Counter({t: 2 * c for t, c in _types(single, once).items()}), name


def test_every_exported_construct_is_tried():
    from constructs import Construct

    import trainium_cdk

    exported = {n for n in trainium_cdk.__all__
                if isinstance(getattr(trainium_cdk, n), type) and issubclass(getattr(trainium_cdk, n), Construct)}
    charts = {n for n in exported if issubclass(getattr(trainium_cdk, n), cdk8s.Chart)}
    assert exported - charts == set(BUILDERS)
