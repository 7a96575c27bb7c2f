"""The development instance stack: one Neuron DLAMI instance reached with SSM Session Manager."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sns as sns
from constructs import Construct

from trainium_cdk.app.config import Config
from trainium_cdk.constructs.dev_instance import DevInstance
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.prometheus import MetricsWorkspace
from trainium_cdk.constructs.storage import LustreStorage
from trainium_cdk.facts.names import OUTPUT_INSTANCE_CONNECT_SSH, OUTPUT_INSTANCE_ID, OUTPUT_START_SESSION


class InstanceStack(Stack):
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
        super().__init__(scope, construct_id, description="trainium-cdk: Neuron development instance", **kwargs)
        # No alarm here: the instance's EC2 scheduled changes reach alarm_topic through the network stack's rule.
        del alarm_topic
        settings = config.instance
        mount = storage if settings.mount_storage else None
        self.dev = DevInstance(
            self,
            "Dev",
            vpc=network.vpc,
            spec=config.catalog.get(settings.instance_type, field="instance.instance_type"),
            vpc_subnets=ec2.SubnetSelection(
                # The config checked that the AZ is one of the VPC's and offers the type.
                subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[config.dev_instance_az_id()]
            ),
            dlami=settings.dlami,
            root_volume_gib=settings.root_volume_gib,
            instance_connect_endpoint=settings.instance_connect_endpoint,
            storage=mount,
            storage_client_group=network.efa_security_group if mount is not None else None,
            track=config.neuron_track,
            ami_id=settings.ami_id,
            metrics_workspace=metrics_workspace,
        )
        instance_id = self.dev.instance_id
        CfnOutput(self, OUTPUT_INSTANCE_ID, value=instance_id)
        CfnOutput(self, OUTPUT_START_SESSION, value=f"aws ssm start-session --region {config.region} --target {instance_id}")
        if self.dev.endpoint is not None:
            CfnOutput(
                self,
                OUTPUT_INSTANCE_CONNECT_SSH,
                value=f"aws ec2-instance-connect ssh --region {config.region} --instance-id {instance_id} "
                f"--connection-type eice --os-user {self.dev.os_user}",
            )
