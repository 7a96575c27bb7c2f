"""Trn3 (Trainium3): not in the catalog while EC2 publishes no Trn3 instance type nor its EFA layout
(trainium_cdk/facts/catalog.py lists what is public, with sources, and what is missing). A user who can launch
one describes it under `custom_instance_types` and runs it on the native track; these tests walk that path
from the config to the synthesized launch template and `trn cost`.
"""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest

from tests.support.helpers import cfn_lint_errors, group_resources, resources, synth
from trainium_cdk.app.config import build_config
from trainium_cdk.app.cost import bill
from trainium_cdk.facts import prices
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.versions import NEURON_TRACKS

# What a user would copy from `aws ec2 describe-instance-types` in an account that can launch the type.
# Placeholders: EC2 publishes none of these facts yet; only the path they take is under test.
TRN3: dict[str, Any] = {
    "name": "trn3.48xlarge", "accelerator": "Trainium3", "neuron_devices": 16, "neuron_cores": 64,
    "efa_interfaces": 8, "network_cards": 8, "vcpus": 192, "memory_gib": 2048, "network_gbps": 3200,
    "offered_az_ids": {"us-east-2": ["use2-az3"]},
}
RAW: dict[str, Any] = {
    "project": "t",
    "region": "us-east-2",
    "network": {"az_ids": ["use2-az3", "use2-az2"]},
    "backends": ["eks", "batch"],
    "neuron": {"track": "native"},
    "custom_instance_types": [TRN3],
    "compute_groups": [{"name": "train", "instance_type": "trn3.48xlarge", "nodes": 2, "az_ids": "use2-az3"}],
}


def _ec2_instance_types() -> set[str]:
    """Every instance type name in the EC2 API model that the pinned botocore ships."""
    return set(botocore.session.get_session().get_service_model("ec2").shape_for("InstanceType").enum)


def test_every_catalog_type_is_one_the_ec2_api_names():
    """The catalog keys on EC2's names: a type enters it only once EC2's API lists it, which no Trn3
    type is yet, so that no guessed name (the Neuron driver knows several) reaches a template."""
    ec2_types = _ec2_instance_types()
    assert {spec.name for spec in DEFAULT_CATALOG} <= ec2_types
    assert TRN3["name"] not in ec2_types and TRN3["name"] not in DEFAULT_CATALOG


def test_the_native_track_takes_a_trn3_type_the_user_describes():
    config = build_config(RAW)
    assert config.neuron_track is NEURON_TRACKS["native"]
    spec = config.spec(config.compute_groups[0])
    assert (spec.family, spec.neuron_devices, spec.neuron_cores, spec.efa_interfaces) == ("trn3", 16, 64, 8)


@pytest.fixture(scope="module")
def synthesized():
    return synth(build_config(RAW), nag=False)


def test_its_launch_template_carries_every_efa_interface_the_user_declared(synthesized):
    (template,) = group_resources(synthesized.template_with_nested("batch"), "AWS::EC2::LaunchTemplate").values()
    data = template["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == "trn3.48xlarge"
    interfaces = data["NetworkInterfaces"]
    assert [(i["NetworkCardIndex"], i["DeviceIndex"]) for i in interfaces] == [(0, 0)] + [
        (card, 1) for card in range(1, TRN3["efa_interfaces"])
    ]
    assert {i["InterfaceType"] for i in interfaces} == {"efa"}


def test_cfn_lint_finds_nothing_but_the_type_name_it_does_not_know(synthesized):
    """cfn-lint 1.58's us-east-2 data has no Trn3 type: its E3628 on the custom name is the only error."""
    for path in synthesized.template_paths():
        errors = cfn_lint_errors(path, "us-east-2")
        assert all(e.startswith("E3628 'trn3.48xlarge' is not one of") for e in errors), (path.name, errors)


def test_trn_cost_leaves_out_an_unpriced_type_and_says_so():
    """AWS lists no Trn3 price: the bill counts the group as 0, marked assumed, and names the type."""
    price = prices.instance_price("trn3.48xlarge")
    assert price.usd == 0 and price.assumed
    result = bill(build_config(RAW))
    (group,) = result.groups
    assert group.hourly == 0 and group.assumed and "trn3.48xlarge has no price" in group.note
    assert result.idle_hourly > 0
