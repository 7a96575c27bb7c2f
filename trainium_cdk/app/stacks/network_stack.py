"""The network stack: the training VPC, its EFA security group and placement groups, and the deployment's alarm
topic (the first stack of every deployment: the backends' alarms and rules name its topic)."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from trainium_cdk.app.config import Config
from trainium_cdk.constructs.alerts import (
    EC2_SCHEDULED_CHANGE,
    AlarmTopic,
    capacity_block_events,
    capacity_block_message,
    ec2_scheduled_change_message,
    notify,
)
from trainium_cdk.constructs.network import ComputePlacement, TrainingNetwork
from trainium_cdk.constructs.prometheus import MetricsWorkspace
from trainium_cdk.examples import BERT_DATASET_ARCHIVE, offers_bert_example
from trainium_cdk.facts.defaults.cdk import retention
from trainium_cdk.facts.names import (
    OUTPUT_ALARM_TOPIC_ARN,
    OUTPUT_COMPUTE_SUBNET,
    OUTPUT_EFA_SECURITY_GROUP_ID,
    OUTPUT_PROMETHEUS_REMOTE_WRITE_URL,
    OUTPUT_PROMETHEUS_WORKSPACE_ARN,
    OUTPUT_PROMETHEUS_WORKSPACE_ID,
    OUTPUT_VPC_ID,
    group_output,
)


class NetworkStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: Config, **kwargs) -> None:
        super().__init__(scope, construct_id, description="trainium-cdk: training VPC and EFA networking", **kwargs)
        network = config.network
        self.network = TrainingNetwork(
            self,
            "Network",
            az_ids=config.vpc_az_ids,
            compute_groups=[
                ComputePlacement(
                    name=group.name,
                    az_ids=tuple(group.az_ids),
                    placement_group=group.placement_group,
                    existing_placement_group=group.capacity.placement_group,
                )
                for group in config.compute_groups
            ],
            cidr=network.cidr,
            public_subnet_mask=network.public_subnet_mask,
            private_subnet_mask=network.private_subnet_mask,
            nat_gateways=1 if network.nat_gateways == "one" else len(config.vpc_az_ids),
            interface_endpoints=network.interface_endpoints,
            flow_log_retention=retention(network.flow_log_retention_days),
            s3_buckets=endpoint_buckets(config),
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
        # The config's Capacity Blocks: their start and their expiration warning, mailed (issue 47).
        blocks = [g.capacity.reservation_id for g in config.compute_groups
                  if g.capacity.is_capacity_block and g.capacity.reservation_id]
        self.capacity_blocks = notify(
            self, "CapacityBlockEvents", topic=self.alerts.topic, pattern=capacity_block_events(blocks),
            message=capacity_block_message(),
            description="EC2 Capacity Blocks of this deployment: delivered, and 40 minutes before their end",
        ) if blocks else None
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


def endpoint_buckets(config: Config) -> list[str]:
    """The buckets the config names, which the S3 gateway endpoint must reach even in another account: the data
    repository's, the data loader's, the BERT-large example's dataset (Neuron's) and ``network.s3_buckets``."""
    named = list(config.network.s3_buckets)
    repository = config.storage.data_repository if config.storage.enabled else None
    if repository is not None and repository.bucket_name:
        named.append(repository.bucket_name)
    if config.workloads.data_loader is not None:
        named.append(config.workloads.data_loader.bucket)
    if offers_bert_example(config):
        named.append(BERT_DATASET_ARCHIVE.removeprefix("s3://").split("/", 1)[0])
    return sorted(set(named))
