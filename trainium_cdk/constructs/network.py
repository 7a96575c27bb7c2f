"""TrainingNetwork: the VPC every backend trains in.

Public and private subnets in at least two AZs (EKS needs two), NAT, an S3 gateway endpoint (interface
endpoints as an option), flow logs, the EFA security group, and one cluster placement group per
compute group. AZs are given by AZ ID, never by name: names differ per account and looking them up
would make synth call AWS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aws_cdk import RemovalPolicy, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from trainium_cdk.constructs.log_encryption import encrypt_log_groups
from trainium_cdk.constructs.nag import NIST, acknowledge, acknowledge_default_policy
from trainium_cdk.constructs.s3_endpoint_policy import restrict_s3_endpoint
from trainium_cdk.constructs.service_trust import restrict_service_trust
from trainium_cdk.errors import ConfigError, names_construct_path, one_of
from trainium_cdk.facts.addressing import check_subnets_fit, check_vpc_cidr
from trainium_cdk.facts.defaults.cdk import LOG_RETENTION

DEFAULT_CIDR = "10.0.0.0/16"
DEFAULT_PUBLIC_SUBNET_MASK = 24
DEFAULT_PRIVATE_SUBNET_MASK = 18  # pods take one IP each: EKS nodes need large private subnets
DEFAULT_NAT_GATEWAYS = 1
DEFAULT_FLOW_LOG_RETENTION = LOG_RETENTION

PUBLIC_SUBNET_GROUP = "public"
PRIVATE_SUBNET_GROUP = "private"

# Interface endpoints worth their hourly cost in a private training VPC: image pulls (ECR), role
# credentials (STS), logs, and Session Manager.
INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Ssm": ec2.InterfaceVpcEndpointAwsService.SSM,
    "SsmMessages": ec2.InterfaceVpcEndpointAwsService.SSM_MESSAGES,
    "Ec2Messages": ec2.InterfaceVpcEndpointAwsService.EC2_MESSAGES,
}
# The SSM agent's three channels (Session Manager's "Step 6: (Optional) Use AWS PrivateLink to set up a VPC
# endpoint for Session Manager"): all a host reached only by Session Manager needs.
SESSION_MANAGER_ENDPOINTS = ("Ssm", "SsmMessages", "Ec2Messages")


@dataclass(frozen=True)
class ComputePlacement:
    """Where the nodes of one compute group go.

    :param name: the compute group.
    :param az_ids: its AZ IDs (one for an EFA group: its nodes share one subnet).
    :param placement_group: give the group a cluster placement group of its own. Default: True.
    :param existing_placement_group: the name of a placement group made with a capacity reservation;
        it is used instead of a new one. Default: None.
    """

    name: str
    az_ids: tuple[str, ...]
    placement_group: bool = True
    existing_placement_group: str | None = None


class ITrainingNetwork(Protocol):
    """A training network as the constructs take its parts: the VPC, the EFA security group, the private subnets
    and, per compute group, its subnets and placement group. :class:`TrainingNetwork` is one; so is what
    :meth:`TrainingNetwork.from_vpc` returns for a VPC made elsewhere."""

    @property
    def vpc(self) -> ec2.IVpc: ...

    @property
    def efa_security_group(self) -> ec2.ISecurityGroup: ...

    @property
    def private_subnets(self) -> list[ec2.ISubnet]: ...

    def compute_subnets(self, group_name: str) -> list[ec2.ISubnet]: ...

    def compute_subnet(self, group_name: str) -> ec2.ISubnet: ...

    def placement_group(self, group_name: str) -> ec2.IPlacementGroup | None: ...


class _ComputeGroups:
    """The compute groups' subnets and placement groups, by AZ ID: TrainingNetwork's and an imported VPC's."""

    az_ids: tuple[str, ...]
    placement_groups: dict[str, ec2.IPlacementGroup]
    _groups: dict[str, ComputePlacement]

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        raise NotImplementedError

    def _add_compute_groups(self, scope: Construct, compute_groups: Sequence[ComputePlacement]) -> None:
        self.placement_groups = {}
        self._groups = {g.name: g for g in compute_groups}
        for group in compute_groups:
            self.compute_subnets(group.name)  # fails early for an AZ outside the VPC
            if group.existing_placement_group is not None:  # the reservation's own, made with it
                self.placement_groups[group.name] = ec2.PlacementGroup.from_placement_group_name(
                    scope, f"PlacementGroup-{group.name}", group.existing_placement_group
                )
            elif group.placement_group:
                self.placement_groups[group.name] = ec2.PlacementGroup(
                    scope, f"PlacementGroup-{group.name}", strategy=ec2.PlacementGroupStrategy.CLUSTER
                )

    def compute_subnets(self, group_name: str) -> list[ec2.ISubnet]:
        """The private subnets of a compute group: one for an EFA group, whose nodes share one subnet."""
        group = self._group(group_name)
        by_az: dict[str, ec2.ISubnet] = {}
        for subnet in self.private_subnets:
            by_az.setdefault(subnet.availability_zone, subnet)
        missing = [a for a in group.az_ids if a not in by_az]
        if missing:
            raise ConfigError(
                f"compute group {group.name}: az_ids", list(group.az_ids), "AZ IDs of the VPC; " + one_of(self.az_ids)
            )
        return [by_az[a] for a in group.az_ids]

    def compute_subnet(self, group_name: str) -> ec2.ISubnet:
        """The one subnet of the group's first AZ: where its EFA nodes and the file system live."""
        return self.compute_subnets(group_name)[0]

    def placement_group(self, group_name: str) -> ec2.IPlacementGroup | None:
        """The group's cluster placement group, or None when it uses a reservation or capacity block."""
        self._group(group_name)
        return self.placement_groups.get(group_name)

    def _group(self, group_name: str) -> ComputePlacement:
        try:
            return self._groups[group_name]
        except KeyError:
            raise ConfigError("compute group", group_name, one_of(self._groups)) from None


