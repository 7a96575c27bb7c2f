"""The instance catalog: the facts every construct reads.

These tests hold the catalog to properties a wrong row breaks (NeuronCores from the chip, EFA from the network
cards, vCPUs from the size name, one memory ratio per family, AZ IDs of their region), not to a copy of its rows:
adding or correcting a type needs no edit here. The literals below are facts about the chips, from the Neuron
documentation, that every row of that chip must agree with.
"""

from __future__ import annotations

import re
from collections import defaultdict
from fractions import Fraction

import pytest

from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import (
    AZ_ID,
    BUILTIN_INSTANCE_TYPES,
    DEFAULT_CATALOG,
    EFA_TRAINING_TYPES,
    SUPPORTED_TRAINING_TYPES,
    InstanceSpec,
    az_id_prefix,
)

# Physical NeuronCores per Neuron device (one chip), by chip (Neuron docs, architecture pages):
# Trainium: "each Trainium include 2 x NeuronCore-v2" (about-neuron/arch/neuron-hardware/trainium);
# Inferentia2: two NeuronCore-v2 per chip (about-neuron/arch/neuron-hardware/inferentia2);
# Trainium2: "Every Trainium2 chip contains eight NeuronCore-V3 cores" (about-neuron/arch/neuron-hardware/trainium2).
PHYSICAL_CORES_PER_DEVICE = {"Trainium": 2, "Inferentia2": 2, "Trainium2": 8}
# Physical NeuronCores per logical one at the default setting: LNC=2 on Trainium2 ("neuronx-cc defaults to LNC=2
# on Trn2 and later", Neuron docs, compiler/error-codes/EVRF066; "On trn1, only lnc=1 is supported", EARG001);
# 1 on the NeuronCore-v2 chips. The catalog's neuron_cores is the logical count: one process each.
DEFAULT_LNC = {"Trainium": 1, "Inferentia2": 1, "Trainium2": 2}

ALL_TYPES = [spec.name for spec in BUILTIN_INSTANCE_TYPES]
EFA_TYPES = [spec.name for spec in BUILTIN_INSTANCE_TYPES if spec.has_efa]


def spec_of(name: str) -> InstanceSpec:
    return DEFAULT_CATALOG.get(name)


def test_every_builtin_type_is_in_the_catalog_once():
    assert len(ALL_TYPES) == len(set(ALL_TYPES)) and ALL_TYPES
    assert set(DEFAULT_CATALOG.names()) == set(ALL_TYPES)


@pytest.mark.parametrize("name", ALL_TYPES)
def test_neuron_cores_are_the_devices_times_the_logical_cores_of_their_chip(name):
    spec = spec_of(name)
    assert spec.accelerator in PHYSICAL_CORES_PER_DEVICE, f"{name}: a chip the Neuron figures above do not cover"
    per_device = PHYSICAL_CORES_PER_DEVICE[spec.accelerator] // DEFAULT_LNC[spec.accelerator]
    assert spec.neuron_cores == spec.neuron_devices * per_device
    # What a healthy node shows (node/health_check.py): the logical count, and the physical one where they differ.
    physical = spec.neuron_devices * PHYSICAL_CORES_PER_DEVICE[spec.accelerator]
    assert set(spec.neuron_core_counts) == {spec.neuron_cores, physical}


@pytest.mark.parametrize("name", ALL_TYPES)
def test_the_family_names_its_chip_and_only_trainium_trains(name):
    """EC2 names a family by its chip and generation: trn1/trn1n Trainium, trn2/trn2u Trainium2, inf2 Inferentia2."""
    spec = spec_of(name)
    match = re.fullmatch(r"(trn|inf)([0-9]+)[a-z]*", spec.family)
    assert match, f"{name}: not a Neuron family name"
    chip = {"trn": "Trainium", "inf": "Inferentia"}[match.group(1)]
    # The first generation of a chip is named without a number (Trainium), every later one with it (Trainium2).
    generation = match.group(2)
    assert spec.accelerator == (chip if generation == "1" else f"{chip}{generation}")
    assert spec.for_training == (chip == "Trainium")


