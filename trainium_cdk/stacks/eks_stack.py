"""The EKS backend stack: the cluster, one Trainium node group per compute group, cluster software."""

from __future__ import annotations

import cdk8s
from aws_cdk import CfnOutput, Stack
from constructs import Construct

from trainium_cdk.charts import FSX_CHART_ID, NAMESPACE_CHART_ID, cluster_charts
from trainium_cdk.config import Config
from trainium_cdk.constructs.eks_cluster import TrainiumCluster
from trainium_cdk.constructs.eks_nodegroup import TrainiumNodeGroup
from trainium_cdk.constructs.eks_workloads import TrainingWorkloads
from trainium_cdk.stacks.eks_capacity import trainium_capacity
from trainium_cdk.stacks.eks_workloads import workloads_options
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.observability import ClusterObservability
from trainium_cdk.constructs.storage import LustreStorage
from trainium_cdk.dist import fsx_storage_props


class EksStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        network: TrainingNetwork,
        storage: LustreStorage | None,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, description="trainium-cdk: EKS cluster with Trainium node groups", **kwargs)
        self.training = TrainiumCluster(
            self, "Eks", vpc=network.vpc, subnets=network.private_subnets, settings=config.eks,
            cluster_name=config.stack_name("eks"),
        )
        cluster = self.training.cluster
        self.node_groups: dict[str, TrainiumNodeGroup] = {}
        self.capacity = trainium_capacity(self, config=config, network=network, training=self.training)
        if config.eks.capacity == "managed":
            self.node_groups = {
                group.name: TrainiumNodeGroup(
                    self,
                    f"NodeGroup-{group.name}",
                    cluster=cluster,
                    group=group,
                    spec=config.spec(group),
                    subnets=network.compute_subnets(group.name),
                    security_groups=[network.efa_security_group],
                    placement_group=network.placement_group(group.name),
                )
                for group in config.compute_groups
            }
        if storage is not None:
            # The data pods (loader, shell, TensorBoard) run on the system nodes, which carry only the
            # cluster security group: open Lustre to that group rather than pin them to Trainium nodes
            # (tainted, often scaled to zero, and too costly to hold a shell). Trainium nodes carry the
            # cluster group too, so every pod's node reaches the file system the same way.
            storage.allow_client(self, "LustreFromCluster", cluster.cluster_security_group)
        # The same charts `make synth` writes to dist/, here with the deployed ids as tokens.
        storage_props = (
            fsx_storage_props(
                config,
                subnet_id=network.compute_subnet(config.storage_group.name).subnet_id,
                security_group_id=storage.security_group.security_group_id,
                file_system_id=storage.file_system_id,
                dns_name=storage.dns_name,
                mount_name=storage.mount_name,
            )
            if storage is not None
            else None
        )
        self.charts = cluster_charts(
            cdk8s.App(),
            region=self.region,
            catalog=config.catalog,
            storage=storage_props,
            scheduler_extension=config.eks.neuron_scheduler_extension,
            monitor=config.eks.neuron_monitor,
        )
        self.manifests = {chart.node.id: cluster.add_cdk8s_chart(chart.node.id, chart) for chart in self.charts}
        namespace = self.manifests[NAMESPACE_CHART_ID]
        for chart_id, manifest in self.manifests.items():
            if chart_id != NAMESPACE_CHART_ID:
                manifest.node.add_dependency(namespace)
        self.workloads = TrainingWorkloads(
            self,
            "Workloads",
            cluster=cluster,
            options=workloads_options(config),
            after=[namespace, *([self.manifests[FSX_CHART_ID]] if FSX_CHART_ID in self.manifests else [])],
            nodes=self.training.system_nodes,
        )
        self.observability = ClusterObservability(
            self, "Observability", cluster=cluster, cluster_name=config.stack_name("eks"),
            after=[self.training.system_nodes, *self.manifests.values()],
            file_system_id=storage.file_system_id if storage is not None else None,
        )
        CfnOutput(self, "DashboardName", value=self.observability.dashboard.dashboard_name)
        CfnOutput(self, "ExampleImageUri", value=self.workloads.image.image_uri)
        CfnOutput(self, "TrainingImageRepositoryUri", value=self.workloads.repository.repository_uri)
        self.cluster_name_output = CfnOutput(self, "ClusterName", value=cluster.cluster_name)
        CfnOutput(
            self,
            "UpdateKubeconfig",
            value=f"aws eks update-kubeconfig --region {config.region} --name {cluster.cluster_name}",
        )
