"""`trn doctor` against moto's account, with fakes for what moto does not implement.

moto answers STS, EC2 AZs and instance type offerings, EC2 instances, SSM parameters, and
service-quotas' NoSuchResourceException for ec2 quotas. Faked: GetServiceQuota values,
ListServiceQuotas, DescribeCapacityReservations and CloudFormation DescribeStacks. The Neuron version
check runs its commands through a fake runner (:class:`Machine`): no Neuron tools unless a test gives some.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from tests.support.amis import publish_ami, publish_image
from tests.support.cli_support import (
    ACCOUNT,
    DEFAULT_YAML,
    REGION,
    AwsCalls,
    Result,
    assert_one_clean_line,
    client_error,
    run_cli,
)
from tests.support.eks_region import deployable
from trainium_cdk.app.config import build_config
from trainium_cdk.cli import doctor as doctor_module
from trainium_cdk.cli.doctor import Doctor
from trainium_cdk.cli.doctor_local import PASS, SKIP, WARN, CommandResult, neuron_versions
from trainium_cdk.facts import versions
from trainium_cdk.facts.versions import NATIVE_TRACK, XLA_TRACK

RESERVATION = "cr-0123456789abcdef0"


@dataclass
class Machine:
    """A fake command runner: argv -> what the command prints; a program not listed is not installed."""

    answers: dict[tuple[str, ...], CommandResult] = field(default_factory=dict)
    ran: list[tuple[str, ...]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str]) -> CommandResult | None:
        self.ran.append(tuple(argv))
        if tuple(argv) in self.answers:
            return self.answers[tuple(argv)]
        installed = {a[0] for a in self.answers}
        return CommandResult(1, "") if argv[0] in installed else None


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch) -> Machine:
    """This machine as doctor sees it: no Neuron tools, whatever the host running the tests has."""
    fake = Machine()
    monkeypatch.setattr(doctor_module, "run_command", fake)
    return fake


# The role the deployer works as (an SSO role, with its path), listed in the config's eks.admin_role_arns.
ADMIN_ROLE_NAME = "AWSReservedSSO_Admin_0123456789abcdef"
ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/{ADMIN_ROLE_NAME}"
PLUGIN_VERSION = ("session-manager-plugin", "--version")


def config_file(tmp_path: Path, *, group: dict[str, Any] | None = None, eks: dict[str, Any] | None = None,
                **top: Any) -> Path:
    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    raw.setdefault("eks", {})["admin_role_arns"] = [ADMIN_ROLE]
    raw["eks"].update(eks or {})
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


DOCKER_VERSION = ("docker", "version")


@pytest.fixture
def ready(aws: AwsCalls, machine: Machine, monkeypatch: pytest.MonkeyPatch) -> AwsCalls:
    """An account where the default config passes every check, from a machine whose Docker answers."""
    machine.answers[DOCKER_VERSION] = CommandResult(0, "Client: 27.3.1\nServer: 27.3.1\n")
    machine.answers[PLUGIN_VERSION] = CommandResult(0, "1.2.707.0\n")
    assume_admin_role(monkeypatch)
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String"
    )
    aws.fake("GetServiceQuota", quota(512))
    aws.fake("DescribeCapacityReservations", {"CapacityReservations": []})
    publish_image(versions.neuron_training_image(REGION, "xla"))  # Neuron's DLC of the default track
    deployable(aws, REGION)  # the EKS stack's pins (tests/unit/cli/test_cli_preflight.py tests each)
    return aws


def assume_admin_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work as ADMIN_ROLE from here on, as an SSO user does: the caller becomes an assumed-role session."""
    iam = boto3.client("iam", region_name=REGION)
    iam.create_role(RoleName=ADMIN_ROLE_NAME, Path="/aws-reserved/sso.amazonaws.com/", AssumeRolePolicyDocument="{}")
    creds = boto3.client("sts", region_name=REGION).assume_role(RoleArn=ADMIN_ROLE, RoleSessionName="user")["Credentials"]
    for name, key in (("AWS_ACCESS_KEY_ID", "AccessKeyId"), ("AWS_SECRET_ACCESS_KEY", "SecretAccessKey"),
                      ("AWS_SESSION_TOKEN", "SessionToken")):
        monkeypatch.setenv(name, creds[key])


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


