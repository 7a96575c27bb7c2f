"""The network stack: the training VPC, its EFA security group and placement groups."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from trainium_cdk.config import Config
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.adapters.network import network_props
from trainium_cdk.names import OUTPUT_COMPUTE_SUBNET, OUTPUT_EFA_SECURITY_GROUP_ID, OUTPUT_VPC_ID, group_output


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
