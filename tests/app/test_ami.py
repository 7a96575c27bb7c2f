"""AMIs without a manual step: no template reads an SSM parameter that nobody publishes; the Batch AMI is
AWS's own per-AMI-name parameter; the DLAMI is looked up at deploy by a custom resource whose handler
(run here against moto, its response PUT to a loopback server) picks the newest match and keeps it."""

from __future__ import annotations

import ast
import datetime as dt
import http.server
import json
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk import aws_ec2 as ec2

from tests.support.amis import publish_ami
from tests.support.apps import VARIANTS, synthesized
from tests.support.cli_support import AwsCalls
from tests.support.helpers import (
    CDK_CONTEXT,
    cfn_lint_errors,
    config_with,
    group_resources,
    nag_violations,
    quality_synth,
    resources,
    synth,
)
from trainium_cdk.app.config import ConfigError
from trainium_cdk.constructs.ami_lookup import HANDLER_DIR, RESOURCE_TYPE, RUNTIME
from trainium_cdk.constructs.dev_instance import DevInstance
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.versions import (
    ECS_NEURON_AMI_NAME,
    NEURON_TRACKS,
    XLA_TRACK,
    AmiQuery,
    dlami_name,
    ecs_neuron_ami_parameter,
)
from trainium_cdk.lambdas.ami_lookup import index as handler

# The one parameter a template may read that neither AWS publishes nor the app creates: the CDK
# bootstrap stack's version (every CDK template checks it); `cdk bootstrap` writes it and `trn doctor`
# checks that it exists.
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
PUBLIC_PREFIX = "/aws/service/"
SSM_PARAMETER_TYPE = re.compile(r"^AWS::SSM::Parameter::Value<.+>$")
DYNAMIC_SSM = re.compile(r"\{\{resolve:ssm(?:-secure)?:([^:}]+)")


def ssm_reads(template: dict[str, Any]) -> list[str]:
    """Every SSM parameter a template reads: SSM-typed parameters' defaults and {{resolve:ssm:...}}."""
    names = [p["Default"] for p in template.get("Parameters", {}).values() if SSM_PARAMETER_TYPE.match(p["Type"])]
    return names + DYNAMIC_SSM.findall(json.dumps(template))


def ssm_created(template: dict[str, Any]) -> set[str]:
    return {r["Properties"].get("Name") for r in resources(template, "AWS::SSM::Parameter").values()}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request):
    return synthesized(request.param)


def test_no_template_reads_an_ssm_parameter_that_neither_aws_publishes_nor_the_app_creates(variant):
    templates = {p.name: json.loads(p.read_text()) for p in variant.template_paths()}
    created = set().union(*(ssm_created(t) for t in templates.values()))
    foreign = sorted(
        (name, parameter) for name, template in templates.items() for parameter in ssm_reads(template)
        if not parameter.startswith(PUBLIC_PREFIX) and parameter not in created
        and parameter != BOOTSTRAP_VERSION_PARAMETER
    )
    assert foreign == []
    assert any(BOOTSTRAP_VERSION_PARAMETER in ssm_reads(t) for t in templates.values())  # the walk sees reads


def test_the_ssm_walk_sees_both_ways_of_reading_a_parameter():
    template = {
        "Parameters": {"P": {"Type": "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>", "Default": "/mine/ami"}},
        "Resources": {"R": {"Type": "X", "Properties": {"V": "{{resolve:ssm:/mine/other:3}}"}}},
    }
    assert ssm_reads(template) == ["/mine/ami", "/mine/other"]


ACCESS_HOST_IMAGE = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-6.1-arm64"


def test_every_public_parameter_a_template_reads_is_published_in_its_region(moto_public_amis, aws, variant):
    """moto's copy of AWS's public parameters (its ECS dump) answers for the Batch AMI of each region."""
    region = variant.config.region
    ssm, ec2_client = boto3.client("ssm", region_name=region), boto3.client("ec2", region_name=region)
    read = {p for path in variant.template_paths() for p in ssm_reads(json.loads(path.read_text()))
            if p.startswith(PUBLIC_PREFIX)}
    batch = ecs_neuron_ami_parameter(ECS_NEURON_AMI_NAME)
    # Batch's pinned AMI by name; the EKS API access host's AL2023 (stateless: it may follow `latest`).
    expected = {batch} if "batch" in variant.config.backends else set()
    if "eks" in variant.config.backends and variant.config.eks.endpoint_access == "private":
        expected.add(ACCESS_HOST_IMAGE)
    assert read == expected
    for parameter in sorted(read):
        image_id = ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        (image,) = ec2_client.describe_images(ImageIds=[image_id])["Images"]
        assert image["ImageOwnerAlias"] == "amazon", parameter
        if parameter == batch:
            assert image["Name"] == ECS_NEURON_AMI_NAME


