"""`trn azs`: AZ names and IDs from moto's EC2 data, and the config edit of --write."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.cli_support import (
    DEFAULT_YAML,
    assert_one_clean_line,
    copy_default_config,
    run_cli,
    write_config,
)
from trainium_cdk.app.config import ConfigError, load_config
from trainium_cdk.cli import yaml_edit
from trainium_cdk.cli._common import CliError

# What moto 5.2.5 answers in us-west-2 (its AZ names map to these IDs in its fake account).
MOTO_TRN1 = {"us-west-2b": "usw2-az1", "us-west-2d": "usw2-az4"}


def test_lists_az_names_and_ids(aws):
    result = run_cli("azs", "--instance-type", "trn1.32xlarge", "--region", "us-west-2")
    assert result.code == 0, result
    lines = result.out.splitlines()
    assert lines[0].startswith("trn1.32xlarge in us-west-2: offered in 2 of 4 zones")
    assert lines[1].split() == ["AZ", "name", "AZ", "ID"]
    assert [line.split() for line in lines[2:4]] == [[name, az_id] for name, az_id in MOTO_TRN1.items()]
    offerings = aws.of("DescribeInstanceTypeOfferings")
    assert offerings == [{
        "LocationType": "availability-zone",
        "Filters": [{"Name": "instance-type", "Values": ["trn1.32xlarge"]}],
    }]


def test_region_defaults_to_the_config(aws, tmp_path):
    path = copy_default_config(tmp_path)
    result = run_cli("azs", "--instance-type", "trn1n.32xlarge", "--config", str(path))
    assert result.code == 0, result
    assert "us-west-2d  usw2-az4" in result.out


def test_write_records_az_ids_keeps_the_rest_and_still_loads(aws, tmp_path):
    path = copy_default_config(tmp_path)
    before = path.read_text()
    result = run_cli(
        "azs", "--instance-type", "trn1.32xlarge", "--region", "us-west-2", "--config", str(path), "--write"
    )
    assert result.code == 0, result
    assert "wrote instance_offerings.trn1.32xlarge.us-west-2 = [usw2-az1, usw2-az4]" in result.out
    after = path.read_text()
    # Every line of the old file, comments included, is still there, in order, at the top.
    assert after.startswith(before)
    assert "instance_offerings:\n  trn1.32xlarge:\n    us-west-2: [usw2-az1, usw2-az4]\n" in after
    config = load_config(path)
    assert config.instance_offerings == {"trn1.32xlarge": {"us-west-2": ("usw2-az1", "usw2-az4")}}
    assert config.offered_az_ids(config.catalog.get("trn1.32xlarge")) == ("usw2-az4", "usw2-az3", "usw2-az1")
    assert result.err == ""


def test_write_makes_an_az_usable_that_the_catalog_does_not_know(aws, tmp_path):
    text = DEFAULT_YAML.read_text().replace("az_ids: usw2-az4", "az_ids: usw2-az1").replace(
        "az_ids: [usw2-az4, usw2-az3]", "az_ids: [usw2-az1, usw2-az4]"
    )
    path = write_config(tmp_path, text)
    with pytest.raises(Exception, match="usw2-az1"):
        load_config(path)
    result = run_cli("azs", "--instance-type", "trn1.32xlarge", "--config", str(path), "--write")
    assert result.code == 0, result
    assert load_config(path).compute_groups[0].az_ids == ("usw2-az1",)


def test_write_replaces_one_entry_keeps_others_and_is_idempotent(aws, tmp_path):
    text = (
        "# my deployment\n"
        "project: trainium\n"
        "instance_offerings:  # keep this note\n"
        "  # old comment inside the block\n"
        "  trn1.32xlarge:\n"
        "    us-west-2: [usw2-az9]\n"
        "    us-east-2: [use2-az3]\n"
        "  trn2.48xlarge:\n"
        "    us-east-2: [use2-az3]\n"
        "\n"
        "# storage comes last\n"
        "storage:\n"
        "  capacity_gib: 1200\n"
    )
    path = write_config(tmp_path, text)
    args = ("azs", "--instance-type", "trn1.32xlarge", "--region", "us-west-2", "--config", str(path), "--write")
    assert run_cli(*args).code == 0
    after = path.read_text()
    assert after == (
        "# my deployment\n"
        "project: trainium\n"
        "instance_offerings:  # keep this note\n"
        "  trn1.32xlarge:\n"
        "    us-west-2: [usw2-az1, usw2-az4]\n"
        "    us-east-2: [use2-az3]\n"
        "  trn2.48xlarge:\n"
        "    us-east-2: [use2-az3]\n"
        "\n"
        "# storage comes last\n"
        "storage:\n"
        "  capacity_gib: 1200\n"
    )
    again = run_cli(*args)
    assert again.code == 0
    assert "nothing to write" in again.out
    assert path.read_text() == after


def test_dry_run_prints_the_diff_and_writes_nothing(aws, tmp_path):
    path = copy_default_config(tmp_path)
    before = path.read_text()
    result = run_cli(
        "azs", "--instance-type", "trn1n.32xlarge", "--region", "us-west-2", "--config", str(path),
        "--write", "--dry-run",
    )
    assert result.code == 0, result
    assert path.read_text() == before
    assert "dry run: would set instance_offerings.trn1n.32xlarge.us-west-2 = [usw2-az4]" in result.out
    assert "+instance_offerings:\n+  trn1n.32xlarge:\n+    us-west-2: [usw2-az4]\n" in result.out


def test_dry_run_needs_write(aws):
    result = run_cli("azs", "--instance-type", "trn1.32xlarge", "--region", "us-west-2", "--dry-run")
    assert_one_clean_line(result, "--dry-run goes with --write")


def test_type_offered_nowhere_is_exit_1_with_a_clear_message(aws, tmp_path):
    path = copy_default_config(tmp_path)
    before = path.read_text()
    result = run_cli(
        "azs", "--instance-type", "trn2.48xlarge", "--region", "us-west-2", "--config", str(path), "--write"
    )
    assert result.code == 1
    assert result.out == ""
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert "trn2.48xlarge is not offered in any Availability Zone of us-west-2" in result.err
    assert path.read_text() == before


def test_bad_region_is_a_config_error_before_any_call(aws):
    result = run_cli("azs", "--instance-type", "trn1.32xlarge", "--region", "us-westt-2")
    assert_one_clean_line(result, "configuration error", "region")
    assert aws.calls == []


def test_missing_config_file_for_write(aws, tmp_path):
    result = run_cli(
        "azs", "--instance-type", "trn1.32xlarge", "--region", "us-west-2", "--config", str(tmp_path / "nope.yaml"),
        "--write",
    )
    assert_one_clean_line(result, "invalid argument: --config", "nope.yaml")


def test_no_credentials_is_one_line(no_credentials):
    result = run_cli("azs", "--instance-type", "trn1.32xlarge", "--region", "us-west-2")
    assert_one_clean_line(result, "no usable AWS credentials", "aws configure")


# -- the textual edit itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "project: x\ninstance_offerings: {}\nregion: us-west-2\n",
        "project: x\ninstance_offerings:\nregion: us-west-2\n",
        "project: x\nregion: us-west-2",  # no block, no final newline
        "instance_offerings: {trn1.32xlarge: {us-east-1: [use1-az6]}}\nproject: x\nregion: us-west-2\n",
    ],
)
def test_edit_handles_layouts(text):
    new = yaml_edit.with_offerings(
        text, instance_type="trn1.32xlarge", region="us-west-2", az_ids=["usw2-az1", "usw2-az4"], path="c.yaml"
    )
    data = yaml.safe_load(new)
    assert data["project"] == "x" and data["region"] == "us-west-2"
    assert data["instance_offerings"]["trn1.32xlarge"]["us-west-2"] == ["usw2-az1", "usw2-az4"]
    if "use1-az6" in text:
        assert data["instance_offerings"]["trn1.32xlarge"]["us-east-1"] == ["use1-az6"]


def test_edit_refuses_a_duplicated_key():
    text = "instance_offerings: {}\nproject: x\ninstance_offerings: {}\n"
    # The parse refuses it first (YAML alone would keep the later block), naming both lines.
    with pytest.raises(ConfigError, match="key 'instance_offerings' first at line 1, named again at line 3"):
        yaml_edit.with_offerings(text, instance_type="t", region="us-west-2", az_ids=["usw2-az1"], path=Path("c"))
