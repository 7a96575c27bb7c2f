"""The typed config: defaults, overrides, and bad input that must fail with a clear message."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.helpers import BASE_CONFIG, US_EAST_2
from trainium_cdk.app.config import DEFAULT_CONFIG_PATH, ConfigError, az_id_prefix, build_config, load_config


def _raw(**sections: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE_CONFIG)
    group = sections.pop("group", None)
    if group is not None:
        raw["compute_groups"][0].update(group)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return raw


def test_default_config_is_the_documented_default_app():
    config = load_config()
    assert config.region == "us-west-2"
    assert config.backends == ("eks",)
    (group,) = config.compute_groups
    assert (group.instance_type, group.nodes, group.az_ids) == ("trn1.32xlarge", 2, ("usw2-az4",))
    assert config.vpc_az_ids == ("usw2-az4", "usw2-az3")
    assert config.storage.deployment_type == "PERSISTENT_2"
    assert (config.storage.capacity_gib, config.storage.throughput_mb_per_tib) == (1200, 250)
    assert config.storage.removal_policy == "retain"


def test_context_overrides_apply_to_every_group():
    config = load_config(
        DEFAULT_CONFIG_PATH,
        {"region": "us-west-2", "backends": "eks,batch", "instance_type": "trn1n.32xlarge", "nodes": "3"},
    )
    assert config.backends == ("eks", "batch")
    assert [(g.instance_type, g.nodes) for g in config.compute_groups] == [("trn1n.32xlarge", 3)]


def test_vpc_azs_default_to_compute_az_then_other_offered_az():
    raw = _raw(network={"az_ids": None})
    assert build_config(raw).vpc_az_ids == ("usw2-az4", "usw2-az3")


def test_trn2_offerings_come_from_config():
    config = build_config(_raw(**US_EAST_2, group={"instance_type": "trn2.48xlarge", "az_ids": "use2-az3"}))
    assert config.offered_az_ids(config.spec(config.compute_groups[0])) == ("use2-az3", "use2-az2")


def test_custom_instance_type_is_registered():
    raw = _raw(
        custom_instance_types=[
            {
                "name": "trn3.48xlarge", "neuron_devices": 16, "neuron_cores": 128, "efa_interfaces": 16,
                "network_cards": 16, "vcpus": 192, "memory_gib": 2048,
                "offered_az_ids": {"us-west-2": ["usw2-az4"]},
            }
        ],
        group={"instance_type": "trn3.48xlarge"},
    )
    config = build_config(raw)
    assert config.spec(config.compute_groups[0]).efa_interfaces == 16


def test_az_id_prefix():
    assert az_id_prefix("us-west-2") == "usw2"
    assert az_id_prefix("ap-northeast-1") == "apne1"
    assert az_id_prefix("eu-central-1") == "euc1"


# Each case: (raw config, context overrides, substrings the message must contain: field, value, allowed).
BAD_INPUT: dict[str, tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]] = {
    "unknown instance type": (
        _raw(group={"instance_type": "trn3.48xlarge"}), {},
        ("compute_groups[0].instance_type", "'trn3.48xlarge'", "unknown instance type", "trn1.32xlarge"),
    ),
    "unknown instance type override": (
        _raw(), {"instance_type": "p5.48xlarge"}, ("compute_groups[0].instance_type", "'p5.48xlarge'", "allowed:"),
    ),
    "unknown backend": (
        _raw(backends=["eks", "sagemaker"]), {}, ("backends", "sagemaker", "allowed: eks, batch, parallelcluster"),
    ),
    "unknown backend override": (_raw(), {"backends": "eks,k8s"}, ("backends", "'k8s'", "allowed: eks")),
    "backend twice": (_raw(backends=["eks", "eks"]), {}, ("backends", "each backend at most once")),
    "nodes zero": (_raw(group={"nodes": 0}), {}, ("compute_groups[0].nodes", "= 0", "between 1 and")),
    "nodes above the group maximum": (
        _raw(group={"nodes": 5, "max_nodes": 4}), {}, ("compute_groups[0].nodes", "= 5", "max_nodes (4)"),
    ),
    "nodes override above maximum": (
        _raw(group={"max_nodes": 4}), {"nodes": "16"}, ("compute_groups[0].nodes", "= 16", "max_nodes (4)"),
    ),
    "nodes override not a number": (_raw(), {"nodes": "two"}, ("nodes", "'two'", "whole number")),
    "team name not a DNS label": (
        _raw(teams=[{"name": "Research", "share": 3}]), {}, ("teams[0].name", "'Research'", "DNS label"),
    ),
    "team share zero": (_raw(teams=[{"name": "research", "share": 0}]), {}, ("teams[0].share", "0", "1 to 999")),
    "team share above Batch's range": (
        _raw(teams=[{"name": "research", "share": 1000}]), {}, ("teams[0].share", "1000", "1 to 999"),
    ),
    "team twice": (_raw(teams=[{"name": "a"}, {"name": "a"}]), {}, ("teams", "['a', 'a']", "each team's name once")),
    "min above nodes": (_raw(group={"min_nodes": 3}), {}, ("compute_groups[0].min_nodes", "= 3", "between 0")),
    "FSx capacity not accepted": (
        _raw(storage={"capacity_gib": 1000}), {},
        ("storage.capacity_gib", "= 1000", "PERSISTENT_2 accepts 1200 GiB or a multiple of 2400"),
    ),
    "FSx capacity 3600": (_raw(storage={"capacity_gib": 3600}), {}, ("storage.capacity_gib", "= 3600", "2400")),
    "FSx scratch capacity": (
        _raw(storage={"deployment_type": "SCRATCH_2", "throughput_mb_per_tib": None, "capacity_gib": 2000}), {},
        ("storage.capacity_gib", "= 2000", "SCRATCH_2 accepts"),
    ),
    "throughput not offered": (
        _raw(storage={"throughput_mb_per_tib": 200}), {},
        ("storage.throughput_mb_per_tib", "= 200", "PERSISTENT_2 offers 125, 250, 500, 1000"),
    ),
    "throughput on scratch": (
        _raw(storage={"deployment_type": "SCRATCH_2", "throughput_mb_per_tib": 250}), {},
        ("storage.throughput_mb_per_tib", "= 250", "fixed throughput"),
    ),
    "unknown deployment type": (
        _raw(storage={"deployment_type": "PERSISTENT_3"}), {},
        ("storage.deployment_type", "'PERSISTENT_3'", "PERSISTENT_2", "SCRATCH_2"),
    ),
    "AZ does not offer the type (catalog)": (
        _raw(group={"az_ids": "usw2-az1"}, network={"az_ids": ["usw2-az1", "usw2-az4"]}), {},
        ("compute_groups[0].az_ids[0]", "'usw2-az1'", "does not offer trn1.32xlarge", "usw2-az4, usw2-az3"),
    ),
    "AZ does not offer the type (user config)": (
        _raw(region="us-east-2", group={"instance_type": "trn2u.48xlarge", "az_ids": "use2-az1"},
             network={"az_ids": ["use2-az1", "use2-az3"]}),
        {},
        ("compute_groups[0].az_ids[0]", "'use2-az1'", "does not offer trn2u.48xlarge", "allowed: use2-az3, use2-az2"),
    ),
    "no known AZ in region": (
        _raw(
            group={"instance_type": "trn2.48xlarge"},
            instance_offerings={"trn2.48xlarge": {"us-east-2": ["use2-az3"]}},
        ),
        {},
        ("compute_groups[0].az_ids[0]", "no AZ of us-west-2 is known to offer trn2.48xlarge", "trn azs"),
    ),
    "AZ of another region": (
        _raw(group={"az_ids": "use1-az6"}), {}, ("compute_groups[0].az_ids[0]", "'use1-az6'", "region us-west-2"),
    ),
    "AZ name instead of ID": (
        _raw(group={"az_ids": "us-west-2a"}), {}, ("compute_groups[0].az_ids[0]", "'us-west-2a'", "an AZ ID such as"),
    ),
    "EFA instance in more than one subnet": (
        _raw(group={"az_ids": ["usw2-az4", "usw2-az3"]}), {},
        ("compute_groups[0].az_ids", "usw2-az3", "exactly one AZ ID", "EFA"),
    ),
    "CIDR that does not fit": (
        _raw(network={"cidr": "10.0.0.0/19", "private_subnet_mask": 20}), {},
        ("network.cidr", "'10.0.0.0/19'", "too small", "2 AZs"),
    ),
    "CIDR not a network": (_raw(network={"cidr": "10.0.0.1/16"}), {}, ("network.cidr", "'10.0.0.1/16'", "IPv4")),
    "CIDR prefix too long": (_raw(network={"cidr": "10.0.0.0/26"}), {}, ("network.cidr", "/16 and /24")),
    "subnet mask shorter than VPC": (
        _raw(network={"private_subnet_mask": 15}), {}, ("network.private_subnet_mask", "= 15", "longer than"),
    ),
    "one VPC AZ": (_raw(network={"az_ids": ["usw2-az4"]}), {}, ("network.az_ids", "at least two distinct AZ IDs")),
    "VPC misses the compute AZ": (
        _raw(network={"az_ids": ["usw2-az3", "usw2-az1"]}), {}, ("network.az_ids", "compute_groups[0]", "usw2-az4"),
    ),
    "reservation without id": (
        _raw(group={"capacity": {"type": "reservation"}}), {},
        ("compute_groups[0].capacity.reservation_id", "None", "reservation id like cr-"),
    ),
    "unknown capacity type": (
        _raw(group={"capacity": {"type": "spot"}}), {}, ("compute_groups[0].capacity.type", "'spot'", "on-demand"),
    ),
    "duplicate group name": (
        _raw(compute_groups=[BASE_CONFIG["compute_groups"][0]] * 2), {},
        ("compute_groups[1].name", "'train'", "unique"),
    ),
    "bad group name": (_raw(group={"name": "Train_1"}), {}, ("compute_groups[0].name", "'Train_1'", "lower-case")),
    "root volume too small": (
        _raw(group={"root_volume_gib": 8}), {}, ("compute_groups[0].root_volume_gib", "= 8", "between 64 and 16384"),
    ),
    "typo in a setting": (_raw(group={"node": 2}), {}, ("compute_groups[0].node", "unknown setting")),
    "flow log retention": (
        _raw(network={"flow_log_retention_days": 10}), {}, ("network.flow_log_retention_days", "= 10", "1, 3, 5, 7"),
    ),
    "unknown region": (_raw(region="mars-1"), {}, ("region", "'mars-1'", "us-west-2")),
    "storage group unknown": (
        _raw(storage={"compute_group": "dev"}), {}, ("storage.compute_group", "'dev'", "allowed: train"),
    ),
    "data repository relative path": (
        _raw(storage={"data_repository": {"file_system_path": "data"}}), {},
        ("storage.data_repository.file_system_path", "'data'", "absolute path"),
    ),
    "unknown override": (_raw(), {"instances": "trn1"}, ("context", "'instances'", "allowed: region")),
    "job nodes above the group maximum": (
        _raw(workloads={"jobs": [{"name": "bert", "nodes": 3}]}), {},
        ("workloads.jobs[0].nodes", "= 3", "max_nodes of group train (2)"),
    ),
    "data loader without storage": (
        _raw(storage={"enabled": False}, workloads={"data_loader": {"s3_uri": "s3://bucket/data/"}}), {},
        ("workloads.data_loader", "'s3://bucket/data/'", "storage.enabled is false"),
    ),
    "tensorboard without storage": (
        _raw(storage={"enabled": False}, workloads={"tensorboard": True}), {},
        ("workloads.tensorboard", "True", "storage.enabled is false"),
    ),
    "shell without storage": (
        _raw(storage={"enabled": False}, workloads={"shell": True}), {},
        ("workloads.shell", "True", "storage.enabled is false"),
    ),
    "job cache set with a slash": (
        _raw(workloads={"jobs": [{"name": "bert", "cache_set": "team/bert"}]}), {},
        ("workloads.jobs[0].cache_set", "'team/bert'", "no '/'"),
    ),
    "job processes above the cores": (
        _raw(workloads={"jobs": [{"name": "bert", "processes_per_node": 64}]}), {},
        ("workloads.jobs[0].processes_per_node", "= 64", "32 NeuronCores of trn1.32xlarge"),
    ),
    "job on an unknown group": (
        _raw(workloads={"jobs": [{"name": "bert", "group": "dev"}]}), {},
        ("workloads.jobs[0].group", "'dev'", "allowed: train"),
    ),
    "multi-node job without volcano": (
        _raw(workloads={"volcano": False, "jobs": [{"name": "bert"}]}), {},
        ("workloads.jobs[0].nodes", "= 2", "workloads.volcano"),
    ),
    "data loader not an S3 URI": (
        _raw(workloads={"data_loader": {"s3_uri": "https://example.com/x"}}), {},
        ("workloads.data_loader.s3_uri", "'https://example.com/x'", "S3 URI"),
    ),
    "public endpoint CIDR with host bits": (
        _raw(eks={"endpoint_access": "public-and-private", "public_access_cidrs": ["203.0.113.0/24", "10.1.2.3/8"]}),
        {}, ("eks.public_access_cidrs[1]", "'10.1.2.3/8'", "IPv4 network"),
    ),
    "public endpoint CIDR not a CIDR": (
        _raw(eks={"endpoint_access": "public-and-private", "public_access_cidrs": ["office"]}),
        {}, ("eks.public_access_cidrs[0]", "'office'", "IPv4 network"),
    ),
    "more Batch groups than Batch's job queue quota": (
        _raw(backends=["batch"], compute_groups=[
            {"name": f"g{i}", "instance_type": "trn1.32xlarge", "az_ids": "usw2-az4"} for i in range(51)
        ]), {},
        ("compute_groups = 51", "at most 49 groups with the batch backend", "as is the CPU queue",
         "batch.cpu_instance_type: null", "per account and region"),
    ),
    "a Batch stuck-job timeout below Batch's 10 minutes": (
        _raw(batch={"runnable_timeout_minutes": 5}), {},
        ("batch.runnable_timeout_minutes", "5", "10 to 1440 minutes"),
    ),
    "a Batch update timeout beyond Batch's limit": (
        _raw(batch={"update_timeout_minutes": 9000}), {},
        ("batch.update_timeout_minutes", "9000", "1 to 7200 minutes"),
    ),
    "public endpoint without CIDRs": (
        _raw(eks={"endpoint_access": "public-and-private"}), {}, ("eks.public_access_cidrs", "[]", "endpoint_access: private"),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT), ids=sorted(BAD_INPUT))
def test_bad_input_names_field_value_and_allowed(case):
    raw, overrides, expected = BAD_INPUT[case]
    with pytest.raises(ConfigError) as caught:
        build_config(raw, overrides)
    message = str(caught.value)
    print(f"{case}: {message}")
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_there_are_at_least_twenty_bad_input_cases():
    assert len(BAD_INPUT) >= 20


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="a YAML file that exists"):
        load_config(tmp_path / "nope.yaml")


def test_config_file_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)