def test_each_track_pins_one_immutable_ecs_neuron_ami_by_name():
    for track in NEURON_TRACKS.values():
        assert re.fullmatch(r"al2023-ami-ecs-neuron-hvm-2023\.0\.20\d{6}-kernel-6\.1-x86_64", track.ecs_neuron_ami)
        assert track.ecs_neuron_ami_parameter == (
            f"/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/{track.ecs_neuron_ami}/image_id"
        )
        assert track.neuron_release in track.dlami.description


# -- the deploy-time lookup: the handler against moto --------------------------------------------------

REGION = "us-west-2"
DLAMI = "Deep Learning AMI Neuron (Ubuntu 24.04) {}"
SDK = "Deep Learning AMI Neuron with Neuron SDK {} and PyTorch/XLA, Ubuntu 24.04"


class CloudFormation(http.server.BaseHTTPRequestHandler):
    """Stands in for the pre-signed S3 URL CloudFormation waits on: keeps every PUT body."""

    bodies: list[dict[str, Any]] = []

    def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers["Content-Length"])
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def cloudformation() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    CloudFormation.bodies = []
    server = http.server.HTTPServer(("127.0.0.1", 0), CloudFormation)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/response", CloudFormation.bodies
    server.shutdown()


def event(kind: str, url: str, query: AmiQuery, *, old: AmiQuery | None = None, physical: str | None = None,
          token: str = "arn:aws:lambda:us-west-2:123456789012:function:lookup-v1") -> dict[str, Any]:
    """A CloudFormation request as it reaches the function: properties as the template gives them."""
    found: dict[str, Any] = {
        "RequestType": kind, "ResponseURL": url, "StackId": "arn:aws:cloudformation:us-west-2:123456789012:stack/t/1",
        "RequestId": f"req-{kind}", "LogicalResourceId": "DevAmi", "ResourceType": RESOURCE_TYPE,
        "ResourceProperties": {"ServiceToken": token, "Owners": [query.owner], "Filters": query.filters()},
    }
    if old is not None:
        found["OldResourceProperties"] = {
            "ServiceToken": "arn:aws:lambda:us-west-2:123456789012:function:lookup-v0",
            "Owners": [old.owner], "Filters": old.filters(),
        }
    if physical is not None:
        found["PhysicalResourceId"] = physical
    return found


def describe_calls(aws: AwsCalls) -> list[dict[str, Any]]:
    return aws.of("DescribeImages")


@pytest.fixture
def dlamis(aws) -> dict[str, str]:
    """The DLAMIs of two SDK releases, published on three days, and impostors of each kind."""
    day = lambda n: dt.datetime(2026, 5, n, tzinfo=dt.UTC)  # noqa: E731
    return {
        "old": publish_ami(REGION, DLAMI.format("20260502"), SDK.format("2.29.1"), day(2)),
        "new": publish_ami(REGION, DLAMI.format("20260520"), SDK.format("2.29.1"), day(20)),
        "other sdk": publish_ami(REGION, DLAMI.format("20260528"), SDK.format("2.30.0"), day(28)),
        "base flavour": publish_ami(REGION, "Deep Learning Base Neuron AMI (Ubuntu 24.04) 20260529",
                                    SDK.format("2.29.1"), day(29)),
        "not amazon's": publish_ami(REGION, DLAMI.format("20260530"), SDK.format("2.29.1"), day(30), owner_alias=None),
        "arm": publish_ami(REGION, DLAMI.format("20260531"), SDK.format("2.29.1"), day(31), architecture="arm64"),
    }


