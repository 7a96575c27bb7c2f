"""Config mistakes a new user makes in the first hour: each is one line naming the file, the field, the
value and what is allowed; and the overrides that make `-c region=` and `-c nodes=` usable."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainium_cdk.app.config import DEFAULT_CONFIG_PATH, Config, ConfigError, build_config, load_config


def one_line(err: pytest.ExceptionInfo[ConfigError], *words: str) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    for word in words:
        assert word in text, (word, text)
    return text


# -- overrides ---------------------------------------------------------------------------------------


def test_region_override_picks_the_catalogs_az_ids_for_that_region():
    config = load_config(None, {"region": "us-east-1"})
    assert config.region == "us-east-1"
    assert config.compute_groups[0].az_ids == ("use1-az6",)
    assert config.vpc_az_ids == ("use1-az6", "use1-az5")  # the file's usw2 VPC AZs are derived again


def test_region_override_without_known_azs_says_so_and_names_the_way_out():
    with pytest.raises(ConfigError) as err:
        load_config(None, {"region": "eu-west-1"})
    one_line(err, "default.yaml", "region = 'eu-west-1'", "trn1.32xlarge", "-c az_ids=", "instance_offerings")


def test_region_override_keeps_az_ids_the_file_gives_for_that_region(tmp_path):
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    raw["compute_groups"][0]["az_ids"] = "use1-az5"
    raw["network"]["az_ids"] = ["use1-az5", "use1-az6"]
    path = tmp_path / "east.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path, {"region": "us-east-1"})
    assert config.compute_groups[0].az_ids == ("use1-az5",) and config.vpc_az_ids == ("use1-az5", "use1-az6")


def test_region_override_uses_instance_offerings_of_the_file():
    raw = {"instance_offerings": {"trn1.32xlarge": {"us-east-2": ["use2-az3", "use2-az2"]}}}
    config = build_config(raw, {"region": "us-east-2"})
    assert config.compute_groups[0].az_ids == ("use2-az3",) and config.vpc_az_ids == ("use2-az3", "use2-az2")


def test_az_ids_override_sets_every_group_and_keeps_a_vpc_that_holds_it():
    config = load_config(None, {"az_ids": "usw2-az3"})
    assert [g.az_ids for g in config.compute_groups] == [("usw2-az3",)]
    assert config.vpc_az_ids == ("usw2-az4", "usw2-az3")


def test_az_ids_with_region_for_a_type_the_catalog_does_not_place():
    config = load_config(None, {"region": "us-east-1", "az_ids": "use1-az5"})
    assert config.compute_groups[0].az_ids == ("use1-az5",) and config.vpc_az_ids == ("use1-az5", "use1-az6")


def test_nodes_above_the_maximum_names_max_nodes_and_max_nodes_override_raises_it():
    with pytest.raises(ConfigError) as err:
        load_config(None, {"nodes": "8"})
    one_line(err, "compute_groups[0].nodes = 8", "max_nodes (4)", "-c max_nodes=N")
    config = load_config(None, {"nodes": "8", "max_nodes": "8"})
    assert (config.compute_groups[0].nodes, config.compute_groups[0].maximum) == (8, 8)


@pytest.mark.parametrize("value", ["lots", ""])
def test_max_nodes_override_not_a_number(value):
    with pytest.raises(ConfigError) as err:
        load_config(None, {"max_nodes": value})
    one_line(err, "max_nodes", "whole number")


# -- the file itself ---------------------------------------------------------------------------------


def test_a_directory_as_config(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path)
    one_line(err, f"config = '{tmp_path}'", "not a directory")


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("project: x\nregion: us-west-2\nbackends: [eks\ncompute_groups: []\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = one_line(err, f"{path}:4:", "valid YAML")
    assert "<unicode string>" not in text


def test_empty_file_is_an_error_and_config_default_means_the_builtin_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    one_line(err, "empty.yaml", "empty file", "-c config=default")
    assert load_config("default") == Config()


def test_a_settings_error_names_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("compute_groups:\n  - name: train\n    nodes: 0\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: compute_groups[0].nodes = 0: between 1")
    assert err.value.field == "compute_groups[0].nodes"  # the field survives for callers


def test_several_problems_stay_on_one_line(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text("projekt: x\nregoin: us-west-2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    one_line(err, "projekt = 'x': unknown setting", "; regoin = 'us-west-2': unknown setting")


OFFERINGS = {
    "region first": (
        {"us-east-2": {"trn2.48xlarge": ["use2-az3"]}},
        ("instance_offerings.us-east-2", "an instance type here, not a region", "instance type -> region -> AZ IDs"),
    ),
    "list without region": (
        {"trn2.48xlarge": ["use2-az3"]},
        ("instance_offerings.trn2.48xlarge", "instance type -> region -> AZ IDs"),
    ),
    "AZ of another region": (
        {"trn2.48xlarge": {"us-east-2": ["usw2-az4"]}},
        ("instance_offerings.trn2.48xlarge.us-east-2", "AZ IDs of us-east-2 (use2-az1"),
    ),
    "not a region": (
        {"trn2.48xlarge": {"use2": ["use2-az3"]}},
        ("instance_offerings.trn2.48xlarge.use2", "a region code here"),
    ),
    "unknown type": (
        {"trn9.large": {"us-east-2": ["use2-az3"]}},
        ("instance_offerings.trn9.large = 'trn9.large'", "unknown instance type"),
    ),
}


@pytest.mark.parametrize("case", OFFERINGS)
def test_instance_offerings_shape(case):
    offerings, words = OFFERINGS[case]
    with pytest.raises(ConfigError) as err:
        build_config({"instance_offerings": offerings})
    one_line(err, *words)


def test_instance_offerings_as_trn_azs_writes_them():
    config = build_config({"instance_offerings": {"trn2.48xlarge": {"us-east-2": ["use2-az3", "use2-az2"]}}})
    assert config.instance_offerings == {"trn2.48xlarge": {"us-east-2": ("use2-az3", "use2-az2")}}


def test_readme_documents_the_offerings_shape():
    from tests.support.readme import page

    assert "instance type -> region -> AZ IDs" in page("guide/configuration.md")
