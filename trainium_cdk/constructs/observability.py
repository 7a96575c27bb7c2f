"""ClusterObservability: node health and Neuron/EFA metrics of an EKS Trainium cluster, and its dashboard.

- ``eks-node-monitoring-agent``: reports Neuron hardware errors (SRAM/NC/HBM uncorrectable, DMA errors)
  as the node condition ``AcceleratedHardwareReady``; the Trainium node groups' node repair
  (``nodeRepairConfig``) replaces a node whose condition stays false.
- ``amazon-cloudwatch-observability`` (Container Insights with enhanced observability): Neuron metrics from
  add-on v1.5.0-eksbuild.1, EFA metrics from v1.5.2-eksbuild.1. Its agent authenticates with EKS Pod
  Identity (CloudWatchAgentServerPolicy's actions, its log actions scoped to the cluster's log groups).
- Alarms on Neuron hardware (ECC) events and on failed nodes, and a dashboard: NeuronCore utilization,
  NeuronCore memory, EFA bytes per node, FSx throughput.

Metric names and dimensions: the CloudWatch agent's Container Insights translator
(aws/amazon-cloudwatch-agent, ``getNeuronMetricDeclarations`` / ``getEFAMetricDeclarations``).

``NeuronNodeMetrics`` is the same for AWS Batch and ParallelCluster nodes, which have no Container
Insights: an alarm on Neuron hardware errors and a dashboard over what ``trainium_cdk/node/neuron_metrics.py``
publishes from neuron-monitor on every node (its namespace, metric names and dimensions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from constructs import Construct, IConstruct

from trainium_cdk.constructs.alerts import alarm_to
from trainium_cdk.constructs.nag import acknowledge, acknowledge_alarm_without_action, nag_form
from trainium_cdk.constructs.pod_identity import pod_identity_role
from trainium_cdk.facts import versions
from trainium_cdk.node.neuron_metrics import (
    CORE_UTILIZATION,
    DEPLOYMENT_DIMENSION,
    DEVICE_MEMORY,
    HARDWARE_ERRORS,
    INSTANCE_DIMENSION,
    NAMESPACE,
)

NODE_MONITORING_ADDON = "eks-node-monitoring-agent"
CLOUDWATCH_ADDON = "amazon-cloudwatch-observability"
# The add-on's agent: its namespace and service account (the Pod Identity association binds these).
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"
CLOUDWATCH_SERVICE_ACCOUNT = "cloudwatch-agent"
# The Container Insights agent's log groups (/aws/containerinsights/<cluster>/performance, application,
# host, dataplane) and the actions of CloudWatchAgentServerPolicy it needs, the log ones scoped to them.
AGENT_LOG_GROUPS = "/aws/containerinsights/{cluster}/"
AGENT_LOG_ACTIONS = (
    "logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams",
    "logs:PutRetentionPolicy",
)
AGENT_UNSCOPED_ACTIONS = ("cloudwatch:PutMetricData", "logs:DescribeLogGroups", "ec2:DescribeVolumes", "ec2:DescribeTags")
# Versions float with the cluster (as the other add-ons): EKS installs its default for Kubernetes 1.35,
# which is newer than the first with Neuron (v1.5.0) and EFA (v1.5.2) metrics.
CONTAINER_INSIGHTS = "ContainerInsights"
PERIOD = Duration.minutes(1)
# Any uncorrectable or corrected ECC event on a Neuron device is worth a look before a job fails.
NEURON_HW_ERRORS_METRIC = "node_neurondevice_hw_ecc_events_total"
FAILED_NODES_METRIC = "cluster_failed_node_count"
NEURONCORE_UTILIZATION_METRIC = "node_neuroncore_utilization"
NEURONCORE_MEMORY_METRIC = "node_neuroncore_memory_usage_total"
EFA_METRICS = ("node_efa_rx_bytes", "node_efa_tx_bytes")
FSX_METRICS = ("DataReadBytes", "DataWriteBytes")


class ClusterObservability(Construct):
    """Node health, Container Insights with Neuron and EFA metrics, alarms and a dashboard.

    :param cluster: the EKS cluster.
    :param cluster_name: its name as known at synth (metric dimension ``ClusterName``).
    :param after: what the add-ons with pods wait for (the system node group; the device plugins,
        without which the agent sees no Neuron or EFA device). Default: nothing.
    :param file_system_id: the FSx for Lustre file system whose throughput the dashboard shows. Default: none.
    :param alarm_topic: the SNS topic the alarms notify (``AlarmTopic``). Default: none (no alarm actions).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        cluster_name: str,
        after: Sequence[IConstruct] = (),
        file_system_id: str | None = None,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.node_monitoring = eks.Addon(self, "NodeMonitoringAgent", cluster=cluster, addon_name=NODE_MONITORING_ADDON,
                                         addon_version=versions.eks_addon_version(NODE_MONITORING_ADDON))
        self.agent_role, association = pod_identity_role(
            self, "CloudWatchAgent", cluster=cluster, namespace=CLOUDWATCH_NAMESPACE,
            service_account=CLOUDWATCH_SERVICE_ACCOUNT, description="CloudWatch agent of Container Insights (EKS pod identity)",
        )
        self._grant_agent(cluster_name)
        self.cloudwatch = eks.Addon(self, "CloudWatchObservability", cluster=cluster, addon_name=CLOUDWATCH_ADDON,
                                    addon_version=versions.eks_addon_version(CLOUDWATCH_ADDON))
        self.cloudwatch.node.add_dependency(association, *after)
        self.node_monitoring.node.add_dependency(*after)

        dimensions = {"ClusterName": cluster_name}
        self.hardware_errors = cw.Alarm(
            self, "NeuronHardwareErrors",
            alarm_description=f"{cluster_name}: a Neuron device reported ECC (hardware) events; the node monitoring "
            "agent marks such a node AcceleratedHardwareReady=False and node repair replaces it.",
            metric=cw.Metric(namespace=CONTAINER_INSIGHTS, metric_name=NEURON_HW_ERRORS_METRIC,
                             dimensions_map=dimensions, statistic="Sum", period=PERIOD),
            threshold=0, comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1, treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        self.failed_nodes = cw.Alarm(
            self, "FailedNodes",
            # Container Insights counts a node as failed when any node condition is bad: Ready, and the
            # node monitoring agent's AcceleratedHardwareReady (CloudWatch "Container Insights metrics
            # EKS", cluster_failed_node_count). This is the alarm on a Neuron device gone bad.
            alarm_description=f"{cluster_name}: nodes with a failing condition (not Ready, or AcceleratedHardwareReady="
            "False from the node monitoring agent); node repair replaces them after about 10 minutes.",
            metric=cw.Metric(namespace=CONTAINER_INSIGHTS, metric_name=FAILED_NODES_METRIC,
                             dimensions_map=dimensions, statistic="Maximum", period=PERIOD),
            threshold=0, comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=5, treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        if alarm_topic is not None:
            alarm_to(alarm_topic, self.hardware_errors)
            # A failed node stays failed until repaired: say so when it clears too.
            alarm_to(alarm_topic, self.failed_nodes, ok=True)
        self.dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=f"{cluster_name}-training")
        self.dashboard.add_widgets(*dashboard_widgets(cluster_name, file_system_id), cw.AlarmStatusWidget(
            title="Alarms", alarms=[self.hardware_errors, self.failed_nodes], width=24))
        if alarm_topic is None:
            for alarm in (self.hardware_errors, self.failed_nodes):
                acknowledge_alarm_without_action(alarm)



    def _grant_agent(self, cluster_name: str) -> None:
        """What the Container Insights agent does, as CloudWatchAgentServerPolicy grants it, scoped: its logs
        are this cluster's /aws/containerinsights/<cluster>/ groups (the managed policy's logs actions on *,
        PutRetentionPolicy among them, could shorten the EKS audit log's retention); metrics and EC2
        descriptions take no resource ARN; no X-Ray and no SSM parameters (the add-on configures the agent
        with a ConfigMap, and application signals are off)."""
        stack = Stack.of(self)
        groups = stack.format_arn(service="logs", resource="log-group", resource_name=f"{AGENT_LOG_GROUPS.format(cluster=cluster_name)}*",
                                  arn_format=ArnFormat.COLON_RESOURCE_NAME)
        self.agent_role.add_to_principal_policy(iam.PolicyStatement(
            actions=list(AGENT_LOG_ACTIONS), resources=[groups, f"{groups}:log-stream:*"],
        ))
        self.agent_role.add_to_principal_policy(iam.PolicyStatement(actions=list(AGENT_UNSCOPED_ACTIONS), resources=["*"]))
        acknowledge(
            self.agent_role, "AwsSolutions-IAM5", ["Resource::*", f"Resource::{nag_form(stack, groups)}",
                                                   f"Resource::{nag_form(stack, groups)}:log-stream:*"],
            "The agent writes the log groups and streams Container Insights names per cluster (created at run "
            "time, under this cluster's prefix); PutMetricData, DescribeLogGroups and EC2 descriptions take no "
            "resource ARN.",
        )

class NeuronNodeMetrics(Construct):
    """The Neuron metrics of AWS Batch or ParallelCluster nodes (published by neuron_metrics.py): an alarm on
    hardware errors and a dashboard (NeuronCore utilization, device memory, hardware errors per node, FSx).

    :param deployment: the ``Deployment`` dimension the nodes publish with (neuron_metrics.py ``--deployment``).
    :param dashboard_name: the dashboard's name. Default: ``<deployment>-training``.
    :param file_system_id: the FSx for Lustre file system whose throughput the dashboard shows. Default: none.
    :param alarm_topic: the SNS topic the alarm notifies (``AlarmTopic``). Default: none (no alarm action).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        deployment: str,
        dashboard_name: str | None = None,
        file_system_id: str | None = None,
        alarm_topic: sns.ITopic | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.deployment = deployment
        self.hardware_errors = cw.Alarm(
            self, "NeuronHardwareErrors",
            alarm_description=f"{deployment}: a Neuron device reported uncorrected ECC or hardware execution errors "
            "(neuron-monitor); drain or replace the node before the next job.",
            metric=cw.Metric(namespace=NAMESPACE, metric_name=HARDWARE_ERRORS,
                             dimensions_map={DEPLOYMENT_DIMENSION: deployment}, statistic="Sum", period=PERIOD),
            threshold=0, comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1, treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        if alarm_topic is not None:
            alarm_to(alarm_topic, self.hardware_errors)
        self.dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=dashboard_name or f"{deployment}-training")
        self.dashboard.add_widgets(*node_metrics_widgets(deployment, file_system_id), cw.AlarmStatusWidget(
            title="Alarms", alarms=[self.hardware_errors], width=24))
        if alarm_topic is None:
            acknowledge_alarm_without_action(self.hardware_errors)


def per_node_search(
    namespace: str, dimensions: Sequence[str], metric: str, filters: Mapping[str, str], statistic: str, label: str,
) -> cw.MathExpression:
    """One line per node: a search over the node-level dimension set of the metric."""
    where = "".join(f" {k}=\"{v}\"" for k, v in filters.items())
    return cw.MathExpression(
        expression=f"SEARCH('{{{','.join((namespace, *dimensions))}}} MetricName=\"{metric}\"{where}', "
        f"'{statistic}', 60)",
        label=label, period=PERIOD,
    )


def _per_node(cluster_name: str, metric: str, statistic: str, label: str) -> cw.MathExpression:
    return per_node_search(CONTAINER_INSIGHTS, ("ClusterName", "InstanceId", "NodeName"), metric,
                           {"ClusterName": cluster_name}, statistic, label)


def fsx_widget(file_system_id: str) -> cw.GraphWidget:
    return cw.GraphWidget(
        title="FSx for Lustre throughput (bytes per minute)", width=12,
        left=[cw.Metric(namespace="AWS/FSx", metric_name=m, dimensions_map={"FileSystemId": file_system_id},
                        statistic="Sum", period=PERIOD) for m in FSX_METRICS],
    )


def dashboard_widgets(cluster_name: str, file_system_id: str | None) -> list[cw.IWidget]:
    widgets: list[cw.IWidget] = [
        cw.GraphWidget(title="NeuronCore utilization (%) per node", width=12,
                       left=[_per_node(cluster_name, NEURONCORE_UTILIZATION_METRIC, "Average", "")]),
        cw.GraphWidget(title="NeuronCore memory used (bytes) per node", width=12,
                       left=[_per_node(cluster_name, NEURONCORE_MEMORY_METRIC, "Average", "")]),
        cw.GraphWidget(title="EFA bytes per node (rx, tx)", width=12,
                       left=[_per_node(cluster_name, m, "Sum", "") for m in EFA_METRICS]),
    ]
    if file_system_id is not None:
        widgets.append(fsx_widget(file_system_id))
    return widgets


def node_metrics_widgets(deployment: str, file_system_id: str | None) -> list[cw.IWidget]:
    """The widgets over neuron_metrics.py's metrics of one deployment (Batch or ParallelCluster nodes)."""
    def per_node(metric: str, statistic: str) -> cw.MathExpression:
        return per_node_search(NAMESPACE, (DEPLOYMENT_DIMENSION, INSTANCE_DIMENSION), metric,
                               {DEPLOYMENT_DIMENSION: deployment}, statistic, "")

    widgets: list[cw.IWidget] = [
        cw.GraphWidget(title="NeuronCore utilization (%) per node", width=12,
                       left=[per_node(CORE_UTILIZATION, "Average")]),
        cw.GraphWidget(title="Neuron device memory used (bytes) per node", width=12,
                       left=[per_node(DEVICE_MEMORY, "Average")]),
        cw.GraphWidget(title="Neuron hardware errors per node", width=12,
                       left=[per_node(HARDWARE_ERRORS, "Sum")]),
    ]
    if file_system_id is not None:
        widgets.append(fsx_widget(file_system_id))
    return widgets
