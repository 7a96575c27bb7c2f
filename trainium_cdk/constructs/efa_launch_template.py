"""EfaLaunchTemplate: a launch template that wires every EFA interface of an instance type.

Shared by the EKS node groups and the Batch compute environments. A node wired with fewer EFA
interfaces than its type has trains at a fraction of its bandwidth, so the count always comes from
the catalog.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Fn
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from trainium_cdk.errors import names_construct_path
from trainium_cdk.facts.capacity import NodeCapacity
from trainium_cdk.facts.catalog import InstanceSpec

ROOT_DEVICE_NAME = "/dev/xvda"
# Nothing in a container needs the node's role: EKS pods use Pod Identity and Batch tasks their ECS task
# role, both served off IMDS; node agents that read IMDS (VPC CNI, EFA plugin, FSx CSI node) use the host
# network, one hop. Hop limit 1 keeps containers from taking the node role.
METADATA_HOP_LIMIT = 1


class EfaLaunchTemplate(Construct):
    """The instance type, all its EFA interfaces (one per network card), the security groups, the
    placement group, an encrypted gp3 root volume, IMDSv2 and the capacity reservation if any.

    :param spec: the instance type from the catalog.
    :param security_groups: groups of every interface (the EFA group first).
    :param placement_group: a cluster placement group, or None (always None with a reservation).
    :param root_volume_gib: size of the encrypted gp3 root volume.
    :param capacity: how the instances are bought: into a reservation's or a Capacity Block's ``cr-...`` id (a
        block with the capacity-block market type). Default: on-demand.
    :param image_id: an AMI. Default: none (EKS picks the AMI from the node group's AMI type).
    :param user_data: plain user data (base64-encoded here). Default: none.
    :param root_volume_throughput: the root volume's gp3 throughput, MiB/s. Default: gp3's baseline.
    """

    @names_construct_path
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: InstanceSpec,
        security_groups: Sequence[ec2.ISecurityGroup],
        placement_group: ec2.IPlacementGroup | None,
        root_volume_gib: int,
        capacity: NodeCapacity = NodeCapacity(),  # noqa: B008 (a frozen dataclass: one value, never changed)
        image_id: str | None = None,
        user_data: str | None = None,
        root_volume_throughput: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        group_ids = [sg.security_group_id for sg in security_groups]
        data = ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            instance_type=spec.name,
            image_id=image_id,
            user_data=Fn.base64(user_data) if user_data is not None else None,
            # Security groups go on the interfaces when the template defines them; EC2 rejects both.
            security_group_ids=None if spec.has_efa else group_ids,
            network_interfaces=[
                ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                    network_card_index=slot.network_card_index,
                    device_index=slot.device_index,
                    interface_type="efa",
                    groups=group_ids,
                    delete_on_termination=True,
                )
                for slot in spec.efa_slots
            ]
            or None,
            placement=(
                ec2.CfnLaunchTemplate.PlacementProperty(group_name=placement_group.placement_group_name)
                if placement_group is not None
                else None
            ),
            block_device_mappings=[
                ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name=ROOT_DEVICE_NAME,
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=root_volume_gib, volume_type="gp3", encrypted=True, delete_on_termination=True,
                        throughput=root_volume_throughput,
                    ),
                )
            ],
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_tokens="required", http_put_response_hop_limit=METADATA_HOP_LIMIT, http_endpoint="enabled"
            ),
            capacity_reservation_specification=(
                ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                    capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                        capacity_reservation_id=capacity.reservation_id
                    )
                )
                if capacity.reservation_id is not None
                else None
            ),
            instance_market_options=(
                ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
                if capacity.is_capacity_block
                else None
            ),
        )
        # L1: the L2 LaunchTemplate cannot describe several network interfaces on separate network
        # cards with the EFA interface type.
        self.resource = ec2.CfnLaunchTemplate(self, "Resource", launch_template_data=data)
        self.launch_template_id = self.resource.ref
        self.latest_version = self.resource.attr_latest_version_number
