"""BatchTaskRules: the rules AWS Batch multi-node tasks depend on, owned in the template.

Multi-node parallel jobs run in awsvpc mode: every task gets its own interface, with the compute
environment's security groups. A compute environment whose launch template defines network
interfaces (EFA) may list none ("Either compute environment Security Groups or Network Interfaces in
Launch template are exclusively allowed"), so Batch gives task interfaces the VPC's default group.
torchrun's rendezvous and the Neuron runtime's bootstrap run over those interfaces (CCOM_SOCKET_IFNAME
eth0). AWS's rules of the default group (all in from the group, all out) are revoked by the training VPC
(network.py, ``restrict_default_security_group``): these rules are all the tasks get, in the template,
where drift detection and the tests see them. They are TCP only, so on a VPC that keeps AWS's all-traffic
rules (an imported one) they never collide with them. EFA traffic, image pulls, logs and the /fsx mount
use the node's own interfaces, not the task's.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from trainium_cdk.errors import ConfigError, names_construct_path

HTTPS_PORT = 443


class BatchTaskRules(Construct):
    """TCP between task interfaces of the VPC's default group, and HTTPS out (AWS APIs, S3, images).

    Create one per VPC: EC2 rejects a duplicate rule.

    :param vpc: the training VPC.
    :param default_security_group_id: the id of the VPC's default security group. Default: the VPC's own
        (``Vpc.vpc_default_security_group``), which a VPC made in the app has and an imported one
        (``Vpc.from_vpc_attributes``, ``Vpc.from_lookup``) does not: give it then.
    """

    @names_construct_path
    def __init__(
        self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc, default_security_group_id: str | None = None
    ) -> None:
        super().__init__(scope, construct_id)
        if default_security_group_id is None:
            if not isinstance(vpc, ec2.Vpc):
                raise ConfigError(
                    "default_security_group_id", None,
                    "the sg-... id of the VPC's default security group (an imported VPC does not carry it)",
                )
            default_security_group_id = vpc.vpc_default_security_group
        self.group_id = default_security_group_id
        ec2.CfnSecurityGroupIngress(
            self, "TasksFromTasks", group_id=self.group_id, source_security_group_id=self.group_id,
            description="Batch tasks: torchrun rendezvous and Neuron bootstrap from other tasks",
            ip_protocol="tcp", from_port=0, to_port=65535,
        )
        ec2.CfnSecurityGroupEgress(
            self, "TasksToTasks", group_id=self.group_id, destination_security_group_id=self.group_id,
            description="Batch tasks: torchrun rendezvous and Neuron bootstrap to other tasks",
            ip_protocol="tcp", from_port=0, to_port=65535,
        )
        ec2.CfnSecurityGroupEgress(
            self, "TasksToHttps", group_id=self.group_id, cidr_ip="0.0.0.0/0", ip_protocol="tcp",
            from_port=HTTPS_PORT, to_port=HTTPS_PORT, description="Batch tasks: AWS APIs and S3",
        )
