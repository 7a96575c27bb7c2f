"""An EKS cluster made elsewhere, as the Trainium constructs take it (``TrainiumCluster.from_cluster_attributes``).

A platform team's cluster (eksctl, Terraform, another CDK app) gets Trainium node groups, Karpenter and the
training workloads without this library owning its control plane: the node constructs read the cluster's name
and its cluster security group, and what goes through the Kubernetes API (device plugins, Helm charts) needs the
cluster's kubectl provider.
"""

from __future__ import annotations

import re
from typing import Protocol

import cdk8s
import jsii
from aws_cdk import Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from trainium_cdk.charts import NAMESPACE_CHART_ID, cluster_charts
from trainium_cdk.errors import ConfigError, names_construct_path
from trainium_cdk.facts.catalog import DEFAULT_CATALOG, Catalog

# EKS's CreateCluster: "The name can contain only alphanumeric characters (case-sensitive), hyphens, and
# underscores. It must start with an alphanumeric character and can't be longer than 100 characters."
CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")
SECURITY_GROUP_ID = re.compile(r"^sg-[0-9a-f]{8,17}$")


class ITrainiumCluster(Protocol):
    """An EKS cluster as the node and workload constructs take it: ``cluster_ref`` (``eks.ICluster``:
    TrainiumNodeGroup, KarpenterController, ClusterAutoscaler, TrainingWorkloads), ``cluster_name`` (a literal,
    for Karpenter), ``cni_association`` and ``volcano`` (None when the cluster's are not this app's), and
    ``connections`` (the cluster security group on every node). :class:`TrainiumCluster` is one; so is what
    :meth:`TrainiumCluster.from_cluster_attributes` returns."""

    @property
    def cluster_ref(self) -> eks.ICluster: ...

    @property
    def cluster_name(self) -> str: ...

    @property
    def cni_association(self) -> IConstruct | None: ...

    @property
    def volcano(self) -> eks.HelmChart | None: ...

    @property
    def connections(self) -> ec2.Connections: ...


@jsii.implements(ec2.IConnectable)
class ImportedTrainiumCluster(Construct):
    """What :meth:`TrainiumCluster.from_cluster_attributes` returns; its props are that method's."""

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        cluster_security_group_id: str,
        vpc: ec2.IVpc,
        kubectl_provider: eks.IKubectlProvider | None = None,
        device_plugins: bool = False,
        catalog: Catalog = DEFAULT_CATALOG,
    ) -> None:
        super().__init__(scope, construct_id)
        if Token.is_unresolved(cluster_name) or not CLUSTER_NAME.match(cluster_name):
            raise ConfigError("cluster_name", cluster_name, "the cluster's name, a literal (Karpenter's IAM conditions "
                              "and queue name use it at synth): letters, digits, '-' and '_', at most 100")
        group_id = cluster_security_group_id
        if not Token.is_unresolved(group_id) and not SECURITY_GROUP_ID.match(group_id):
            raise ConfigError("cluster_security_group_id", cluster_security_group_id, "the cluster security group "
                              "(aws eks describe-cluster --query cluster.resourcesVpcConfig.clusterSecurityGroupId): "
                              "node launch templates name it, or nodes cannot reach the control plane")
        if kubectl_provider is not None and kubectl_provider.role is None:
            # aws-eks-v2's HelmChart grants the provider's role read on the chart's asset: without a role it fails
            # with "Cannot read properties of undefined (reading 'grantPrincipal')" (Karpenter's charts are assets).
            raise ConfigError("kubectl_provider", kubectl_provider.service_token, "a provider imported with its role "
                              "(eks.KubectlProvider.from_kubectl_provider_attributes(..., role=...)): Helm charts "
                              "from assets are granted to it")
        if device_plugins and kubectl_provider is None:
            raise ConfigError("kubectl_provider", None, "the cluster's kubectl provider "
                              "(eks.KubectlProvider.from_kubectl_provider_attributes) with device_plugins=True: "
                              "manifests go through it")
        self._cluster_name = cluster_name
        self._cluster = eks.Cluster.from_cluster_attributes(
            self, "Cluster", cluster_name=cluster_name, cluster_security_group_id=cluster_security_group_id,
            vpc=vpc, kubectl_provider=kubectl_provider,
        )
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        if device_plugins:
            # The training namespace and the Neuron and EFA device plugins, as TrainiumCluster installs them.
            charts = cluster_charts(cdk8s.App(), region=Stack.of(self).region, catalog=catalog)
            for chart in charts:
                manifest = self._cluster.add_cdk8s_chart(chart.node.id, chart)
                if chart.node.id != NAMESPACE_CHART_ID:
                    manifest.node.add_dependency(self.manifests[NAMESPACE_CHART_ID])
                self.manifests[chart.node.id] = manifest

    @property
    def cluster(self) -> eks.ICluster:
        """The imported cluster (aws-eks-v2's ``ICluster``), as ``cluster_ref``."""
        return self._cluster

    @property
    def cluster_ref(self) -> eks.ICluster:
        return self._cluster

    @property
    def cluster_name(self) -> str:
        return self._cluster_name

    @property
    def cni_association(self) -> IConstruct | None:
        """None: the cluster's VPC CNI is not this app's; node roles keep the CNI policy."""
        return None

    @property
    def volcano(self) -> eks.HelmChart | None:
        """None: Volcano, if the cluster has it, is not this app's."""
        return None

    @property
    def connections(self) -> ec2.Connections:
        """The cluster security group (every node carries it), as aws-eks-v2's imported cluster gives it."""
        return self._cluster.connections

