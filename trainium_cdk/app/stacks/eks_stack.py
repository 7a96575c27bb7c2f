"""The EKS backend stack: the cluster, one Trainium node group per compute group, cluster software."""

from __future__ import annotations

import cdk8s
from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from trainium_cdk.app.adapters import eks as adapter
from trainium_cdk.app.config import Config
from trainium_cdk.app.stacks.eks_capacity import trainium_capacity
from trainium_cdk.charts import FSX_CHART_ID
from trainium_cdk.charts._k8s import KUBE_SYSTEM
from trainium_cdk.charts.metrics_exporters import scrape_configuration
from trainium_cdk.charts.node_health import NAME as NODE_HEALTH_NAME
from trainium_cdk.charts.node_health import NODE_HEALTH_CHART_ID, NodeHealthCheck
from trainium_cdk.constructs.alerts import SERVICE_ACCOUNT_USERNAME, KarpenterInterruptions
from trainium_cdk.constructs.api_access import ApiAccessHost
from trainium_cdk.constructs.eks_cluster import TrainiumCluster
from trainium_cdk.constructs.eks_nodegroup import TrainiumNodeGroup
from trainium_cdk.constructs.eks_workloads import TrainingWorkloads
from trainium_cdk.constructs.karpenter import KARPENTER_NAMESPACE, KARPENTER_SERVICE_ACCOUNT, KarpenterController
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.observability import ClusterObservability
from trainium_cdk.constructs.prometheus import ClusterScraper, MetricsWorkspace
from trainium_cdk.constructs.storage import LustreStorage
from trainium_cdk.facts.defaults.cdk import retention
from trainium_cdk.facts.names import (
    OUTPUT_ACCESS_HOST_ID,
    OUTPUT_BERT_IMAGE_URI,
    OUTPUT_CLUSTER_NAME,
    OUTPUT_CONNECT_POLICY_ARN,
    OUTPUT_DASHBOARD_NAME,
    OUTPUT_EXAMPLE_IMAGE_URI,
    OUTPUT_TRAINING_IMAGE_REPOSITORY_URI,
    OUTPUT_UPDATE_KUBECONFIG,
    TRAINING_NAMESPACE,
)
from trainium_cdk.runtime import eks_user_data


class EksStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        network: TrainingNetwork,
        storage: LustreStorage | None,
        alarm_topic: sns.ITopic,
        metrics_workspace: MetricsWorkspace | None = None,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, description="trainium-cdk: EKS cluster with Trainium node groups", **kwargs)
        eks = config.eks
        self.training = TrainiumCluster(
            self,
            "Eks",
            vpc=network.vpc,
            subnets=network.private_subnets,
            cluster_name=adapter.cluster_name(config),
            public_access_cidrs=eks.public_access_cidrs if eks.endpoint_access == "public-and-private" else (),
            admin_role_arns=eks.admin_role_arns,
            creator_admin=eks.creator_admin,
            system_instance_type=ec2.InstanceType(eks.system_instance_type),
            system_nodes=eks.system_nodes,
            log_retention=retention(eks.log_retention_days),
            catalog=config.catalog,
            neuron_scheduler_extension=eks.neuron_scheduler_extension,
            neuron_monitor=eks.neuron_monitor,
            metrics_exporters=metrics_workspace is not None,
            volcano=config.workloads.volcano,
            # The system nodes on the Trainium nodes' EKS AMI release: one release per cluster, the track's.
            system_release_version=config.neuron_track.eks_nodegroup_release_version,
        )
        cluster = self.training.cluster_ref
        self.access_host: ApiAccessHost | None = None
        if config.eks.access_host_deployed:
            self.access_host = ApiAccessHost(self, "AccessHost", vpc=network.vpc, subnets=network.private_subnets,
                                             api=self.training.api_security_group,
                                             ssm_endpoints=network.session_manager_endpoints)
            # What `trn connect` reads besides the session: this stack's outputs, the cluster, its access entries.
            self.access_host.connect_policy.add_statements(
                iam.PolicyStatement(sid="ReadTheStack", actions=["cloudformation:DescribeStacks"],
                                    resources=[self.stack_id]),
                iam.PolicyStatement(sid="ReadTheCluster", actions=["eks:DescribeCluster", "eks:ListAccessEntries"],
                                    resources=[cluster.cluster_arn]),
            )
        self.node_groups: dict[str, TrainiumNodeGroup] = {}
        self.capacity = trainium_capacity(self, config=config, network=network, training=self.training,
                                          storage=storage)
        if config.eks.capacity == "managed":
            for group in config.compute_groups:
                self.node_groups[group.name] = TrainiumNodeGroup(
                    self,
                    f"NodeGroup-{group.name}",
                    cluster=cluster,
                    subnets=network.compute_subnets(group.name),
                    security_groups=[network.efa_security_group],
                    placement_group=network.placement_group(group.name),
                    cni_association=self.training.cni_association,
                    group=config.group_nodes(group),
                    min_nodes=group.min_nodes,
                    release_version=config.neuron_track.eks_nodegroup_release_version,
                    user_data=adapter.node_user_data(config, group, storage),
                    root_volume_throughput=eks_user_data.root_volume_throughput(fast_image_pull=eks.fast_image_pull),
                )
        # Every Trainium node joins with the health taint; this checker takes it off (charts/node_health.py).
        self.node_health = cluster.add_cdk8s_chart(NODE_HEALTH_CHART_ID, NodeHealthCheck(
            cdk8s.App(), NODE_HEALTH_CHART_ID, groups=adapter.node_health_props(config),
            probe_image=adapter.node_health_probe_image(config)))
        if storage is not None:
            # The data pods (loader, shell, TensorBoard) run on the system nodes, which carry only the
            # cluster security group: Lustre opens to that group rather than pin them to Trainium nodes
            # (tainted, often scaled to zero, and too costly to hold a shell). Trainium nodes carry the
            # cluster group too, so every pod's node reaches the file system the same way.
            self.training.add_lustre_storage(storage, subnet=network.compute_subnet(config.storage_group.name))
        self.manifests = self.training.manifests
        namespace = self.training.namespace
        self.workloads = TrainingWorkloads(
            self,
            "Workloads",
            cluster=cluster,
            options=adapter.workloads_options(config),
            after=[namespace, *([self.manifests[FSX_CHART_ID]] if FSX_CHART_ID in self.manifests else [])],
            volcano=self.training.volcano,
        )
        self.workloads.add_charts(adapter.workloads(config, image=self.workloads.image_uri))
        self.observability = ClusterObservability(
            self, "Observability", cluster=cluster, cluster_name=adapter.cluster_name(config),
            after=[self.training.system_nodes, *self.manifests.values()],
            file_system_id=storage.file_system_id if storage is not None else None, alarm_topic=alarm_topic,
        )
        self.scraper: ClusterScraper | None = None
        if metrics_workspace is not None:
            # The managed collector reaches the exporters' pods on the Trainium nodes, which carry the cluster
            # security group (all traffic from itself), from ENIs in the cluster's subnets.
            self.scraper = ClusterScraper(
                self, "MetricsScraper", cluster=cluster, subnets=network.private_subnets,
                security_group=self.training.cluster.cluster_security_group, workspace=metrics_workspace,
                scrape_configuration=scrape_configuration(adapter.cluster_name(config)),
            )
            self.scraper.node.add_dependency(*self.manifests.values())
        self.interruptions: KarpenterInterruptions | None = None
        if config.eks.capacity == "karpenter":
            self.interruptions = KarpenterInterruptions(
                self, "KarpenterInterruptions", audit_log=self.training.control_plane_logs,
                cluster_name=adapter.cluster_name(config), topic=alarm_topic, training_namespace=TRAINING_NAMESPACE,
                username=SERVICE_ACCOUNT_USERNAME.format(namespace=KARPENTER_NAMESPACE,
                                                         service_account=KARPENTER_SERVICE_ACCOUNT),
                # The checker runs in the chart's default namespace (the stack adds the chart with it).
                health_checker=SERVICE_ACCOUNT_USERNAME.format(namespace=KUBE_SYSTEM, service_account=NODE_HEALTH_NAME),
            )
        if config.eks.prepull_images:
            self._prepull(config, [self.workloads.image_uri,
                                   *([self.workloads.bert_image.image_uri] if self.workloads.bert_image else [])])
        CfnOutput(self, OUTPUT_DASHBOARD_NAME, value=self.observability.dashboard.dashboard_name)
        CfnOutput(self, OUTPUT_EXAMPLE_IMAGE_URI, value=self.workloads.image_uri)
        if self.workloads.bert_image is not None:
            CfnOutput(self, OUTPUT_BERT_IMAGE_URI, value=self.workloads.bert_image.image_uri)
        CfnOutput(self, OUTPUT_TRAINING_IMAGE_REPOSITORY_URI, value=self.workloads.repository.repository_uri)
        self.cluster_name_output = CfnOutput(self, OUTPUT_CLUSTER_NAME, value=cluster.cluster_name)
        if self.access_host is not None:
            CfnOutput(self, OUTPUT_ACCESS_HOST_ID, value=self.access_host.instance_id,
                      description="`trn connect` forwards the private API endpoint through this instance (SSM)")
            CfnOutput(self, OUTPUT_CONNECT_POLICY_ARN, value=self.access_host.connect_policy.managed_policy_arn,
                      description="grant it to whoever runs `trn connect`: port forwarding to the access host only")
        CfnOutput(
            self,
            OUTPUT_UPDATE_KUBECONFIG,
            value=f"aws eks update-kubeconfig --region {config.region} --name {cluster.cluster_name}",
        )

    def _prepull(self, config: Config, own_images: list[str]) -> None:
        """The list of images Trainium nodes pull at boot (node/prepull_images.sh), as an SSM parameter their
        roles may read: the nodes' user data names only the parameter, so a new image or Neuron pin updates it
        in place and rolls no node; the example images, CDK assets known only at deploy, can be in it."""
        images = ssm.StringParameter(
            self, "PrepullImages", parameter_name=adapter.prepull_parameter(config),
            string_value=" ".join(dict.fromkeys([*adapter.prepull_images(config), *own_images])),
            description="trainium-cdk: the images Trainium nodes start pulling at boot, separated by spaces",
        )
        roles: list[iam.IRole] = [group.nodegroup.role for group in self.node_groups.values()]
        if isinstance(self.capacity, KarpenterController):
            roles.append(self.capacity.node_role)
        for role in roles:
            images.grant_read(role)