def test_everything_passes_on_a_ready_account(ready, machine, tmp_path):
    result = doctor(config_file(tmp_path))
    assert result.code == 0, result.out + result.err
    assert not [ln for ln in result.out.splitlines() if ln.startswith(("FAIL", "WARN"))]
    assert f"account {ACCOUNT}" in line(result, "PASS", "credentials")
    assert "usw2-az4=us-west-2d" in line(result, "PASS", "availability zones")
    assert "trn1.32xlarge is offered in usw2-az4" in line(result, "PASS", "offering train")
    assert "512 vCPUs (applied)" in line(result, "PASS", "quota L-2C3B7624")
    assert "version 30" in line(result, "PASS", "CDK bootstrap")
    # The EKS stack builds no image by default (eks.example_images): no container engine is asked for.
    assert "container engine" not in result.out and DOCKER_VERSION not in machine.ran
    assert f"{ADMIN_ROLE_NAME} is in eks.admin_role_arns" in line(result, "PASS", "cluster access")
    assert "version 1.2.707.0" in line(result, "PASS", "session manager plugin")
    assert "training image" in line(result, "PASS", f"image {versions.neuron_training_image(REGION, 'xla')}")
    assert "release v20260930 is ami-" in line(result, "PASS", "AMI eks")  # the EKS stack's pins: test_cli_preflight.py
    assert "1.35: standard support until 2027-03-27" in line(result, "PASS", "kubernetes")
    assert "aws-fsx-csi-driver v1.9.0-eksbuild.1 (EKS's default: not pinned)" in line(result, "PASS", "add-ons")
    assert result.out.rstrip().endswith("0 FAIL, 0 WARN, 12 PASS: ready to deploy")
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
    assert "fix every FAIL before `make deploy`" in result.out


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
    fix = fix_after(result, "FAIL", "CDK bootstrap")
    assert "run `make bootstrap` in the project directory" in fix and f"cdk bootstrap aws://{ACCOUNT}/us-west-2" in fix


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


# -- an API error a check did not expect: that check's line, and every other check still runs -------------

# Every check's line after the credentials, on the ready account (the default config: EKS, on demand).
LATER_CHECKS = ("availability zones", "offering train", "quota L-2C3B7624", "capacity train", "CDK bootstrap",
                "AMI eks", "kubernetes", "add-ons", "cluster access", "session manager plugin")


def server_error(code: str, operation: str, status: int = 500) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "We encountered an internal error. Please try again."},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


def assert_every_check_printed(result: Result, *, but: str) -> None:
    names = [ln[6:].split("  ")[0].strip() for ln in result.out.splitlines() if ln[:4] in ("PASS", "WARN", "FAIL")]
    assert [n for n in LATER_CHECKS if n != but and not any(x.startswith(n) for x in names)] == [], result.out
    assert "Traceback" not in result.out + result.err and result.err == "", result.err


def test_list_service_quotas_answering_500_is_the_quota_checks_warning_and_the_rest_still_run(ready, tmp_path):
    """The run that ended the old doctor: GetServiceQuota knows no such code, the fallback ListServiceQuotas
    answers HTTP 500 (as moto's server does), and nothing after the quota check printed."""
    del ready.fakes["GetServiceQuota"]  # moto: NoSuchResourceException for every ec2 quota
    ready.fake("ListServiceQuotas", server_error("ServiceException", "ListServiceQuotas"))
    result = doctor(config_file(tmp_path))
    warned = line(result, "WARN", "vCPU quota")
    assert "ListServiceQuotas" in warned and "ServiceException" in warned
    fix = fix_after(result, "WARN", "vCPU quota")
    assert "failed on AWS's side (HTTP 500)" in fix and "run `trn doctor` again" in fix
    assert_every_check_printed(result, but="quota L-2C3B7624")
    assert "PASS  CDK bootstrap" in result.out and result.out.rstrip().endswith("1 WARN, 11 PASS: ready to deploy (read the WARN lines)")
    assert result.code == 0