def efa_security_group(scope: Construct, vpc: ec2.IVpc) -> ec2.SecurityGroup:
    """The EFA security group: all traffic from and to itself, all outbound."""
    # EFA's OS-bypass traffic is not IP: it matches only rules that reference a group, so the group
    # needs all traffic in from itself AND out to itself; a 0.0.0.0/0 egress does not carry it
    # (AWS Batch EFA guide; ParallelCluster's EFA validator). CDK drops explicit egress rules when
    # allow_all_outbound is on: both egress rules are added here instead.
    group = ec2.SecurityGroup(
        scope,
        "EfaSecurityGroup",
        vpc=vpc,
        description="EFA: all traffic from and to itself; all outbound",
        allow_all_outbound=False,
    )
    group.add_ingress_rule(group, ec2.Port.all_traffic(), "EFA from itself")
    group.add_egress_rule(group, ec2.Port.all_traffic(), "EFA to itself")
    # Image pulls, AWS APIs, the FSx client and torchrun's TCP rendezvous. Inline, through the L1: the
    # L2 refuses an all-traffic egress rule on a group without allow_all_outbound, and a separate
    # rule would collide with the default EC2 adds to a group created without inline egress.
    cfn_group = group.node.default_child
    assert isinstance(cfn_group, ec2.CfnSecurityGroup)
    cfn_group.add_property_override(
        "SecurityGroupEgress", [{"CidrIp": "0.0.0.0/0", "IpProtocol": "-1", "Description": "All outbound"}]
    )
    acknowledge(
        group, f"{NIST}-EC2RestrictedCommonPorts", None,
        "The only all-port ingress rule is from the group itself: EFA's OS-bypass traffic needs all traffic "
        "from and to the group (EFA user guide, 'Prepare an EFA-enabled security group'); nothing else comes in.",
    )
    return group


