"""Development instance: Neuron DLAMI from SSM, private subnet, SSM-only access, FSx at /fsx."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from tests.support import node_files
from tests.support.helpers import (
    cfn_lint_errors,
    config_with,
    imported,
    nag_violations,
    quality_synth,
    resources,
    template_text,
)
from trainium_cdk import node
from trainium_cdk.app.config import ConfigError
from trainium_cdk.constructs.dev_instance import DevInstance
from trainium_cdk.constructs.session_manager import RUN_COMMAND_ACTIONS, SESSION_MANAGER_ACTIONS
from trainium_cdk.facts.catalog import DEFAULT_CATALOG

SSM_AMI_TYPE = "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
OPEN = ("0.0.0.0/0", "::/0")

# Defaults: trn1.2xlarge, Ubuntu 24.04 multi-framework DLAMI, the storage stack mounted, no endpoint.
DEFAULT = config_with(backends=["instance"])
# An AL2023 base DLAMI on trn1.32xlarge in the VPC's second AZ, an Instance Connect endpoint, no mount.
VARIANT = config_with(
    backends=["instance"],
    instance={
        "instance_type": "trn1.32xlarge",
        "az_id": "usw2-az3",
        "dlami": "base/amazon-linux-2023",
        "instance_connect_endpoint": True,
        "mount_storage": False,
        "root_volume_gib": 1024,
    },
)


@pytest.fixture(scope="module")
def default():
    return quality_synth(DEFAULT)


@pytest.fixture(scope="module")
def variant():
    return quality_synth(VARIANT)


def _instance(result) -> dict:
    (instance,) = resources(result.template_json("instance"), "AWS::EC2::Instance").values()
    return instance["Properties"]


def _ingress_rules(template: dict) -> list[dict]:
    rules = [
        rule
        for group in resources(template, "AWS::EC2::SecurityGroup").values()
        for rule in group["Properties"].get("SecurityGroupIngress", [])
    ]
    return rules + [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]


@pytest.mark.parametrize("fixture", ["default", "variant"])
def test_no_port_open_to_the_internet(request, fixture):
    result = request.getfixturevalue(fixture)
    for path in result.template_paths():
        template = json.loads(path.read_text())
        for rule in _ingress_rules(template):
            assert rule.get("CidrIp") not in OPEN and rule.get("CidrIpv6") not in OPEN, (path.name, rule)


@pytest.mark.parametrize(
    ("fixture", "name"),
    [("default", "Deep Learning AMI Neuron (Ubuntu 24.04)*"), ("variant", "Deep Learning Base Neuron AMI (Amazon Linux 2023)*")],
)
def test_ami_is_the_tracks_sdk_release_dlami_looked_up_at_deploy(request, fixture, name):
    result = request.getfixturevalue(fixture)
    template = result.template_json("instance")
    image = _instance(result)["ImageId"]
    lookup = template["Resources"][image["Fn::GetAtt"][0]]
    assert lookup["Type"] == "Custom::AmiLookup" and image["Fn::GetAtt"][1] == "ImageId"
    filters = {f["Name"]: f["Values"] for f in lookup["Properties"]["Filters"]}
    assert filters["name"] == [name] and filters["description"] == ["*Neuron SDK 2.29.1*"]
    assert lookup["Properties"]["Owners"] == ["amazon"]
    assert not any(p["Type"] == SSM_AMI_TYPE for p in template.get("Parameters", {}).values())


@pytest.mark.parametrize(
    ("fixture", "device", "size"), [("default", "/dev/sda1", 512), ("variant", "/dev/xvda", 1024)]
)
def test_encrypted_gp3_root_volume_imdsv2_detailed_monitoring(request, fixture, device, size):
    props = _instance(request.getfixturevalue(fixture))
    assert props["BlockDeviceMappings"] == [
        {"DeviceName": device, "Ebs": {"DeleteOnTermination": True, "Encrypted": True, "VolumeSize": size, "VolumeType": "gp3"}}
    ]
    assert props["MetadataOptions"]["HttpTokens"] == "required"
    assert props["Monitoring"] is True
    assert "AvailabilityZone" not in props  # our subnets carry AZ IDs; the subnet places it


def test_instance_type_and_private_subnet_of_the_chosen_az(default, variant):
    for result, instance_type, az_id in ((default, "trn1.2xlarge", "usw2-az4"), (variant, "trn1.32xlarge", "usw2-az3")):
        props = _instance(result)
        assert props["InstanceType"] == instance_type
        network = result.stacks.network
        (subnet,) = [s for s in network.network.private_subnets if s.availability_zone == az_id]
        logical = network.resolve(network.get_logical_id(subnet.node.default_child))
        assert imported(result, props["SubnetId"]) == {"Ref": logical}
        assert "NetworkInterfaces" not in props  # no public address


def test_role_is_session_manager_and_run_command_only(default):
    """Session Manager's minimal instance policy and Run Command's message channels (`trn submit --backend
    instance`), not AmazonSSMManagedInstanceCore (ssm:GetParameter* on every parameter of the account: anything
    running on the instance could read them)."""
    template = default.template_json("instance")
    (role_id, role), = [
        (k, r) for k, r in resources(template, "AWS::IAM::Role").items()
        if [s["Principal"] for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]]
        == [{"Service": "ec2.amazonaws.com"}]
    ]
    assert "ManagedPolicyArns" not in role["Properties"] and "Policies" not in role["Properties"]
    (policy,) = [p for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    # And the setup's one object (the user data fetches it), nothing else of the asset bucket.
    (fetch,) = [s for s in statements if s["Action"] == "s3:GetObject"]
    (key,) = [p.name.removeprefix("asset.") for p in default.outdir.glob("asset.*.sh")
              if p.read_text().startswith("#!/bin/bash\n# trainium-cdk: the development instance's setup")]
    assert fetch["Resource"]["Fn::Join"][1][-1] == f"/{key}"
    assert_session_manager_only([s for s in statements if s is not fetch], run_command=True)


def assert_session_manager_only(statements: list, *, run_command: bool = False) -> None:
    actions = [a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])]
    allowed = [*SESSION_MANAGER_ACTIONS, *(RUN_COMMAND_ACTIONS if run_command else ())]
    assert sorted(actions) == sorted(allowed) and all(s["Effect"] == "Allow" for s in statements)
    (register,) = [s for s in statements if s["Action"] == "ssm:UpdateInstanceInformation"]
    # Its own kind of resource only.
    assert re.fullmatch(r"arn:<token>:ec2:[a-z0-9-]+:<token>:instance/\*", template_text(register["Resource"]))


def _setup(result) -> tuple[dict[str, str], str]:
    """The user data's header values and the setup it fetches (an asset of the cloud assembly, by its digest)."""
    return node_files.fetched_setup(template_text(_instance(result)["UserData"]["Fn::Base64"]), result.outdir)