@pytest.mark.parametrize(
    ("operation", "error", "check", "instead_of", "words"),
    [
        ("DescribeAvailabilityZones", server_error("InternalError", "DescribeAvailabilityZones"), "availability zones",
         "availability zones", "failed on AWS's side (HTTP 500)"),
        ("DescribeInstanceTypeOfferings", client_error("RequestLimitExceeded", "DescribeInstanceTypeOfferings"),
         "instance offerings", "offering train", "AWS throttled DescribeInstanceTypeOfferings after retries"),
        ("GetParameter", client_error("ValidationException", "GetParameter"), "CDK bootstrap", "CDK bootstrap",
         "check that ssm:GetParameter works for this identity"),
    ],
    ids=["500", "throttled", "unexpected code"],
)
def test_an_unexpected_api_error_fails_its_check_naming_the_api_and_the_code(
    ready, tmp_path, operation, error, check, instead_of, words
):
    ready.fake(operation, error)
    result = doctor(config_file(tmp_path))
    assert result.code == 1
    failed = line(result, "FAIL", check)
    assert failed.split(check, 1)[1].strip().startswith("could not check: ")
    assert operation in failed and error.response["Error"]["Code"] in failed
    assert words in fix_after(result, "FAIL", check)
    assert_every_check_printed(result, but=instead_of)
    assert "fix every FAIL before `make deploy`" in result.out


def test_an_access_denied_anywhere_in_the_quota_check_is_its_warning(ready, tmp_path):
    del ready.fakes["GetServiceQuota"]
    ready.fake("ListServiceQuotas", client_error("AccessDeniedException", "ListServiceQuotas"))
    result = doctor(config_file(tmp_path))
    assert "ListServiceQuotas was denied (AccessDeniedException)" in line(result, "WARN", "vCPU quota")
    assert_every_check_printed(result, but="quota L-2C3B7624")
    assert result.code == 0


def test_sts_answering_500_fails_the_credentials_check_and_the_others_still_run(ready, tmp_path):
    ready.fake("GetCallerIdentity", server_error("InternalFailure", "GetCallerIdentity", 503))
    result = doctor(config_file(tmp_path))
    assert "GetCallerIdentity failed (InternalFailure" in line(result, "FAIL", "credentials")
    assert "PASS  availability zones" in result.out and "skipped" not in result.out
    assert result.code == 1


def test_invalid_config_is_one_line_exit_2(aws, tmp_path):
    result = doctor(config_file(tmp_path, group={"nodes": 9}))
    assert_one_clean_line(result, "configuration error", "compute_groups[0].nodes")
    assert aws.calls == []


def test_bad_override_is_one_line_exit_2(aws, tmp_path):
    result = doctor(config_file(tmp_path), "-c", "colour=blue")
    assert_one_clean_line(result, "invalid argument: -c", "colour")


# -- this machine's Neuron software -------------------------------------------------------------------

NEURON_LS = ("neuron-ls", "--json-output")


def dpkg(package: str) -> tuple[str, ...]:
    return ("dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Version}", package)


def rpm(package: str) -> tuple[str, ...]:
    return ("rpm", "-q", "--qf", "%{VERSION}", package)


PIP_SHOW = ("python3", "-m", "pip", "show", "torch-neuronx", "torch")


def pip_show(**versions: str) -> CommandResult:
    blocks = [f"Name: {name.replace('_', '-')}\nVersion: {v}\nSummary: x\n" for name, v in versions.items()]
    return CommandResult(0 if len(blocks) == 2 else 1, "---\n".join(blocks))


def devices(n: int) -> CommandResult:
    return CommandResult(0, json.dumps([{"neuron_device": i, "nc_count": 2} for i in range(n)]))


def verdicts(checks) -> dict[str, str]:
    return {c.name: c.status for c in checks}


def test_neuron_check_is_one_skip_line_where_the_tools_are_absent(machine):
    checks = neuron_versions(build_config({}).neuron_track, machine)
    assert [(c.status, c.name) for c in checks] == [(SKIP, "neuron versions")]
    assert "neuron-ls not found" in checks[0].detail and "xla track" in checks[0].detail
    assert machine.ran == [NEURON_LS]


