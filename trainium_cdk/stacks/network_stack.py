"""The network stack: the training VPC, its EFA security group and placement groups, and the deployment's alarm
topic (the first stack of every deployment: the backends' alarms and rules name its topic)."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from trainium_cdk.config import Config
from trainium_cdk.constructs.alerts import EC2_SCHEDULED_CHANGE, AlarmTopic, ec2_scheduled_change_message, notify
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.prometheus import MetricsWorkspace
from trainium_cdk.adapters.network import network_props
from trainium_cdk.names import (
    OUTPUT_ALARM_TOPIC_ARN, OUTPUT_PROMETHEUS_REMOTE_WRITE_URL, OUTPUT_PROMETHEUS_WORKSPACE_ARN,
    OUTPUT_PROMETHEUS_WORKSPACE_ID, OUTPUT_COMPUTE_SUBNET, OUTPUT_EFA_SECURITY_GROUP_ID, OUTPUT_VPC_ID, group_output,
)


class NetworkStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: Config, **kwargs) -> None:
        super().__init__(scope, construct_id, description="trainium-cdk: training VPC and EFA networking", **kwargs)
        props = network_props(config)
        self.network = TrainingNetwork(
            self,
            "Network",
            az_ids=props.az_ids,
            compute_groups=props.compute_groups,
            cidr=props.cidr,
            public_subnet_mask=props.public_subnet_mask,
            private_subnet_mask=props.private_subnet_mask,
            nat_gateways=props.nat_gateways,
            interface_endpoints=props.interface_endpoints,
            flow_log_retention=props.flow_log_retention,
            s3_buckets=props.s3_buckets,
        )
        self.vpc_output = CfnOutput(self, OUTPUT_VPC_ID, value=self.network.vpc.vpc_id)
        CfnOutput(self, OUTPUT_EFA_SECURITY_GROUP_ID, value=self.network.efa_security_group.security_group_id)
        for group in config.compute_groups:
            CfnOutput(
                self, group_output(OUTPUT_COMPUTE_SUBNET, group.name), value=self.network.compute_subnet(group.name).subnet_id
            )
        # One topic per deployment, here because every deployment has this stack and deploys it first.
        # The stacks whose alarms and rules may publish: composition.py admits them once they exist.
        self.alerts = AlarmTopic(self, "Alerts", topic_arn=config.notifications.topic_arn, email=config.notifications.email)
        # Once per deployment, whatever its backends: every one runs on EC2 instances.
        self.scheduled_changes = notify(
            self, "Ec2ScheduledChanges", topic=self.alerts.topic, pattern=EC2_SCHEDULED_CHANGE,
            message=ec2_scheduled_change_message(),
            description="AWS Health: EC2 scheduled changes (maintenance, retirement, reboot, stop) to the alarm topic",
        )
        CfnOutput(self, OUTPUT_ALARM_TOPIC_ARN, value=self.alerts.topic.topic_arn,
                  description="Alarms and events of this deployment: `aws sns subscribe --topic-arn ... --protocol email`")
        # One metrics workspace per deployment, here for the same reason: every backend writes into it.
        self.metrics: MetricsWorkspace | None = None
        if config.observability.prometheus:
            self.metrics = MetricsWorkspace(self, "Metrics", alias=config.project)
            CfnOutput(self, OUTPUT_PROMETHEUS_WORKSPACE_ID, value=self.metrics.workspace.attr_workspace_id,
                      description="The Amazon Managed Service for Prometheus workspace: a Grafana data source "
                      "(trainium_cdk/dashboards/*.json)")
            # What a pcluster CLI user fills into dist/parallelcluster/ (its cluster YAML and remote-write policy).
            CfnOutput(self, OUTPUT_PROMETHEUS_WORKSPACE_ARN, value=self.metrics.workspace_arn)
            CfnOutput(self, OUTPUT_PROMETHEUS_REMOTE_WRITE_URL, value=self.metrics.remote_write_url)