@pytest.mark.parametrize("name", ALL_TYPES)
def test_vcpus_follow_the_size_name(name):
    """EC2's sizes: an xlarge has 4 vCPUs and an Nxlarge N times as many (trn1.2xlarge 8, inf2.xlarge 4, ...)."""
    size = name.split(".", 1)[1]
    match = re.fullmatch(r"([0-9]*)xlarge", size)
    if not match:
        pytest.skip(f"{size}: no vCPU rule for this size name")
    assert spec_of(name).vcpus == 4 * int(match.group(1) or 1)


def test_every_size_of_a_generation_has_the_same_memory_per_vcpu():
    """EC2 scales memory with vCPUs within a family, and its attribute letters after the generation (trn1n: network,
    trn2u: UltraServer; EC2 "Instance type naming conventions") change the network, not the host: trn1 and trn1n,
    trn2 and trn2u share one GiB-per-vCPU ratio. A row off its generation's ratio is a typo."""
    ratios: dict[str, set[Fraction]] = defaultdict(set)
    for spec in BUILTIN_INSTANCE_TYPES:
        generation = re.sub(r"[a-z]+$", "", spec.family)
        ratios[generation].add(Fraction(spec.memory_gib, spec.vcpus))
    assert {family: r for family, r in ratios.items() if len(r) > 1} == {}


@pytest.mark.parametrize("name", EFA_TYPES)
def test_an_efa_type_carries_one_efa_interface_on_every_network_card(name):
    spec = spec_of(name)
    # EC2 attaches at most one EFA interface per network card; a training type uses them all (describe-instance-
    # types: MaximumEfaInterfaces equals MaximumNetworkCards on trn1, trn1n and trn2), fewer would leave bandwidth idle.
    assert spec.efa_interfaces == spec.network_cards


@pytest.mark.parametrize("name", EFA_TYPES)
def test_efa_slots_one_per_network_card(name):
    slots = spec_of(name).efa_slots
    assert len(slots) == spec_of(name).efa_interfaces
    assert sorted(s.network_card_index for s in slots) == list(range(len(slots)))
    # Card 0 is the primary interface (device 0); every other card carries its EFA on device index 1.
    assert {(s.network_card_index == 0, s.device_index) for s in slots} <= {(True, 0), (False, 1)}


def test_the_supported_and_efa_lists_are_read_from_the_rows():
    assert SUPPORTED_TRAINING_TYPES == tuple(s.name for s in BUILTIN_INSTANCE_TYPES if s.for_training)
    assert EFA_TRAINING_TYPES == tuple(n for n in SUPPORTED_TRAINING_TYPES if spec_of(n).has_efa)
    assert DEFAULT_CATALOG.efa_types() == tuple(sorted(EFA_TYPES))
    assert DEFAULT_CATALOG.neuron_types() == tuple(sorted(ALL_TYPES))
    # A single-node type and a multi-node one, at least: both paths of the backends have a type to run.
    assert set(SUPPORTED_TRAINING_TYPES) - set(EFA_TRAINING_TYPES) and EFA_TRAINING_TYPES


@pytest.mark.parametrize("name", ALL_TYPES)
def test_device_paths(name):
    spec = spec_of(name)
    assert spec.neuron_device_paths == tuple(f"/dev/neuron{i}" for i in range(spec.neuron_devices))
    assert spec.efa_device_paths == tuple(f"/dev/infiniband/uverbs{i}" for i in range(spec.efa_interfaces))


@pytest.mark.parametrize("name", ALL_TYPES)
def test_known_azs_are_az_ids_of_their_region(name):
    spec = spec_of(name)
    for region, az_ids in spec.offered_az_ids.items():
        assert az_ids and len(set(az_ids)) == len(az_ids), (region, az_ids)
        for az_id in az_ids:
            match = AZ_ID.fullmatch(az_id)
            assert match and match.group(1) == az_id_prefix(region), (region, az_id)


def test_a_region_the_catalog_does_not_know_is_unknown_not_excluded():
    spec = spec_of(ALL_TYPES[0])
    assert spec.az_ids_in("xx-nowhere-9") is None
    for region, az_ids in spec.offered_az_ids.items():
        assert spec.az_ids_in(region) == az_ids


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