def test_ubuntu_node_on_the_pinned_xla_release_passes(machine):
    machine.answers = {
        NEURON_LS: devices(16),
        dpkg("aws-neuronx-dkms"): CommandResult(0, "ii 2.27.4.0"),
        dpkg("aws-neuronx-runtime-lib"): CommandResult(0, "ii 2.31.24.0-6e27b8d5b"),  # Debian revision
        dpkg("aws-neuronx-collectives"): CommandResult(0, "ii 2.31.24.0-17a033bc8"),
        PIP_SHOW: pip_show(torch_neuronx="2.9.0.2.13.26312+a1b2c3d4", torch="2.9.0"),
    }
    checks = neuron_versions(build_config({}).neuron_track, machine)
    assert verdicts(checks) == {
        "neuron devices": PASS, "neuron driver": PASS, "neuron runtime": PASS, "neuron collectives": PASS,
        "torch-neuronx": PASS, "torch": PASS,
    }
    by_name = {c.name: c.detail for c in checks}
    assert by_name["neuron devices"] == "16 Neuron device(s) (neuron-ls)"
    assert by_name["neuron runtime"] == (
        f"aws-neuronx-runtime-lib 2.31.24.0: xla track pins {XLA_TRACK.runtime} (Neuron 2.29.1)"
    )
    # dpkg answered every package: rpm is never asked.
    assert machine.ran == [
        NEURON_LS, dpkg("aws-neuronx-dkms"), dpkg("aws-neuronx-runtime-lib"), dpkg("aws-neuronx-collectives"),
        PIP_SHOW,
    ]


def test_al2023_container_host_with_another_driver_warns_and_skips_what_the_image_brings(machine):
    """An EKS or Batch host: RPM packages, the driver of the AMI, no runtime or framework on the host."""
    machine.answers = {
        NEURON_LS: devices(16),
        rpm("aws-neuronx-dkms"): CommandResult(0, "2.21.37.0"),
        rpm("aws-neuronx-runtime-lib"): CommandResult(1, "package aws-neuronx-runtime-lib is not installed\n"),
        rpm("aws-neuronx-collectives"): CommandResult(1, "package aws-neuronx-collectives is not installed\n"),
        PIP_SHOW: pip_show(),
    }
    checks = neuron_versions(build_config({}).neuron_track, machine)
    assert verdicts(checks) == {
        "neuron devices": PASS, "neuron driver": WARN, "neuron runtime": SKIP, "neuron collectives": SKIP,
        "torch-neuronx": SKIP, "torch": SKIP,
    }
    driver = next(c for c in checks if c.name == "neuron driver")
    assert driver.detail == "aws-neuronx-dkms 2.21.37.0, but the xla track pins 2.27.4.0 (Neuron 2.29.1)"
    assert "install aws-neuronx-dkms 2.27.4.0" in driver.fix
    # No dpkg-query on AL2023: each package is asked of dpkg (absent), then rpm.
    assert machine.ran == [
        NEURON_LS,
        dpkg("aws-neuronx-dkms"), rpm("aws-neuronx-dkms"),
        dpkg("aws-neuronx-runtime-lib"), rpm("aws-neuronx-runtime-lib"),
        dpkg("aws-neuronx-collectives"), rpm("aws-neuronx-collectives"),
        PIP_SHOW,
    ]


def test_removed_package_and_failing_neuron_ls_are_not_taken_for_installed(machine):
    machine.answers = {
        NEURON_LS: CommandResult(1, ""),
        dpkg("aws-neuronx-dkms"): CommandResult(0, "rc 2.27.4.0"),  # removed, configuration left
    }
    checks = neuron_versions(build_config({}).neuron_track, machine)
    assert verdicts(checks) == {
        "neuron devices": WARN, "neuron driver": WARN, "neuron runtime": SKIP, "neuron collectives": SKIP,
        "torch-neuronx": SKIP,
    }
    assert "neuron-ls failed (exit 1)" in checks[0].detail
    assert "aws-neuronx-dkms is not installed" in checks[1].detail