def test_create_picks_the_newest_amazon_ami_of_the_name_and_sdk(aws, dlamis, cloudformation):
    url, bodies = cloudformation
    ec2_client = boto3.client("ec2", region_name=REGION)
    handler.handler(event("Create", url, XLA_TRACK.dlami), None, ec2_client)
    (body,) = bodies
    assert body["Status"] == "SUCCESS", body
    assert body["PhysicalResourceId"] == body["Data"]["ImageId"] == dlamis["new"]
    assert body["Data"]["Name"] == DLAMI.format("20260520")
    assert (body["StackId"], body["RequestId"], body["LogicalResourceId"]) == (
        "arn:aws:cloudformation:us-west-2:123456789012:stack/t/1", "req-Create", "DevAmi"
    )
    (call,) = describe_calls(aws)
    assert call == {"Owners": ["amazon"], "Filters": XLA_TRACK.dlami.filters(), "IncludeDeprecated": True}


def test_a_redeploy_keeps_the_ami_even_when_a_newer_one_appears(aws, dlamis, cloudformation):
    url, bodies = cloudformation
    ec2_client = boto3.client("ec2", region_name=REGION)
    publish_ami(REGION, DLAMI.format("20260601"), SDK.format("2.29.1"), dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
    # The function's code changed (a new ServiceToken), the query did not.
    handler.handler(event("Update", url, XLA_TRACK.dlami, old=XLA_TRACK.dlami, physical=dlamis["old"]), None,
                    ec2_client)
    (body,) = bodies
    assert (body["Status"], body["PhysicalResourceId"], body["Data"]) == ("SUCCESS", dlamis["old"],
                                                                          {"ImageId": dlamis["old"]})
    assert describe_calls(aws) == []


def test_a_changed_query_resolves_again(aws, dlamis, cloudformation):
    url, bodies = cloudformation
    ec2_client = boto3.client("ec2", region_name=REGION)
    other = AmiQuery(XLA_TRACK.dlami.name, "*Neuron SDK 2.30.0*")
    handler.handler(event("Update", url, other, old=XLA_TRACK.dlami, physical=dlamis["old"]), None, ec2_client)
    (body,) = bodies
    assert (body["Status"], body["PhysicalResourceId"]) == ("SUCCESS", dlamis["other sdk"])


def test_delete_does_nothing_but_answer(aws, dlamis, cloudformation):
    url, bodies = cloudformation
    handler.handler(event("Delete", url, XLA_TRACK.dlami, physical=dlamis["new"]), None,
                    boto3.client("ec2", region_name=REGION))
    (body,) = bodies
    assert (body["Status"], body["PhysicalResourceId"], body["Data"]) == ("SUCCESS", dlamis["new"], {})
    assert aws.calls == []  # no AWS call at all: the AMI is its owner's
    assert boto3.client("ec2", region_name=REGION).describe_images(ImageIds=[dlamis["new"]])["Images"]


def test_no_match_fails_the_resource_with_the_filter_and_region(aws, cloudformation):
    url, bodies = cloudformation
    handler.handler(event("Create", url, XLA_TRACK.dlami), None, boto3.client("ec2", region_name=REGION))
    (body,) = bodies
    assert body["Status"] == "FAILED" and body["PhysicalResourceId"] == handler.NO_RESOURCE
    assert "name=Deep Learning AMI Neuron (Ubuntu 24.04)*" in body["Reason"]
    assert "description=*Neuron SDK 2.29.1*" in body["Reason"] and REGION in body["Reason"]
    assert "instance.ami_id" in body["Reason"]


def test_the_handler_imports_nothing_but_the_standard_library_and_boto3():
    tree = ast.parse((HANDLER_DIR / "index.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"boto3"} <= set(sys.stdlib_module_names) | {"__future__"}, imported


# -- the construct: what the template carries -----------------------------------------------------------


@pytest.fixture(scope="module")
def instance_app():
    return quality_synth(config_with(backends=["instance", "batch"]))


def test_the_instance_boots_the_lookups_ami_and_the_lookup_carries_the_tracks_query(instance_app):
    template = instance_app.template_json("instance")
    (lookup_id, lookup), = resources(template, RESOURCE_TYPE).items()
    assert lookup["Properties"]["Owners"] == ["amazon"]
    assert lookup["Properties"]["Filters"] == XLA_TRACK.dlami.filters()
    assert {"Name": "description", "Values": ["*Neuron SDK 2.29.1*"]} in lookup["Properties"]["Filters"]
    (instance,) = resources(template, "AWS::EC2::Instance").values()
    assert instance["Properties"]["ImageId"] == {"Fn::GetAtt": [lookup_id, "ImageId"]}
    assert "Parameters" not in template or not any(SSM_PARAMETER_TYPE.match(p["Type"]) and "ami" in p["Default"].lower()
                                                   for p in template["Parameters"].values())


def test_the_lookup_function_may_describe_images_and_write_its_log_only(instance_app):
    template = instance_app.template_json("instance")
    (function,) = resources(template, "AWS::Lambda::Function").values()
    props = function["Properties"]
    assert (props["Runtime"], props["Handler"], props["Timeout"]) == (RUNTIME.name, "index.handler", 60)
    (log_group_id,) = resources(template, "AWS::Logs::LogGroup")
    assert props["LoggingConfig"] == {"LogGroup": {"Ref": log_group_id}}
    lambda_roles = {k: r for k, r in resources(template, "AWS::IAM::Role").items()
                    if [s["Principal"] for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]]
                    == [{"Service": "lambda.amazonaws.com"}]}
    ((role_id, role),) = lambda_roles.items()
    assert "ManagedPolicyArns" not in role["Properties"]
    statements = [s for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    assert {"Action": "ec2:DescribeImages", "Effect": "Allow", "Resource": "*"} in statements
    others = [s for s in statements if s["Action"] != "ec2:DescribeImages"]
    assert others and all(set(s["Action"]) <= {"logs:CreateLogStream", "logs:PutLogEvents"} for s in others)
    assert all(s["Resource"] == {"Fn::GetAtt": [log_group_id, "Arn"]} for s in others)


def test_the_function_code_is_the_handler_module_file(instance_app):
    template = instance_app.template_json("instance")
    (function,) = resources(template, "AWS::Lambda::Function").values()
    key = function["Properties"]["Code"]["S3Key"]
    stack = instance_app.stacks.backends["instance"]
    manifest = json.loads((instance_app.outdir / f"{stack.artifact_id}.assets.json").read_text())
    (asset,) = [f["source"]["path"] for h, f in manifest["files"].items() if key == f"{h}.zip"]
    files = sorted(p.name for p in (instance_app.outdir / asset).iterdir())
    assert files == ["__init__.py", "index.py"]
    assert (instance_app.outdir / asset / "index.py").read_text() == (HANDLER_DIR / "index.py").read_text()


def test_batch_nodes_read_aws_s_per_ami_name_parameter(instance_app):
    template = instance_app.template_with_nested("batch")
    parameters = {k: v["Default"] for k, v in template["Parameters"].items() if SSM_PARAMETER_TYPE.match(v["Type"])}
    assert ecs_neuron_ami_parameter(ECS_NEURON_AMI_NAME) in parameters.values()
    assert resources(template, RESOURCE_TYPE) == {}  # no lookup where AWS publishes the parameter


def test_nag_and_cfn_lint_are_clean_with_the_lookup(instance_app):
    assert nag_violations(instance_app) == []
    for path in instance_app.template_paths():
        assert cfn_lint_errors(path, instance_app.config.region) == []


def test_the_handler_resolves_what_the_synthesized_properties_ask(aws, instance_app, cloudformation):
    """The seam between template and function: the properties the template carries, as CloudFormation
    hands them over, find the DLAMI."""
    url, bodies = cloudformation
    wanted = publish_ami(REGION, DLAMI.format("20260502"), SDK.format("2.29.1"), dt.datetime(2026, 5, 2, tzinfo=dt.UTC))
    (lookup,) = resources(instance_app.template_json("instance"), RESOURCE_TYPE).values()
    request = event("Create", url, XLA_TRACK.dlami)
    request["ResourceProperties"] = {**lookup["Properties"], "ServiceToken": "arn:aws:lambda:..."}
    handler.handler(request, None, boto3.client("ec2", region_name=REGION))
    assert bodies[0]["PhysicalResourceId"] == wanted


# -- explicit AMIs and flavours ----------------------------------------------------------------------------


def test_an_explicit_ami_id_replaces_the_lookup_and_the_parameter():
    result = synth(config_with(backends=["instance", "batch"], instance={"ami_id": "ami-0123456789abcdef0"},
                               batch={"ami_id": "ami-0fedcba9876543210"}), nag=False)
    instance_template = result.template_json("instance")
    assert resources(instance_template, RESOURCE_TYPE) == {} and resources(instance_template, "AWS::Lambda::Function") == {}
    (instance,) = resources(instance_template, "AWS::EC2::Instance").values()
    assert instance["Properties"]["ImageId"] == "ami-0123456789abcdef0"
    batch_template = result.template_with_nested("batch")
    for template in group_resources(batch_template, "AWS::EC2::LaunchTemplate").values():
        assert template["Properties"]["LaunchTemplateData"]["ImageId"] == "ami-0fedcba9876543210"
    assert not [p for p in batch_template.get("Parameters", {}).values() if p.get("Default", "").startswith(PUBLIC_PREFIX)]


@pytest.mark.parametrize("ami_id", ["ami-123", "ami-0123456789ABCDEF0", "ami-0123456789abcdef0 ", "i-0123456789abcdef0",
                                    "ami-0123456789abcdef01"])
def test_a_malformed_ami_id_is_refused_naming_the_field(ami_id):
    for section in ("batch", "instance"):
        with pytest.raises(ConfigError) as err:
            config_with(**{section: {"ami_id": ami_id}})
        assert f"{section}.ami_id = {ami_id!r}: an AMI id such as ami-0123456789abcdef0" in str(err.value)


@pytest.mark.parametrize(
    ("flavour", "name"),
    [
        ("multi-framework/ubuntu-24.04", "Deep Learning AMI Neuron (Ubuntu 24.04)*"),
        ("base/amazon-linux-2023", "Deep Learning Base Neuron AMI (Amazon Linux 2023)*"),
        ("jax-0.10/ubuntu-24.04", "Deep Learning AMI Neuron JAX 0.10 (Ubuntu 24.04)*"),
        ("pytorch-inference-vllm-0.24.0.1.1.0/ubuntu-24.04",
         "Deep Learning AMI Neuron PyTorch Inference vLLM 0.24.0.1.1.0 (Ubuntu 24.04)*"),
    ],
)
def test_flavours_map_to_the_ami_names_of_the_neuron_dlami_guide(flavour, name):
    assert dlami_name(flavour) == name
    assert XLA_TRACK.dlami_query(flavour) == AmiQuery(name, "*Neuron SDK 2.29.1*")


@pytest.mark.parametrize("flavour", ["pytorch/ubuntu-24.04", "torch-2.9/ubuntu-24.04", "base/debian-12", "base"])
def test_an_unknown_flavour_is_refused(flavour):
    with pytest.raises(ConfigError, match=r"instance\.dlami = .*a Neuron DLAMI flavour <kind>/<os>"):
        config_with(instance={"dlami": flavour})


def test_the_construct_refuses_a_bad_ami_id_or_flavour():
    app = cdk.App(context=CDK_CONTEXT)
    stack = cdk.Stack(app, "S", env=cdk.Environment(region=REGION))
    vpc = ec2.Vpc(stack, "Vpc")
    spec = DEFAULT_CATALOG.get("trn1.2xlarge")
    with pytest.raises(ConfigError, match="ami_id = 'ami-x'"):
        DevInstance(stack, "A", vpc=vpc, spec=spec, ami_id="ami-x")
    with pytest.raises(ConfigError, match="dlami = 'nope/ubuntu-24.04'"):
        DevInstance(stack, "B", vpc=vpc, spec=spec, dlami="nope/ubuntu-24.04")


def test_two_lookups_in_a_stack_share_one_function():
    app = cdk.App(context=CDK_CONTEXT)
    stack = cdk.Stack(app, "S", env=cdk.Environment(region=REGION))
    vpc = ec2.Vpc(stack, "Vpc")
    spec = DEFAULT_CATALOG.get("trn1.2xlarge")
    DevInstance(stack, "A", vpc=vpc, spec=spec)
    DevInstance(stack, "B", vpc=vpc, spec=spec, dlami="base/amazon-linux-2023")
    template = app.synth().get_stack_by_name("S").template
    assert len(resources(template, "AWS::Lambda::Function")) == 1
    lookups = resources(template, RESOURCE_TYPE).values()
    assert sorted(lk["Properties"]["Filters"][0]["Values"][0] for lk in lookups) == [
        "Deep Learning AMI Neuron (Ubuntu 24.04)*", "Deep Learning Base Neuron AMI (Amazon Linux 2023)*",
    ]