def test_fsx_mounted_with_the_efa_group_when_storage_is_deployed(default, variant):
    props = _instance(default)
    (file_system,) = resources(default.template_json("storage"), "AWS::FSx::FileSystem")
    assert [imported(default, p) for p in node_files.header_value(props["UserData"], "LUSTRE_SOURCE")] == [
        "'", {"Ref": file_system}, ".fsx.us-west-2.", {"Ref": "AWS::URLSuffix"}, "@tcp:/",
        {"Fn::GetAtt": [file_system, "LustreMountName"]}, "'"]
    values, program = _setup(default)
    assert values["LUSTRE_MOUNT_POINT"] == "/fsx" and values["LUSTRE_FAMILY"] == "ubuntu"
    assert node.source("lustre_client.sh") in program  # as it is in the package
    (own,) = resources(default.template_json("instance"), "AWS::EC2::SecurityGroup")
    efa = default.stacks.network.network.efa_security_group.node.default_child
    efa_id = default.stacks.network.resolve(default.stacks.network.get_logical_id(efa))
    assert [imported(default, g) for g in props["SecurityGroupIds"]] == [
        {"Fn::GetAtt": [own, "GroupId"]}, {"Fn::GetAtt": [efa_id, "GroupId"]}]

    props = _instance(variant)
    assert "lustre" not in template_text(props["UserData"]["Fn::Base64"]).lower() and "lustre" not in _setup(variant)[1]
    (own,) = [k for k, g in resources(variant.template_json("instance"), "AWS::EC2::SecurityGroup").items()
              if "SecurityGroupEgress" in g["Properties"]]  # not the Instance Connect endpoint's
    assert props["SecurityGroupIds"] == [{"Fn::GetAtt": [own, "GroupId"]}]


