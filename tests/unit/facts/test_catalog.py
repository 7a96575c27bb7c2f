"""The instance catalog: the facts every construct reads."""

from __future__ import annotations

import pytest

from trainium_cdk.facts.catalog import DEFAULT_CATALOG, EFA_TRAINING_TYPES, SUPPORTED_TRAINING_TYPES, InstanceSpec
from trainium_cdk.errors import ConfigError

# (Neuron devices, NeuronCores, EFA interfaces, vCPU, memory GiB), from the EC2 and Neuron docs.
EXPECTED = {
    "trn1.2xlarge": (1, 2, 0, 8, 32),
    "trn1.32xlarge": (16, 32, 8, 128, 512),
    "trn1n.32xlarge": (16, 32, 16, 128, 512),
    "trn2.48xlarge": (16, 64, 16, 192, 2048),
    "trn2u.48xlarge": (16, 64, 16, 192, 2048),
    "inf2.xlarge": (1, 2, 0, 4, 16),
    "inf2.8xlarge": (1, 2, 0, 32, 128),
    "inf2.24xlarge": (6, 12, 0, 96, 384),
    "inf2.48xlarge": (12, 24, 0, 192, 768),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_facts(name):
    spec = DEFAULT_CATALOG.get(name)
    assert (spec.neuron_devices, spec.neuron_cores, spec.efa_interfaces, spec.vcpus, spec.memory_gib) == EXPECTED[name]


def test_supported_training_types():
    assert SUPPORTED_TRAINING_TYPES == (
        "trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge",
    )
    assert EFA_TRAINING_TYPES == ("trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge")
    assert DEFAULT_CATALOG.efa_types() == EFA_TRAINING_TYPES


@pytest.mark.parametrize("name", EFA_TRAINING_TYPES)
def test_efa_slots_one_per_network_card(name):
    spec = DEFAULT_CATALOG.get(name)
    slots = spec.efa_slots
    assert len(slots) == spec.efa_interfaces
    assert sorted(s.network_card_index for s in slots) == list(range(spec.efa_interfaces))
    assert [s.device_index for s in slots] == [0] + [1] * (spec.efa_interfaces - 1)


def test_device_paths():
    spec = DEFAULT_CATALOG.get("trn1.32xlarge")
    assert spec.neuron_device_paths[-1] == "/dev/neuron15" and len(spec.neuron_device_paths) == 16
    assert spec.efa_device_paths == tuple(f"/dev/infiniband/uverbs{i}" for i in range(8))
    assert DEFAULT_CATALOG.get("trn1.2xlarge").efa_device_paths == ()


def test_known_azs_by_id():
    assert DEFAULT_CATALOG.get("trn1.32xlarge").az_ids_in("us-west-2") == ("usw2-az4", "usw2-az3")
    assert DEFAULT_CATALOG.get("trn2.48xlarge").az_ids_in("us-west-2") is None


def test_unknown_type_lists_what_is_allowed():
    with pytest.raises(ConfigError, match=r"instance_type = 'p5.48xlarge': unknown instance type; allowed: .*trn1"):
        DEFAULT_CATALOG.get("p5.48xlarge")


def test_register_rejects_more_efa_than_cards():
    with pytest.raises(ConfigError, match="efa_interfaces"):
        InstanceSpec(
            name="x.large", accelerator="Trainium", neuron_devices=1, neuron_cores=2, efa_interfaces=4,
            network_cards=2, vcpus=8, memory_gib=32, network_gbps=25,
        )


def test_the_lustre_literals_the_config_types_with_are_the_facts_the_constructs_read():
    from typing import get_args

    from trainium_cdk.facts import catalog

    assert tuple(catalog.LUSTRE_THROUGHPUT_MB_PER_TIB) == get_args(catalog.LustreDeploymentType)
    assert catalog.LUSTRE_VERSIONS == get_args(catalog.LustreVersion) and catalog.LUSTRE_VERSIONS
    assert catalog.LUSTRE_COMPRESSION_TYPES == get_args(catalog.LustreCompression)
