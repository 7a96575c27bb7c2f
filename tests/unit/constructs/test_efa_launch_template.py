"""EfaLaunchTemplate alone: every EFA interface of the catalog type, capacity from plain props."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from tests.support.helpers import resources
from trainium_cdk.constructs.efa_launch_template import EfaLaunchTemplate
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.capacity import NodeCapacity
from trainium_cdk.facts.catalog import DEFAULT_CATALOG

RESERVATION = "cr-0aaaaaaaaaaaaaaaa"


def _data(instance_type: str = "trn1.32xlarge", **props) -> dict:
    """The LaunchTemplateData of an EfaLaunchTemplate built alone in a bare stack."""
    stack = cdk.Stack(cdk.App(), "Bare")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1)
    EfaLaunchTemplate(
        stack,
        "LaunchTemplate",
        spec=DEFAULT_CATALOG.get(instance_type),
        security_groups=[ec2.SecurityGroup(stack, "Sg", vpc=vpc)],
        placement_group=None,
        root_volume_gib=256,
        **props,
    )
    (template,) = resources(Template.from_stack(stack).to_json(), "AWS::EC2::LaunchTemplate").values()
    return template["Properties"]["LaunchTemplateData"]


def test_built_alone_every_efa_interface_and_on_demand_by_default():
    data = _data()
    interfaces = data["NetworkInterfaces"]
    assert len(interfaces) == 8  # trn1.32xlarge: 8 network cards, one EFA interface each
    assert sorted(i["NetworkCardIndex"] for i in interfaces) == list(range(8))
    assert {i["InterfaceType"] for i in interfaces} == {"efa"}
    assert "SecurityGroupIds" not in data
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 256
    assert "CapacityReservationSpecification" not in data and "InstanceMarketOptions" not in data


def test_a_type_without_efa_gets_instance_security_groups():
    data = _data("trn1.2xlarge")
    assert "NetworkInterfaces" not in data
    assert len(data["SecurityGroupIds"]) == 1


@pytest.mark.parametrize("capacity_block", [False, True])
def test_reservation_and_capacity_block(capacity_block):
    capacity = NodeCapacity.capacity_block(RESERVATION) if capacity_block else NodeCapacity.reservation(RESERVATION)
    data = _data(capacity=capacity)
    target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target == {"CapacityReservationId": RESERVATION}
    if capacity_block:
        assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    else:
        assert "InstanceMarketOptions" not in data


def test_a_capacity_block_needs_its_reservation_id():
    with pytest.raises(ConfigError, match="NodeCapacity.reservation_id"):
        NodeCapacity("capacity-block")