def _bootstrap(result, tmp_path, program: str, *, digest: str | None = None):
    """The instance's user data as it runs at boot (node/batch_bootstrap.sh with its header's values), ``program`` in a
    local bucket under the key the user data names, with stand-ins for the AWS CLI, systemctl and shutdown."""
    import hashlib

    values, _ = _setup(result)
    bindir, bucket, log = tmp_path / "bin", tmp_path / "bucket", tmp_path / "calls.log"
    bindir.mkdir()
    bucket.mkdir()
    (bucket / "setup.sh").write_text(program)
    tools = {"aws": f'echo "aws $*" >> "{log}"; for a; do last="$a"; done; cp "{bucket}/setup.sh" "$last"',
             "systemctl": f'echo "systemctl $*" >> "{log}"', "shutdown": f'echo "shutdown $*" >> "{log}"',
             "sleep": "exit 0"}
    for tool, body in tools.items():
        (bindir / tool).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / tool).chmod(0o755)
    values["NODE_SETUP_URL"] = "s3://cdk-assets-bucket/setup.sh"  # the template's is a token (Fn::Sub)
    values["NODE_SETUP_SHA256"] = digest or hashlib.sha256(program.encode()).hexdigest()
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "NODE_SETUP_PATH": str(tmp_path / "setup" / "setup.sh")}
    result = node_files.run("batch_bootstrap.sh", values, env)
    return result, (log.read_text().splitlines() if log.exists() else [])


def test_the_user_data_runs_the_checked_setup_with_its_values(default, tmp_path):
    marker = tmp_path / "ran"
    done, calls = _bootstrap(default, tmp_path, f'#!/bin/bash\nset -eu\necho "$LUSTRE_MOUNT_POINT" > "{marker}"\n')
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "/fsx\n"
    (fetch,) = calls
    assert fetch.startswith("aws s3 cp --only-show-errors --region us-west-2 s3://")


@pytest.mark.parametrize("failure", ["digest mismatch", "setup fails"])
def test_a_setup_that_fails_leaves_the_instance_up_and_says_why(default, tmp_path, failure):
    """Unlike a Batch host, the development instance is not shut down: its user reaches it with Session Manager."""
    marker = tmp_path / "ran"
    program = f'#!/bin/bash\nset -eu\ntouch "{marker}"\nfalse\necho after\n'
    done, calls = _bootstrap(default, tmp_path, program, digest="0" * 64 if failure == "digest mismatch" else None)
    assert done.returncode == 1 and "the instance is not set up; it stays up for Session Manager" in done.stderr
    assert [c for c in calls if not c.startswith("aws ")] == [] and "after" not in done.stdout
    assert marker.exists() == (failure == "setup fails")  # an object that is not the one synthesized never runs


def test_instance_connect_endpoint_only_on_request_and_only_ssh(default, variant):
    assert resources(default.template_json("instance"), "AWS::EC2::InstanceConnectEndpoint") == {}
    assert _ingress_rules(default.template_json("instance")) == []

    template = variant.template_json("instance")
    (endpoint,) = resources(template, "AWS::EC2::InstanceConnectEndpoint").values()
    assert endpoint["Properties"]["PreserveClientIp"] is False
    (rule,) = _ingress_rules(template)
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 22, 22)
    assert endpoint["Properties"]["SecurityGroupIds"] == [rule["SourceSecurityGroupId"]]  # from the endpoint alone
    (instance_id,) = resources(template, "AWS::EC2::Instance")
    assert template["Outputs"]["InstanceConnectSsh"]["Value"] == {"Fn::Join": ["", [
        "aws ec2-instance-connect ssh --region us-west-2 --instance-id ", {"Ref": instance_id},
        " --connection-type eice --os-user ec2-user"]]}


def test_outputs_instance_id_and_session_command(default):
    outputs = default.template_json("instance")["Outputs"]
    (instance_id,) = resources(default.template_json("instance"), "AWS::EC2::Instance")
    assert outputs["InstanceId"]["Value"] == {"Ref": instance_id}
    assert outputs["StartSession"]["Value"] == {
        "Fn::Join": ["", ["aws ssm start-session --region us-west-2 --target ", {"Ref": instance_id}]]
    }


