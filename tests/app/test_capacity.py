"""Capacity blocks and reservations across backends: a capacity-block node group at desired size 0,
a reservation's own placement group used by name, and Batch device permissions as the API spells them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support import apps
from tests.support.helpers import config_with, quality_synth, resources
from trainium_cdk.app.config import ConfigError

RESERVATION = apps.CAPACITY_RESERVATION_ID
PLACEMENT_GROUP = apps.CAPACITY_PLACEMENT_GROUP
# A block group and a reserved group on EKS (managed node groups), Batch and ParallelCluster: the app
# tests/unit/config/test_config_literals.py synthesizes with cdk-nag and lints (its "capacity block" variant).
CONFIG = config_with(**apps.CAPACITY)


@pytest.fixture(scope="module")
def result():
    return quality_synth(CONFIG)  # as test_config_literals': the same entry


def _nodegroup(result, group: str) -> dict[str, Any]:
    (props,) = [
        n["Properties"] for n in resources(result.template_json("eks"), "AWS::EKS::Nodegroup").values()
        if n["Properties"]["Labels"].get("trainium-cdk/compute-group") == group
    ]
    return props


def test_capacity_block_node_group_starts_at_zero(result):
    # EKS updates a capacity-block node group only at desired size 0; nodes launch once the block starts.
    assert _nodegroup(result, "block")["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 2}
    assert _nodegroup(result, "block")["CapacityType"] == "CAPACITY_BLOCK"
    # Cluster Autoscaler sizes the others from zero.
    assert _nodegroup(result, "reserved")["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 4}


def test_a_reservation_uses_its_own_placement_group_by_name(result):
    template = result.template_json("eks")
    lt_id = _nodegroup(result, "reserved")["LaunchTemplate"]["Id"]["Ref"]
    data = template["Resources"][lt_id]["Properties"]["LaunchTemplateData"]
    assert data["Placement"] == {"GroupName": PLACEMENT_GROUP}
    block_lt = template["Resources"][_nodegroup(result, "block")["LaunchTemplate"]["Id"]["Ref"]]
    assert "Placement" not in block_lt["Properties"]["LaunchTemplateData"]
    # Nothing is created for either group: the reservation's group exists, the block has none.
    assert resources(result.template_json("network"), "AWS::EC2::PlacementGroup") == {}
    environments = resources(result.template_with_nested("batch"), "AWS::Batch::ComputeEnvironment").values()
    assert PLACEMENT_GROUP in [e["Properties"]["ComputeResources"].get("PlacementGroup") for e in environments]
    (cluster,) = resources(result.template_json("parallelcluster"), "Custom::PclusterCluster").values()
    queues = {q["Name"]: q for q in cluster["Properties"]["ClusterConfiguration"]["Scheduling"]["SlurmQueues"]}
    assert queues["reserved"]["Networking"]["PlacementGroup"] == {"Enabled": True, "Name": PLACEMENT_GROUP}
    assert queues["block"]["Networking"]["PlacementGroup"] == {"Enabled": False}


def _devices(value: Any) -> list[dict[str, Any]]:
    """Every device mapping (a dict with a HostPath under /dev) anywhere in a template."""
    if isinstance(value, dict):
        found = [value] if str(value.get("HostPath", "")).startswith("/dev/") else []
        return found + [d for v in value.values() for d in _devices(v)]
    if isinstance(value, list):
        return [d for v in value for d in _devices(v)]
    return []


def test_batch_device_permissions_as_the_api_spells_them(result):
    devices = _devices(result.template_with_nested("batch"))
    assert devices
    for device in devices:
        # The device where the job sees it, and only Neuron devices and EFA verbs.
        assert device["ContainerPath"] == device["HostPath"], device
        assert re.fullmatch(r"/dev/(neuron\d+|infiniband/uverbs\d+)", device["HostPath"]), device
        # Left out (read, write and mknod), as the Batch EFA tutorial does; if ever set, upper case.
        assert set(device.get("Permissions", ["READ", "WRITE", "MKNOD"])) <= {"READ", "WRITE", "MKNOD"}, device


def test_placement_group_only_with_a_reservation():
    with pytest.raises(ConfigError, match="placement_group"):
        config_with(group={"capacity": {"type": "on-demand", "placement_group": PLACEMENT_GROUP}})
    with pytest.raises(ConfigError, match="an EC2 placement group name"):
        config_with(group={"capacity": {"type": "reservation", "reservation_id": RESERVATION, "placement_group": "a b"}})


def test_readme_says_when_to_scale_a_capacity_block():
    from pathlib import Path

    from tests.support.readme import page

    text = page("concepts/backends/eks.md")
    section = text[text.index("## Capacity blocks and reservations"):]
    assert "update-nodegroup-config" in section and "block starts" in section
    assert "`capacity.placement_group`" in text
