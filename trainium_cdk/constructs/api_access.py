"""ApiAccessHost: the way in to a private EKS API endpoint, from a workstation, with no inbound rule.

A private endpoint answers only inside the VPC. This small instance sits in a private subnet, reached by
SSM Session Manager (the agent dials out; nothing dials in), and may open only HTTPS to the control
plane and Session Manager. `trn connect` starts Session Manager's port forwarding to the endpoint through
it (``AWS-StartPortForwardingSessionToRemoteHost``) and writes the kubeconfig for the forwarded port. It
holds no credentials of its own: kubectl's requests carry the user's IAM identity, checked by the
cluster's access entries, as they would from inside the VPC.

``ssm:StartSession`` on an instance with the default document is a root shell on it (``ssm-user`` is a
sudoer): ``connect_policy`` is the managed policy to grant instead, port forwarding on this host only.

Amazon Linux 2023 ships the SSM agent. The image follows AWS's public "latest" parameter at each deploy:
the host is stateless, so a replacement after an image update costs a minute of `trn connect`, never
work.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainium_cdk.constructs.efa_launch_template import METADATA_HOP_LIMIT
from trainium_cdk.constructs.nag import acknowledge, nag_form
from trainium_cdk.constructs.session_manager import session_manager_role
from trainium_cdk.facts.names import ACCESS_HOST_INSTANCE_TYPE, ACCESS_HOST_ROOT_VOLUME_GIB, PORT_FORWARD_DOCUMENT

HTTPS = 443


class ApiAccessHost(Construct):
    """An SSM-managed instance that may open only HTTPS to the cluster's API endpoint and Session Manager.

    :param vpc: the cluster's VPC.
    :param subnets: private subnets with a route out (NAT or the SSM interface endpoints); the host goes
        in the first.
    :param api: the security group of the API endpoint's interfaces (``TrainiumCluster.api_security_group``),
        not one that nodes carry too: the host may open port 443 to it, and it lets the host in.
    :param ssm_endpoints: the VPC's interface endpoints for ssm, ssmmessages and ec2messages
        (``TrainingNetwork.session_manager_endpoints``): the host opens HTTPS to their groups and nothing
        else. Default: none, and the host reaches Session Manager through NAT (HTTPS to any address).
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
        ssm_endpoints: Sequence[ec2.IConnectable] = (),
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
        self._ssm_egress(ssm_endpoints)
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
            "reads the name of an undefined template). The root volume is encrypted (tests/app/eks/test_eks.py).",
        )
        acknowledge(
            self.instance,
            "AwsSolutions-EC29",
            None,
            "The access host is stateless (port forwarding only): termination protection would make "
            "`cdk destroy` fail for nothing it could lose.",
        )

        self.connect_policy = connect_policy(self, "ConnectPolicy", self.instance.instance_id)

    def _ssm_egress(self, ssm_endpoints: Sequence[ec2.IConnectable]) -> None:
        # The SSM agent's channels (ssm, ssmmessages, ec2messages) are HTTPS to regional endpoints. With the
        # VPC's interface endpoints, to their groups only (they let the VPC's CIDR in). Through NAT, to the
        # services' public addresses: AWS publishes no managed prefix list for Systems Manager (only S3,
        # DynamoDB, CloudFront, Route 53 health checks, VPC Lattice and EC2 Instance Connect have one) and its
        # ranges in ip-ranges.json are the whole "AMAZON" service's, so any address on 443 is what works.
        # By group ID, so that CDK writes them inline: a group whose template lists no inline egress gets EC2's
        # all-outbound rule, which separate SecurityGroupEgress resources do not remove (CloudFormation,
        # AWS::EC2::SecurityGroup, SecurityGroupEgress), and CDK writes a rule to a group object separately.
        for endpoint in ssm_endpoints:
            for group in endpoint.connections.security_groups:
                self.security_group.add_egress_rule(ec2.Peer.security_group_id(group.security_group_id),
                                                    ec2.Port.tcp(HTTPS), "HTTPS to a Session Manager endpoint")
        if not ssm_endpoints:
            self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS),
                                                "HTTPS to Session Manager (through NAT)")

    @property
    def instance_id(self) -> str:
        return self.instance.instance_id


def connect_policy(scope: Construct, construct_id: str, instance_id: str) -> iam.ManagedPolicy:
    """What `trn connect` needs of Session Manager: port forwarding on ``instance_id`` only, and ending or
    resuming one's own sessions. The caller adds what it reads of the stack and the cluster.

    ``ssm:SessionDocumentAccessCheck`` makes Session Manager check the document against the statement even
    when the request names none (it would otherwise start the default shell document, SSM-SessionManagerRunShell,
    on any instance the statement lists): Systems Manager user guide, "Quickstart end user policies for Session
    Manager" and "Start a session with a document by specifying the session documents in IAM policies".
    """
    stack = Stack.of(scope)
    sessions = stack.format_arn(service="ssm", resource="session", resource_name="${aws:userid}-*")
    policy = iam.ManagedPolicy(
        scope, construct_id,
        description=f"trainium-cdk: `trn connect` (Session Manager {PORT_FORWARD_DOCUMENT} to the access host only)",
        statements=[
            iam.PolicyStatement(
                sid="PortForwardingToTheAccessHostOnly",
                actions=["ssm:StartSession"],
                resources=[
                    stack.format_arn(service="ec2", resource="instance", resource_name=instance_id),
                    # AWS-owned documents have no account in their ARN.
                    stack.format_arn(service="ssm", account="", resource="document",
                                     resource_name=PORT_FORWARD_DOCUMENT),
                ],
                conditions={"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}},
            ),
            iam.PolicyStatement(
                sid="OwnSessionsOnly",
                actions=["ssm:TerminateSession", "ssm:ResumeSession"],
                # A session's ID starts with the caller's aws:userid (the quickstart policy's own resource).
                resources=[sessions],
            ),
        ],
    )
    acknowledge(
        policy,
        "AwsSolutions-IAM5",
        # cdk-nag spells the policy variable <aws:userid>.
        [f"Resource::{nag_form(stack, sessions).replace('${aws:userid}', '<aws:userid>')}"],
        "Session IDs are made by Session Manager at StartSession: the caller's own sessions are named by their "
        "aws:userid prefix, as AWS's quickstart end user policy for Session Manager does.",
    )
    return policy
