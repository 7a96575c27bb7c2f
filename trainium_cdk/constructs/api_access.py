"""ApiAccessHost: the way in to a private EKS API endpoint, from a workstation, with no inbound rule.

A private endpoint answers only inside the VPC. This small instance sits in a private subnet, reached by
SSM Session Manager (the agent dials out; nothing dials in), and may open only HTTPS to the control
plane. `trn connect` starts Session Manager's port forwarding to the endpoint through it
(``AWS-StartPortForwardingSessionToRemoteHost``) and writes the kubeconfig for the forwarded port. It
holds no credentials of its own: kubectl's requests carry the user's IAM identity, checked by the
cluster's access entries, as they would from inside the VPC.

Amazon Linux 2023 ships the SSM agent. The image follows AWS's public "latest" parameter at each deploy:
the host is stateless, so a replacement after an image update costs a minute of `trn connect`, never
work.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from trainium_cdk.constructs.efa_launch_template import METADATA_HOP_LIMIT
from trainium_cdk.constructs.nag import acknowledge
from trainium_cdk.constructs.session_manager import session_manager_role
from trainium_cdk.names import ACCESS_HOST_INSTANCE_TYPE, ACCESS_HOST_ROOT_VOLUME_GIB

HTTPS = 443


class ApiAccessHost(Construct):
    """An SSM-managed instance that may open only HTTPS to the cluster's API endpoint.

    :param vpc: the cluster's VPC.
    :param subnets: private subnets with a route out (NAT or the SSM interface endpoints); the host goes
        in the first.
    :param api: the security group of the API endpoint's interfaces (``TrainiumCluster.api_security_group``),
        not one that nodes carry too: the host may open port 443 to it, and it lets the host in.
    :param instance_type: an arm64 type. Default: t4g.nano (port forwarding needs no more).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        api: ec2.IConnectable,
        instance_type: str = ACCESS_HOST_INSTANCE_TYPE,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = session_manager_role(self, "Role", description="EKS API access host: SSM Session Manager only")
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="EKS API access host: no inbound; HTTPS out to Session Manager and the API endpoint",
            allow_all_outbound=False,
        )
        # The SSM agent's channels (ssm, ssmmessages, ec2messages) are HTTPS to regional endpoints, through
        # NAT or interface endpoints whose addresses are not known here.
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS), "HTTPS to Session Manager")
        api.connections.allow_from(self.security_group, ec2.Port.tcp(HTTPS), "Kubernetes API from the access host")

        self.instance = ec2.Instance(
            self,
            "Instance",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=[subnets[0]]),
            instance_type=ec2.InstanceType(instance_type),
            machine_image=ec2.MachineImage.latest_amazon_linux2023(cpu_type=ec2.AmazonLinuxCpuType.ARM_64),
            role=self.role,
            security_group=self.security_group,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        ACCESS_HOST_ROOT_VOLUME_GIB, encrypted=True, volume_type=ec2.EbsDeviceVolumeType.GP3,
                        delete_on_termination=True,
                    ),
                )
            ],
            # IMDSv2 on the instance itself (require_imdsv2 adds a launch template with a fixed name).
            http_tokens=ec2.HttpTokens.REQUIRED,
            http_endpoint=True,
            http_put_response_hop_limit=METADATA_HOP_LIMIT,  # AL2023 images default to 2
            detailed_monitoring=True,
        )
        # The L2 copies the subnet's AZ into AvailabilityZone; our subnets carry AZ IDs (see
        # TrainingNetwork), which that property rejects. The subnet alone places the instance.
        cfn_instance = self.instance.node.default_child
        assert isinstance(cfn_instance, ec2.CfnInstance)
        cfn_instance.add_property_deletion_override("AvailabilityZone")
        acknowledge(
            self.instance,
            "AwsSolutions::AwsSolutions-EC26",
            None,
            "cdk-nag 3.0.2's EC26 throws on an instance without a launch template in a stack that has one (it "
            "reads the name of an undefined template). The root volume is encrypted (tests/test_eks.py).",
        )
        acknowledge(
            self.instance,
            "AwsSolutions-EC29",
            None,
            "The access host is stateless (port forwarding only): termination protection would make "
            "`cdk destroy` fail for nothing it could lose.",
        )

    @property
    def instance_id(self) -> str:
        return self.instance.instance_id