@pytest.mark.parametrize("fixture", ["default", "variant"])
def test_cfn_lint_and_cdk_nag_clean(request, fixture):
    result = request.getfixturevalue(fixture)
    assert nag_violations(result) == []
    for path in result.template_paths():
        assert cfn_lint_errors(path, result.config.region) == []


def test_az_defaults_to_the_first_vpc_az_offering_the_type():
    assert DEFAULT.dev_instance_az_id() == "usw2-az4"
    config = config_with(network={"az_ids": ["usw2-az1", "usw2-az3", "usw2-az4"]}, backends=["instance"])
    assert config.dev_instance_az_id() == "usw2-az3"  # usw2-az1 is not known to offer trn1.2xlarge


@pytest.mark.parametrize(
    ("instance", "message"),
    [
        ({"az_id": "usw2-az1"}, "an AZ ID of the VPC"),
        ({"instance_type": "trn2.48xlarge"}, "is known to offer trn2.48xlarge"),
        ({"instance_type": "p5.48xlarge"}, "unknown instance type"),
    ],
)
def test_az_and_type_errors(instance, message):
    # The config rejects them, before any construct is built.
    with pytest.raises(ConfigError, match=message):
        config_with(backends=["instance"], instance=instance)
    config_with(backends=["eks"], instance=instance)  # no dev instance: nothing to check


def test_offered_check_on_an_explicit_az():
    with pytest.raises(ConfigError, match="does not offer trn1.2xlarge"):
        config_with(network={"az_ids": ["usw2-az4", "usw2-az1"]}, backends=["instance"], instance={"az_id": "usw2-az1"})


@pytest.mark.parametrize(
    ("instance", "message"),
    [
        ({"dlami": "ubuntu"}, "a Neuron DLAMI flavour <kind>/<os>"),
        ({"root_volume_gib": 100}, "at least 512 GiB"),
        ({"az_id": "us-west-2a"}, "AZ ID"),
    ],
)
def test_instance_settings_are_validated(instance, message):
    with pytest.raises(ConfigError, match=message):
        config_with(instance=instance)


def test_built_alone_from_props_in_a_bare_stack():
    stack = cdk.Stack(cdk.App(), "Bare")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    dev = DevInstance(
        stack,
        "Dev",
        vpc=vpc,
        spec=DEFAULT_CATALOG.get("trn1.2xlarge"),
        vpc_subnets=ec2.SubnetSelection(subnets=[vpc.private_subnets[1]]),
        dlami="base/amazon-linux-2023",
        root_volume_gib=600,
        instance_connect_endpoint=True,
    )
    template = Template.from_stack(stack).to_json()
    (instance,) = resources(template, "AWS::EC2::Instance").values()
    props = instance["Properties"]
    subnet_id = stack.resolve(vpc.private_subnets[1].subnet_id)
    assert props["InstanceType"] == "trn1.2xlarge" and props["SubnetId"] == subnet_id
    assert props["BlockDeviceMappings"][0]["DeviceName"] == "/dev/xvda"
    assert props["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 600
    (endpoint,) = resources(template, "AWS::EC2::InstanceConnectEndpoint").values()
    assert endpoint["Properties"]["SubnetId"] == subnet_id
    assert dev.os_user == "ec2-user"


def test_a_selection_without_subnets_is_rejected():
    stack = cdk.Stack(cdk.App(), "Bare")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1)
    with pytest.raises(ConfigError, match="vpc_subnets"):
        DevInstance(
            stack, "Dev", vpc=vpc, spec=DEFAULT_CATALOG.get("trn1.2xlarge"),
            vpc_subnets=ec2.SubnetSelection(availability_zones=["nowhere-1a"]),
        )


@pytest.mark.parametrize("fixture", ["default", "variant"])
def test_the_first_boot_puts_the_mlp_example_where_the_readme_runs_it(request, fixture):
    """With or without the file system: the README's torchrun on the instance runs
    /opt/trainium-cdk/examples/mlp/train.py, which the user data writes (and nothing else would)."""
    import base64
    import gzip

    from tests.support.helpers import ROOT

    _, text = _setup(request.getfixturevalue(fixture))
    (line,) = [ln for ln in text.splitlines() if ln.endswith("| base64 -d | gunzip > /opt/trainium-cdk/examples/mlp/train.py")]
    assert gzip.decompress(base64.b64decode(line.split()[1])) == (ROOT / "trainium_cdk/examples/mlp/train.py").read_bytes()