def test_native_track_pins_are_the_ones_compared(machine):
    """An XLA-track node under a config that says native: every pin disagrees."""
    raw = {
        "neuron": {"track": "native"}, "region": "us-east-2", "network": {"az_ids": ["use2-az3", "use2-az2"]},
        "instance_offerings": {"trn2.48xlarge": {"us-east-2": ["use2-az3", "use2-az2"]}},
        "compute_groups": [{"name": "train", "instance_type": "trn2.48xlarge", "az_ids": "use2-az3"}],
    }
    machine.answers = {
        NEURON_LS: devices(16),
        dpkg("aws-neuronx-dkms"): CommandResult(0, "ii 2.27.4.0"),
        dpkg("aws-neuronx-runtime-lib"): CommandResult(0, "ii 2.31.24.0-6e27b8d5b"),
        dpkg("aws-neuronx-collectives"): CommandResult(0, f"ii {NATIVE_TRACK.collectives}-0abc"),
        PIP_SHOW: pip_show(torch_neuronx="2.9.0.2.13.26312+a1b2c3d4", torch="2.9.0"),
    }
    checks = neuron_versions(build_config(raw).neuron_track, machine)
    assert verdicts(checks) == {
        "neuron devices": PASS, "neuron driver": WARN, "neuron runtime": WARN, "neuron collectives": PASS,
        "torch-neuronx": WARN, "torch": WARN,
    }
    by_name = {c.name: c.detail for c in checks}
    assert by_name["torch"] == f"torch 2.9.0, but the native track pins 2.14.* (Neuron {NATIVE_TRACK.neuron_release})"
    assert by_name["torch-neuronx"].endswith(f"native track pins {NATIVE_TRACK.pip_packages['torch-neuronx']} "
                                             f"(Neuron {NATIVE_TRACK.neuron_release})")


def test_doctor_on_the_default_machine_prints_the_skip_line_outside_the_summary(ready, tmp_path):
    result = doctor(config_file(tmp_path))
    assert "no Neuron tools here" in line(result, SKIP, "neuron versions")
    assert result.out.rstrip().endswith("0 FAIL, 0 WARN, 12 PASS: ready to deploy")


def test_doctor_on_a_node_warns_on_a_driver_mismatch_and_counts_it(ready, machine, tmp_path):
    machine.answers |= {
        NEURON_LS: devices(16),
        rpm("aws-neuronx-dkms"): CommandResult(0, "2.21.37.0"),
        PIP_SHOW: pip_show(),
    }
    result = doctor(config_file(tmp_path))
    assert result.code == 0
    assert "2.21.37.0, but the xla track pins 2.27.4.0" in line(result, WARN, "neuron driver")
    assert "install aws-neuronx-dkms 2.27.4.0" in fix_after(result, WARN, "neuron driver")
    assert result.out.rstrip().endswith("0 FAIL, 1 WARN, 13 PASS: ready to deploy (read the WARN lines)")


def test_a_node_without_credentials_still_gets_its_neuron_versions(no_credentials, machine, tmp_path):
    machine.answers = {NEURON_LS: devices(1), rpm("aws-neuronx-dkms"): CommandResult(0, XLA_TRACK.driver)}
    result = doctor(config_file(tmp_path))
    assert result.code == 1
    assert "skipped" in line(result, "WARN", "other checks")
    assert f"aws-neuronx-dkms {XLA_TRACK.driver}: xla track pins" in line(result, PASS, "neuron driver")


# -- AMIs and the container engine: what a deploy needs besides the account ------------------------------


def test_batch_ami_is_aws_s_per_ami_name_parameter_of_the_region(ready, machine, tmp_path):
    result = doctor(config_file(tmp_path, backends=["batch"]))
    assert result.code == 0, result.out
    assert f"{XLA_TRACK.ecs_neuron_ami} is ami-" in line(result, PASS, "AMI batch")
    assert {"Name": XLA_TRACK.ecs_neuron_ami_parameter} in ready.of("GetParameter")
    # The Batch stack builds the MLP example image of its job definitions: the container engine is asked for.
    assert "the batch stack builds the MLP example image" in line(result, PASS, "container engine")


def test_batch_with_an_image_of_ones_own_needs_no_container_engine(ready, machine, tmp_path):
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1"
    publish_image(image)  # pushed (`trn image push`): doctor asks its registry
    result = doctor(config_file(tmp_path, backends=["batch"], batch={"image_uri": image}))
    assert result.code == 0, result.out
    assert "container engine" not in result.out and DOCKER_VERSION not in machine.ran