class TrainingNetwork(_ComputeGroups, Construct):
    """The training VPC, the EFA security group and the placement groups.

    :param az_ids: AZ IDs of the VPC, at least two; every compute group's AZ must be among them.
    :param compute_groups: the groups whose compute subnets and placement groups this network provides.
    :param cidr: IPv4 CIDR of the VPC, /16 to /24. Default: ``DEFAULT_CIDR`` (10.0.0.0/16).
    :param public_subnet_mask: prefix length of each public subnet. Default: 24.
    :param private_subnet_mask: prefix length of each private subnet. Default: 18.
    :param nat_gateways: NAT gateways, 1 to one per AZ. Default: 1.
    :param interface_endpoints: add interface endpoints for ECR, STS, CloudWatch Logs and SSM (the S3
        gateway endpoint is always there). Default: False.
    :param flow_log_retention: retention of the flow log group. Default: one month.
    :param s3_buckets: buckets of other accounts the S3 gateway endpoint lets requests reach, besides the
        account's own and the AWS-owned ones nodes read (constructs/s3_endpoint_policy.py). Default: none.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        az_ids: Sequence[str],
        compute_groups: Sequence[ComputePlacement],
        cidr: str = DEFAULT_CIDR,
        public_subnet_mask: int = DEFAULT_PUBLIC_SUBNET_MASK,
        private_subnet_mask: int = DEFAULT_PRIVATE_SUBNET_MASK,
        nat_gateways: int = DEFAULT_NAT_GATEWAYS,
        interface_endpoints: bool = False,
        flow_log_retention: logs.RetentionDays = DEFAULT_FLOW_LOG_RETENTION,
        s3_buckets: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        if len(set(az_ids)) < 2:
            raise ConfigError("az_ids", list(az_ids), "at least two distinct AZ IDs (EKS needs subnets in two AZs)")
        check_vpc_cidr(cidr, public_subnet_mask, private_subnet_mask)
        check_subnets_fit(cidr, public_subnet_mask, private_subnet_mask, len(az_ids))
        if not 1 <= nat_gateways <= len(az_ids):
            raise ConfigError("nat_gateways", nat_gateways, f"1 to {len(az_ids)} (one per AZ)")
        self.az_ids = tuple(az_ids)

        self.flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=flow_log_retention,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=list(az_ids),
            nat_gateways=nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name=PUBLIC_SUBNET_GROUP, subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=public_subnet_mask
                ),
                ec2.SubnetConfiguration(
                    name=PRIVATE_SUBNET_GROUP,
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=private_subnet_mask,
                ),
            ],
            gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)},
            flow_logs={
                "FlowLog": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
            # AWS's rules of the default group (all in from itself, all out) go, through the L2's custom resource:
            # Batch puts multi-node task interfaces in that group (batch_tasks.py), which then get only the rules
            # BatchTaskRules adds, and anything launched without a group gets none (CIS AWS Foundations 5.4).
            restrict_default_security_group=True,
        )
        # The flow log service publishes for this account's flow logs only (confused deputy: service_trust.py).
        flow_log = self.vpc.node.find_child("FlowLog")
        assert isinstance(flow_log, ec2.FlowLog) and flow_log.iam_role is not None
        restrict_service_trust(flow_log.iam_role.node.default_child)  # type: ignore[arg-type]
        acknowledge_default_policy(flow_log.iam_role, "CDK's VPC flow log (writing to the flow log group)")
        self.s3_endpoint = self.vpc.node.find_child("S3")
        assert isinstance(self.s3_endpoint, ec2.GatewayVpcEndpoint)
        restrict_s3_endpoint(self, self.s3_endpoint, buckets=s3_buckets)
        self._pin_subnets_to_az_ids()
        encrypt_log_groups(self)
        self._acknowledge_public_subnets()

        self.session_manager_endpoints = self._interface_endpoints() if interface_endpoints else []

        self.efa_security_group = efa_security_group(self, self.vpc)
        self._add_compute_groups(self, compute_groups)

    @staticmethod
    def from_vpc(
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        compute_groups: Sequence[ComputePlacement],
        private_subnets: Sequence[ec2.ISubnet] | None = None,
    ) -> ITrainingNetwork:
        """A VPC made elsewhere (``ec2.Vpc.from_lookup``, ``ec2.Vpc.from_vpc_attributes``, another stack's) as a
        training network: the EFA security group and the compute groups' placement groups are created in it, in
        ``scope``; nothing else (its subnets, routes, NAT and endpoints are the VPC's own).

        :param vpc: the VPC.
        :param compute_groups: the groups whose compute subnets and placement groups the network provides; each
            group's ``az_ids`` are matched against the subnets' ``availability_zone``.
        :param private_subnets: the subnets nodes, file systems and the cluster go in, each imported with its
            AZ (``ec2.Subnet.from_subnet_attributes(..., availability_zone="usw2-az4")``: an AZ ID, as
            ``ComputePlacement`` names AZs). Default: the VPC's private subnets.
        :raises ConfigError: no subnet; a subnet without an AZ; a compute group's AZ without a subnet.
        """
        return _ImportedTrainingNetwork(scope, construct_id, vpc=vpc, compute_groups=compute_groups,
                                        private_subnets=private_subnets)

    def _interface_endpoints(self) -> list[ec2.InterfaceVpcEndpoint]:
        """Every interface endpoint of INTERFACE_ENDPOINTS; returns Session Manager's."""
        # Session Manager's interface endpoints, when the VPC has them (the access host opens HTTPS to these only).
        found: list[ec2.InterfaceVpcEndpoint] = []
        for name, service in INTERFACE_ENDPOINTS.items():
            endpoint = self.vpc.add_interface_endpoint(
                name,
                service=service,
                subnets=ec2.SubnetSelection(subnet_group_name=PRIVATE_SUBNET_GROUP),
                private_dns_enabled=True,
            )
            # The rules cannot read the CIDR (a reference to the VPC, not a literal): the NIST ones throw.
            for rule in ("AwsSolutions-EC23", f"{NIST}-EC2RestrictedCommonPorts", f"{NIST}-EC2RestrictedSSH"):
                acknowledge(endpoint, rule, None, "The endpoint accepts HTTPS (443) from the VPC CIDR only; the "
                            "rule cannot read the CIDR because it is a reference to the VPC, not a literal.")
            if name in SESSION_MANAGER_ENDPOINTS:
                found.append(endpoint)
        return found

    def _acknowledge_public_subnets(self) -> None:
        for subnet in self.vpc.public_subnets:
            acknowledge(
                subnet, f"{NIST}-VPCNoUnrestrictedRouteToIGW", None,
                "A public subnet: its route to the internet gateway is what the NAT gateways (the private subnets' "
                "way out) and a public ParallelCluster head node need; nothing else runs in it.",
            )
            acknowledge(
                subnet, f"{NIST}-VPCSubnetAutoAssignPublicIpDisabled", None,
                "A public subnet: the NAT gateways use Elastic IPs; a ParallelCluster head node placed here "
                "(parallelcluster.head_node_subnet: public) takes its public address from this setting.",
            )

    def _pin_subnets_to_az_ids(self) -> None:
        # The L2 Vpc only knows AZ names; we hand it AZ IDs and rewrite each subnet to
        # AvailabilityZoneId so that the same template lands in the same physical AZ in every account.
        for subnet in self.vpc.public_subnets + self.vpc.private_subnets:
            cfn_subnet = subnet.node.default_child
            assert isinstance(cfn_subnet, ec2.CfnSubnet)
            cfn_subnet.add_property_deletion_override("AvailabilityZone")
            cfn_subnet.add_property_override("AvailabilityZoneId", subnet.availability_zone)

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        return self.vpc.private_subnets


class _ImportedTrainingNetwork(_ComputeGroups, Construct):
    """What :meth:`TrainingNetwork.from_vpc` returns: an imported VPC, and the EFA group and placement groups."""

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        compute_groups: Sequence[ComputePlacement],
        private_subnets: Sequence[ec2.ISubnet] | None,
    ) -> None:
        super().__init__(scope, construct_id)
        subnets = list(vpc.private_subnets if private_subnets is None else private_subnets)
        if not subnets:
            raise ConfigError("private_subnets", [], "at least one subnet of the VPC (the VPC has no private "
                              "subnet: import it with private_subnet_ids, or give private_subnets)")
        azs = []
        for i, subnet in enumerate(subnets):
            try:
                az = subnet.availability_zone
            # aws-cdk-lib's ImportedSubnet throws: "You cannot reference a Subnet's availability zone if it was
            # not supplied. Add the availabilityZone when importing using Subnet.fromSubnetAttributes()".
            except RuntimeError:
                az = None
            if az is None or Token.is_unresolved(az):
                raise ConfigError(f"private_subnets[{i}].availability_zone", subnet.subnet_id,
                                  "a subnet imported with its AZ: ec2.Subnet.from_subnet_attributes(subnet_id=..., "
                                  "availability_zone=AZ ID), or a VPC imported with availability_zones")
            azs.append(az)
        self.vpc = vpc
        self.az_ids = tuple(dict.fromkeys(azs))
        self._private_subnets = subnets
        self.efa_security_group = efa_security_group(self, vpc)
        self._add_compute_groups(self, compute_groups)

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        return list(self._private_subnets)


if TYPE_CHECKING:  # mypy holds both to the interface
    def _both_are_training_networks(
        made: TrainingNetwork, imported: _ImportedTrainingNetwork
    ) -> list[ITrainingNetwork]:
        return [made, imported]
