"""`trn doctor` against moto's account, with fakes for what moto does not implement.

moto answers STS, EC2 AZs and instance type offerings, EC2 instances, SSM parameters, and
service-quotas' NoSuchResourceException for ec2 quotas. Faked: GetServiceQuota values,
ListServiceQuotas, DescribeCapacityReservations and CloudFormation DescribeStacks.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.test_cli_support import (
    ACCOUNT,
    DEFAULT_YAML,
    REGION,
    AwsCalls,
    Result,
    assert_one_clean_line,
    client_error,
    run_cli,
)

RESERVATION = "cr-0123456789abcdef0"

# The shared fixtures (aws, aws_env, no_credentials, no_sleep).
pytest_plugins = ["tests.test_cli_support"]


def config_file(tmp_path: Path, *, group: dict[str, Any] | None = None, **top: Any) -> Path:
    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    raw["compute_groups"][0].update(group or {})
    raw.update(top)
    path = tmp_path / "doctor.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def quota(value: float) -> dict[str, Any]:
    return {"Quota": {"QuotaCode": "L-2C3B7624", "QuotaName": "Running On-Demand Trn instances", "Value": value}}


def reservation(**changes: Any) -> dict[str, Any]:
    r = {
        "CapacityReservationId": RESERVATION, "InstanceType": "trn1.32xlarge", "AvailabilityZone": "us-west-2d",
        "AvailabilityZoneId": "usw2-az4", "State": "active", "TotalInstanceCount": 4, "AvailableInstanceCount": 4,
        "ReservationType": "default", "InstanceMatchCriteria": "targeted",
        "EndDate": dt.datetime(2099, 1, 1, tzinfo=dt.UTC),
    }
    r.update(changes)
    return {"CapacityReservations": [r]}


@pytest.fixture
def ready(aws: AwsCalls) -> AwsCalls:
    """An account where the default config passes every check."""
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String"
    )
    aws.fake("GetServiceQuota", quota(512))
    aws.fake("DescribeCapacityReservations", {"CapacityReservations": []})
    return aws


def doctor(path: Path, *extra: str) -> Result:
    return run_cli("doctor", "--config", str(path), *extra)


def line(result: Result, status: str, name: str) -> str:
    found = [ln for ln in result.out.splitlines() if ln.startswith(f"{status}  {name}")]
    assert found, f"no {status} {name} in:\n{result.out}"
    return found[0]


def fix_after(result: Result, status: str, name: str) -> str:
    lines = result.out.splitlines()
    index = lines.index(line(result, status, name))
    assert lines[index + 1].startswith("      -> "), lines[index + 1]
    return lines[index + 1]


def test_everything_passes_on_a_ready_account(ready, tmp_path):
    result = doctor(config_file(tmp_path))
    assert result.code == 0, result.out + result.err
    assert not [ln for ln in result.out.splitlines() if ln.startswith(("FAIL", "WARN"))]
    assert f"account {ACCOUNT}" in line(result, "PASS", "credentials")
    assert "usw2-az4=us-west-2d" in line(result, "PASS", "availability zones")
    assert "trn1.32xlarge is offered in usw2-az4" in line(result, "PASS", "offering train")
    assert "512 vCPUs (applied)" in line(result, "PASS", "quota L-2C3B7624")
    assert "version 30" in line(result, "PASS", "CDK bootstrap")
    assert result.out.rstrip().endswith("0 FAIL, 0 WARN, 6 PASS: ready to deploy")
    assert ready.of("GetServiceQuota") == [{"ServiceCode": "ec2", "QuotaCode": "L-2C3B7624"}]
    assert ready.of("DescribeInstanceTypeOfferings")[0]["LocationType"] == "availability-zone-id"


def test_fail_when_the_type_is_not_offered_in_the_group_az(ready, tmp_path):
    # The catalog lists usw2-az3 for trn1 (public samples); moto's account does not offer it there.
    path = config_file(tmp_path, group={"az_ids": "usw2-az3"})
    result = doctor(path)
    assert result.code == 1
    assert "trn1.32xlarge is not offered in usw2-az3" in line(result, "FAIL", "offering train")
    fix = fix_after(result, "FAIL", "offering train")
    assert "usw2-az1, usw2-az4" in fix and "trn azs --instance-type trn1.32xlarge --region us-west-2 --write" in fix
    assert "fix every FAIL before `cdk deploy`" in result.out


def test_fail_when_the_quota_is_below_the_need(ready, tmp_path):
    ready.fake("GetServiceQuota", quota(128))
    result = doctor(config_file(tmp_path))
    assert result.code == 1
    failed = line(result, "FAIL", "quota L-2C3B7624")
    assert "'Running On-Demand Trn instances' is 128 vCPUs" in failed
    assert "below the 256 vCPUs" in failed and "train: 2-4 x trn1.32xlarge (128 vCPUs)" in failed
    assert "--quota-code L-2C3B7624 --desired-value 512 --region us-west-2" in fix_after(result, "FAIL", "quota")


def test_overrides_change_the_need(ready, tmp_path):
    ready.fake("GetServiceQuota", quota(256))
    assert doctor(config_file(tmp_path)).code == 0  # 256 vCPUs cover 2 nodes (a WARN for max_nodes 4)
    result = doctor(config_file(tmp_path), "-c", "nodes=3")
    assert result.code == 1
    assert "below the 384 vCPUs" in line(result, "FAIL", "quota L-2C3B7624")


def test_warn_when_quota_covers_nodes_but_not_max_nodes(ready, tmp_path):
    ready.fake("GetServiceQuota", quota(384))
    result = doctor(config_file(tmp_path))
    assert result.code == 0
    assert "not for max_nodes (512)" in line(result, "WARN", "quota L-2C3B7624")


def test_quota_falls_back_to_the_name(ready, tmp_path):
    del ready.fakes["GetServiceQuota"]  # moto: NoSuchResourceException for every ec2 quota
    ready.fake("ListServiceQuotas", {"Quotas": [
        {"QuotaCode": "L-1216C47A", "QuotaName": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
         "Value": 5.0},
        {"QuotaCode": "L-NEWCODE1", "QuotaName": "Running On-Demand Trn instances", "Value": 1024.0},
    ]})
    result = doctor(config_file(tmp_path))
    assert result.code == 0, result.out
    assert "1024 vCPUs (L-NEWCODE1 by name)" in line(result, "PASS", "quota L-2C3B7624")


def test_quota_warns_when_running_instances_use_it(ready, tmp_path):
    ready.fake("DescribeInstances", {"Reservations": [
        {"Instances": [{"InstanceType": "trn1.32xlarge"}, {"InstanceType": "trn1n.32xlarge"}]}
    ]})
    result = doctor(config_file(tmp_path))
    assert "256 vCPUs of it are in use by running instances" in line(result, "WARN", "quota L-2C3B7624")
    filters = ready.of("DescribeInstances")[0]["Filters"]
    assert {"Name": "instance-type", "Values": ["trn*"]} in filters


def test_a_denied_check_is_a_warning_naming_the_permission(ready, tmp_path):
    ready.fake("GetServiceQuota", client_error("AccessDeniedException", "GetServiceQuota"))
    result = doctor(config_file(tmp_path))
    assert result.code == 0
    assert "could not check: GetServiceQuota was denied" in line(result, "WARN", "vCPU quota")
    assert "allow servicequotas:GetServiceQuota" in fix_after(result, "WARN", "vCPU quota")


def test_reservation_that_matches_passes(ready, tmp_path):
    ready.fake("DescribeCapacityReservations", reservation())
    path = config_file(tmp_path, group={"capacity": {"type": "reservation", "reservation_id": RESERVATION}})
    result = doctor(path)
    assert result.code == 0, result.out
    assert f"reservation {RESERVATION} (active, 4 x trn1.32xlarge in usw2-az4), 4 free" in line(
        result, "PASS", "capacity train"
    )
    assert ready.of("DescribeCapacityReservations") == [{"CapacityReservationIds": [RESERVATION]}]


@pytest.mark.parametrize(
    ("changes", "status", "words"),
    [
        ({"AvailabilityZoneId": "usw2-az1"}, "FAIL", "set compute_groups[train].az_ids: usw2-az1"),
        ({"InstanceType": "trn1n.32xlarge"}, "FAIL", "instance_type: trn1n.32xlarge"),
        ({"State": "expired"}, "FAIL", "buy or create a new one"),
        ({"State": "scheduled", "StartDate": "2099-01-01"}, "WARN", "nodes launch only once it is active"),
        ({"AvailableInstanceCount": 1}, "WARN", "stop them or lower nodes"),
        ({"ReservationType": "capacity-block"}, "WARN", "set capacity.type: capacity-block"),
        ({"EndDate": dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)}, "WARN", "instances are terminated"),
    ],
)
def test_reservation_problems(ready, tmp_path, changes, status, words):
    ready.fake("DescribeCapacityReservations", reservation(**changes))
    path = config_file(tmp_path, group={"capacity": {"type": "reservation", "reservation_id": RESERVATION}})
    result = doctor(path)
    assert result.code == (1 if status == "FAIL" else 0)
    assert words in fix_after(result, status, "capacity train")


def test_reservation_that_does_not_exist_fails(ready, tmp_path):
    ready.fake(
        "DescribeCapacityReservations",
        client_error("InvalidCapacityReservationId.NotFound", "DescribeCapacityReservations"),
    )
    path = config_file(tmp_path, group={"capacity": {"type": "capacity-block", "reservation_id": RESERVATION}})
    result = doctor(path)
    assert result.code == 1
    assert f"{RESERVATION} does not exist in us-west-2" in line(result, "FAIL", "capacity train")


def test_on_demand_group_lists_matching_open_reservations(ready, tmp_path):
    ready.fake("DescribeCapacityReservations", reservation(InstanceMatchCriteria="open", AvailableInstanceCount=2))
    result = doctor(config_file(tmp_path))
    assert f"matching reservations: {RESERVATION} (2 free, open)" in line(result, "PASS", "capacity train")
    assert ready.of("DescribeCapacityReservations")[0]["Filters"][0] == {
        "Name": "instance-type", "Values": ["trn1.32xlarge"]
    }


def test_fail_when_not_bootstrapped(aws, tmp_path):
    aws.fake("GetServiceQuota", quota(512))
    aws.fake("DescribeCapacityReservations", {"CapacityReservations": []})
    missing = client_error("ValidationError", "DescribeStacks", "Stack with id CDKToolkit does not exist")
    aws.fake("DescribeStacks", missing)
    result = doctor(config_file(tmp_path))
    assert result.code == 1
    assert "us-west-2 is not bootstrapped" in line(result, "FAIL", "CDK bootstrap")
    assert f"cdk bootstrap aws://{ACCOUNT}/us-west-2" in fix_after(result, "FAIL", "CDK bootstrap")


def test_fail_when_bootstrap_is_too_old(ready, tmp_path):
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name="/cdk-bootstrap/hnb659fds/version", Value="5", Type="String", Overwrite=True
    )
    result = doctor(config_file(tmp_path))
    assert result.code == 1
    assert "version 5 is too old" in line(result, "FAIL", "CDK bootstrap")


def test_fail_for_an_az_id_the_region_does_not_have(ready, tmp_path):
    path = config_file(tmp_path, network={"cidr": "10.0.0.0/16", "az_ids": ["usw2-az4", "usw2-az7"]})
    result = doctor(path)
    assert result.code == 1
    assert "usw2-az7 not in us-west-2" in line(result, "FAIL", "availability zones")


def test_no_credentials_fails_the_first_check_and_skips_the_rest(no_credentials, tmp_path):
    result = doctor(config_file(tmp_path))
    assert result.code == 1
    assert "Traceback" not in result.out + result.err
    assert "no AWS credentials" in line(result, "FAIL", "credentials")
    assert "aws configure" in fix_after(result, "FAIL", "credentials")
    assert "skipped" in line(result, "WARN", "other checks")


def test_throttling_is_one_line_exit_2(ready, tmp_path):
    ready.fake("DescribeInstanceTypeOfferings", client_error("RequestLimitExceeded", "DescribeInstanceTypeOfferings"))
    result = doctor(config_file(tmp_path))
    assert_one_clean_line(result, "throttled DescribeInstanceTypeOfferings", "wait a minute")


def test_invalid_config_is_one_line_exit_2(aws, tmp_path):
    result = doctor(config_file(tmp_path, group={"nodes": 9}))
    assert_one_clean_line(result, "configuration error", "compute_groups[0].nodes")
    assert aws.calls == []


def test_bad_override_is_one_line_exit_2(aws, tmp_path):
    result = doctor(config_file(tmp_path), "-c", "colour=blue")
    assert_one_clean_line(result, "invalid argument: -c", "colour")