def test_batch_ami_not_published_in_the_region_fails_naming_the_field(ready, tmp_path, monkeypatch):
    import dataclasses

    from trainium_cdk.facts import versions

    missing = "al2023-ami-ecs-neuron-hvm-2099.0.20990101-kernel-6.1-x86_64"
    monkeypatch.setitem(versions.NEURON_TRACKS, "xla", dataclasses.replace(XLA_TRACK, ecs_neuron_ami=missing))
    result = doctor(config_file(tmp_path, backends=["batch"]))
    assert result.code == 1
    assert f"{missing} is not published in us-west-2" in line(result, "FAIL", "AMI batch")
    assert "set batch.ami_id" in fix_after(result, "FAIL", "AMI batch")


def test_dlami_of_the_tracks_sdk_release_resolves_to_the_newest(ready, tmp_path):
    old = publish_ami(REGION, "Deep Learning AMI Neuron (Ubuntu 24.04) 20260502",
                      "Deep Learning AMI Neuron SDK 2.29.1", dt.datetime(2026, 5, 2, tzinfo=dt.UTC))
    new = publish_ami(REGION, "Deep Learning AMI Neuron (Ubuntu 24.04) 20260520",
                      "Deep Learning AMI Neuron SDK 2.29.1", dt.datetime(2026, 5, 20, tzinfo=dt.UTC))
    result = doctor(config_file(tmp_path, backends=["instance"]))
    assert result.code == 0, result.out
    found = line(result, PASS, "AMI instance")
    assert f"Deep Learning AMI Neuron (Ubuntu 24.04) 20260520 ({new}" in found and old not in found
    assert ready.of("DescribeImages") == [
        {"Owners": ["amazon"], "Filters": XLA_TRACK.dlami.filters(), "IncludeDeprecated": True}
    ]


def test_dlami_missing_for_the_flavour_fails_with_the_query_to_list_them(ready, tmp_path):
    result = doctor(config_file(tmp_path, backends=["instance"], instance={"dlami": "base/amazon-linux-2023"}))
    assert result.code == 1
    assert ("no DLAMI named 'Deep Learning Base Neuron AMI (Amazon Linux 2023)*' with description "
            "'*Neuron SDK 2.29.1*'") in line(result, "FAIL", "AMI instance")
    assert "set instance.dlami" in fix_after(result, "FAIL", "AMI instance")


def test_an_explicit_ami_id_is_checked_in_the_region(ready, tmp_path):
    mine = publish_ami(REGION, "my-dlami", "built by us", dt.datetime(2026, 7, 1, tzinfo=dt.UTC), owner_alias=None)
    result = doctor(config_file(tmp_path, backends=["instance", "batch"], instance={"ami_id": mine},
                                batch={"ami_id": "ami-0123456789abcdef0"}))
    assert f"{mine} (instance.ami_id): my-dlami" in line(result, PASS, "AMI instance")
    assert "ami-0123456789abcdef0 (batch.ami_id) is not an available AMI in us-west-2" in line(result, "FAIL", "AMI batch")
    assert ready.of("DescribeImages") == [{"ImageIds": ["ami-0123456789abcdef0"]}, {"ImageIds": [mine]}]


def test_no_docker_fails_when_the_eks_stack_builds_an_image(ready, machine, tmp_path):
    del machine.answers[DOCKER_VERSION]
    result = doctor(config_file(tmp_path, eks={"example_images": True}))
    assert result.code == 1
    assert "docker not found (CDK_DOCKER=docker); the eks stack builds the MLP example image" in line(
        result, "FAIL", "container engine")
    assert "export CDK_DOCKER=finch" in fix_after(result, "FAIL", "container engine")


def test_a_docker_without_its_daemon_fails(ready, machine, tmp_path):
    machine.answers[DOCKER_VERSION] = CommandResult(1, "Client: 27.3.1\n")
    result = doctor(config_file(tmp_path, eks={"example_images": True}))
    assert "`docker version` failed (exit 1): is its daemon running?" in line(result, "FAIL", "container engine")


def test_finch_through_cdk_docker_passes(ready, machine, tmp_path, monkeypatch):
    del machine.answers[DOCKER_VERSION]
    machine.answers[("finch", "version")] = CommandResult(0, "Client: v1.4\n")
    monkeypatch.setenv("CDK_DOCKER", "finch")
    result = doctor(config_file(tmp_path, eks={"example_images": True}))
    assert result.code == 0, result.out
    assert "finch answers" in line(result, PASS, "container engine")
    assert ("finch", "version") in machine.ran


