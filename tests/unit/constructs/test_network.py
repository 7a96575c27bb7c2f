"""TrainingNetwork: subnets by AZ ID, NAT, endpoints, flow logs, the EFA group, placement groups."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from tests.support.helpers import config_with, resources, synth
from trainium_cdk.errors import ConfigError


@pytest.fixture(scope="module")
def default():
    return synth(config_with())


@pytest.fixture(scope="module")
def variant():
    """Per-AZ NAT, interface endpoints, three AZs, and a second group on a capacity reservation."""
    return synth(
        config_with(
            network={"az_ids": ["usw2-az4", "usw2-az3", "usw2-az1"], "nat_gateways": "per-az", "interface_endpoints": True},
            compute_groups=[
                {"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2, "az_ids": "usw2-az4"},
                {
                    "name": "reserved", "instance_type": "trn1n.32xlarge", "nodes": 4, "az_ids": "usw2-az3",
                    "capacity": {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"},
                },
            ],
        )
    )


def _subnets(result):
    return resources(result.template_json("network"), "AWS::EC2::Subnet")


def test_subnets_public_and_private_in_each_az_by_id(default):
    subnets = _subnets(default)
    assert len(subnets) == 4
    by_kind = {}
    for subnet in subnets.values():
        props = subnet["Properties"]
        assert "AvailabilityZone" not in props
        kind = "public" if props["MapPublicIpOnLaunch"] else "private"
        by_kind.setdefault(kind, []).append(props["AvailabilityZoneId"])
    assert sorted(by_kind["public"]) == sorted(by_kind["private"]) == ["usw2-az3", "usw2-az4"]


def test_private_subnets_are_large_and_route_through_nat(default):
    template = default.template("network")
    template.resource_count_is("AWS::EC2::NatGateway", 1)
    template.has_resource_properties(
        "AWS::EC2::Route", {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": Match.any_value()}
    )
    private = [s["Properties"] for s in _subnets(default).values() if not s["Properties"]["MapPublicIpOnLaunch"]]
    assert all(p["CidrBlock"].endswith("/18") for p in private)


def test_compute_subnet_is_private_in_the_group_az(default):
    network = default.stacks.network.network
    subnet = network.compute_subnet("train")
    assert subnet.node.path in [s.node.path for s in network.vpc.private_subnets]
    assert subnet.availability_zone == "usw2-az4"


def test_s3_gateway_endpoint_and_flow_logs(default):
    template = default.template("network")
    template.has_resource_properties("AWS::EC2::VPCEndpoint", {"VpcEndpointType": "Gateway"})
    template.resource_count_is("AWS::EC2::VPCEndpoint", 1)
    template.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL", "ResourceType": "VPC"})
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})


def test_efa_security_group_allows_all_traffic_to_and_from_itself(default):
    template = default.template_json("network")
    groups = resources(template, "AWS::EC2::SecurityGroup")
    (efa_id,) = [k for k, v in groups.items() if v["Properties"]["GroupDescription"].startswith("EFA")]
    egress = groups[efa_id]["Properties"]["SecurityGroupEgress"]
    assert egress == [{"CidrIp": "0.0.0.0/0", "Description": "All outbound", "IpProtocol": "-1"}]
    (self_egress,) = [
        r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupEgress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [efa_id, "GroupId"]}
    ]
    assert self_egress["DestinationSecurityGroupId"] == {"Fn::GetAtt": [efa_id, "GroupId"]}
    assert self_egress["IpProtocol"] == "-1"
    ingress = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]
    self_rules = [
        r for r in ingress
        if r["GroupId"] == {"Fn::GetAtt": [efa_id, "GroupId"]}
        and r["SourceSecurityGroupId"] == {"Fn::GetAtt": [efa_id, "GroupId"]}
    ]
    assert len(self_rules) == 1 and self_rules[0]["IpProtocol"] == "-1"
    assert not any(r.get("CidrIp") in ("0.0.0.0/0",) or r.get("CidrIpv6") == "::/0" for r in ingress)


def test_one_cluster_placement_group_per_on_demand_group(default):
    template = default.template("network")
    template.resource_count_is("AWS::EC2::PlacementGroup", 1)
    template.has_resource_properties("AWS::EC2::PlacementGroup", {"Strategy": "cluster"})


def test_no_placement_group_with_a_capacity_block(variant):
    network = variant.stacks.network.network
    assert network.placement_group("reserved") is None
    assert network.placement_group("train") is not None
    variant.template("network").resource_count_is("AWS::EC2::PlacementGroup", 1)


def test_per_az_nat_and_interface_endpoints(variant):
    template = variant.template("network")
    template.resource_count_is("AWS::EC2::NatGateway", 3)
    endpoints = resources(variant.template_json("network"), "AWS::EC2::VPCEndpoint")
    interface = [e["Properties"] for e in endpoints.values() if e["Properties"].get("VpcEndpointType") == "Interface"]
    names = {str(e["ServiceName"]) for e in interface}
    assert len(interface) == 7
    for service in ("ecr.api", "ecr.dkr", "sts", "logs", "ssm", "ssmmessages", "ec2messages"):
        assert any(service in n for n in names), service
    assert all(e["PrivateDnsEnabled"] for e in interface)


def test_compute_subnets_follow_each_group(variant):
    network = variant.stacks.network.network
    assert network.compute_subnet("reserved").availability_zone == "usw2-az3"
    assert len(_subnets(variant)) == 6


def test_unknown_group_is_a_clear_error(default):
    from trainium_cdk.errors import ConfigError

    with pytest.raises(ConfigError, match="compute group = 'nope': allowed: train"):
        default.stacks.network.network.compute_subnets("nope")


def _bare_stack():
    import aws_cdk as cdk

    return cdk.Stack(cdk.App(), "Bare", env=cdk.Environment(region="us-west-2"))


def test_training_network_from_its_own_props_alone():
    from aws_cdk import assertions
    from aws_cdk import aws_logs as logs

    from trainium_cdk.constructs.network import ComputePlacement, TrainingNetwork

    stack = _bare_stack()
    network = TrainingNetwork(
        stack, "Network", az_ids=["usw2-az4", "usw2-az3"], cidr="10.8.0.0/16", nat_gateways=2,
        flow_log_retention=logs.RetentionDays.ONE_WEEK,
        compute_groups=[ComputePlacement(name="a", az_ids=("usw2-az4",)),
                        ComputePlacement(name="b", az_ids=("usw2-az3",), placement_group=False)],
    )
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.8.0.0/16"})
    template.resource_count_is("AWS::EC2::NatGateway", 2)
    template.resource_count_is("AWS::EC2::PlacementGroup", 1)
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 7})
    assert network.placement_group("b") is None
    assert network.compute_subnet("b").availability_zone == "usw2-az3"


@pytest.mark.parametrize(
    "props, field",
    [
        ({"nat_gateways": 3}, "nat_gateways"),
        ({"cidr": "10.0.0.0/26"}, "cidr"),
        ({"private_subnet_mask": 15}, "private_subnet_mask"),
        ({"az_ids": ["usw2-az4"]}, "az_ids"),
    ],
)
def test_training_network_rejects_bad_props_by_name(props, field):
    from trainium_cdk.constructs.network import ComputePlacement, TrainingNetwork

    kwargs = {"az_ids": ["usw2-az4", "usw2-az3"], "compute_groups": [ComputePlacement(name="a", az_ids=("usw2-az4",))]}
    with pytest.raises(ConfigError, match=field):
        TrainingNetwork(_bare_stack(), "Network", **{**kwargs, **props})