def test_a_deployer_outside_the_cluster_admins_is_told_how_to_get_in(ready, tmp_path):
    """CloudFormation creates the cluster under its own role: whoever deploys is not a cluster admin unless the
    config lists their role, and kubectl would be refused after a 25-minute deploy."""
    result = doctor(config_file(tmp_path, eks={"admin_role_arns": [f"arn:aws:iam::{ACCOUNT}:role/someone-else"]}))
    assert f"assumed-role/{ADMIN_ROLE_NAME}" not in line(result, WARN, "cluster access")
    assert f"arn:aws:iam::{ACCOUNT}:role/{ADMIN_ROLE_NAME} is not in eks.admin_role_arns" in line(result, WARN, "cluster access")
    assert f"aws iam get-role --role-name {ADMIN_ROLE_NAME} --query Role.Arn" in fix_after(result, WARN, "cluster access")


def test_a_private_cluster_needs_the_session_manager_plugin_here(ready, machine, tmp_path):
    del machine.answers[PLUGIN_VERSION]
    result = doctor(config_file(tmp_path))
    assert result.code == 1
    assert "session-manager-plugin not found" in line(result, "FAIL", "session manager plugin")
    assert "session-manager-working-with-install-plugin" in fix_after(result, "FAIL", "session manager plugin")
    public = {"endpoint_access": "public-and-private", "public_access_cidrs": ["203.0.113.0/24"],
              "admin_role_arns": [ADMIN_ROLE]}
    assert "session manager plugin" not in doctor(config_file(tmp_path, eks=public)).out


# -- images: what the nodes and jobs will pull exists --------------------------------------------------------------


def test_the_tracks_training_image_and_the_named_ones_are_asked_of_their_registry(ready, tmp_path):
    mine = "123456789012.dkr.ecr.us-east-2.amazonaws.com/team/train:v3"
    publish_image(mine)
    result = doctor(config_file(tmp_path, backends=["batch"], workloads={"image": mine}))
    assert result.code == 0, result.out
    dlc = versions.neuron_training_image(REGION, "xla")
    assert f"the xla track's training image (versions.py training_image_tag {XLA_TRACK.training_image_tag}): in its " \
        "registry" in line(result, PASS, f"image {dlc}")
    assert "workloads.image: in its registry" in line(result, PASS, f"image {mine}")
    asked = {(c["registryId"], c["repositoryName"], c["imageIds"][0]["imageTag"]) for c in ready.of("BatchGetImage")}
    assert asked == {("763104351884", "pytorch-training-neuronx", XLA_TRACK.training_image_tag),
                     ("123456789012", "team/train", "v3")}


def test_a_tag_its_registry_does_not_have_fails_before_the_deploy(ready, tmp_path):
    """The native track's pin names a DLC tag (Neuron stopped publishing pytorch-training-neuronx at 2.31): doctor says
    so before a node waits on a pull that cannot succeed."""
    result = doctor(config_file(tmp_path, backends=["batch"], neuron={"track": "native"},
                                group={"instance_type": "trn2.48xlarge"},
                                instance_offerings={"trn2.48xlarge": {REGION: ["usw2-az4"]}},
                                workloads={"image": "public.ecr.aws/neuron/pytorch-training-neuronx:mine"}))
    assert result.code == 1
    dlc = versions.neuron_training_image(REGION, "native")
    assert "not in its registry (ImageNotFound)" in line(result, "FAIL", f"image {dlc}")
    assert "trn image push" in fix_after(result, "FAIL", f"image {dlc}")
    assert "not in a private ECR registry, not checked" in line(result, SKIP, "image public.ecr.aws/neuron/")


def test_an_image_whose_pull_is_denied_is_a_warning(ready, tmp_path):
    ready.fake("BatchGetImage", client_error("AccessDeniedException", "BatchGetImage"))
    result = doctor(config_file(tmp_path, backends=["batch"]))
    assert "ecr:BatchGetImage denied" in line(result, WARN, "image ")
