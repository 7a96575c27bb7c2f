"""CloudWatch Logs log groups are encrypted with a customer-managed KMS key of their stack (cdk-nag NIST
800-53 rev 5 CloudWatchLogGroupEncrypted, checkov CKV_AWS_158), whose policy lets only CloudWatch Logs of this
region use it, for this account's log groups (CloudWatch Logs user guide, "Encrypt log data in CloudWatch Logs
using AWS Key Management Service")."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs

from tests.support.apps import synthesized, synthesized_pipeline
from tests.support.helpers import CDK_CONTEXT, add_nag_packs, new_outdir, resources, template_text
from trainium_cdk.constructs.log_encryption import LOGS_KEY_ACTIONS, encrypt_log_groups
from trainium_cdk.constructs.nag import NagAcknowledgments


def _templates(outdir):
    """Every template of an assembly (nested stacks' too), by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(outdir.rglob("*.template.json"))}


def _top_and_nested(app):
    """Each nested stack's template with the template of the stack that holds it."""
    for stack in app.stacks.stacks:
        for nested in stack.node.find_all():
            if isinstance(nested, cdk.NestedStack):
                parent = app.assembly.get_stack_by_name(stack.stack_name).template
                yield parent, json.loads((app.outdir / nested.template_file).read_text())


@pytest.fixture(scope="module", params=["trn1.32xlarge", "trn1n.32xlarge+trn1.2xlarge"])
def app(request):
    return synthesized(request.param)


def test_every_log_group_of_every_backend_is_keyed(app):
    templates = _templates(app.outdir)
    groups = {f"{n}:{k}": g for n, t in templates.items() for k, g in resources(t, "AWS::Logs::LogGroup").items()}
    # The flow logs, the EKS control plane, the kubectl provider's two functions, each Batch group's job logs,
    # the AMI lookup of the development instance.
    assert len(groups) >= 6
    unkeyed = [name for name, group in groups.items() if "KmsKeyId" not in group["Properties"]]
    assert unkeyed == []


def test_a_stack_keys_its_groups_with_its_own_key(app):
    for name, template in _templates(app.outdir).items():
        groups = resources(template, "AWS::Logs::LogGroup")
        keys = resources(template, "AWS::KMS::Key")
        if not groups or not any("LogsKey" in k for k in keys):
            continue
        (key_id,) = [k for k in keys if k.startswith("LogsKey")]
        for group in groups.values():
            assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}, name


def test_a_nested_stacks_groups_use_their_parents_key(app):
    pairs = list(_top_and_nested(app))
    if not pairs:
        pytest.skip("no nested stack with log groups in this app")
    for parent, nested in pairs:
        (key_id,) = [k for k in resources(parent, "AWS::KMS::Key") if k.startswith("LogsKey")]
        for group in resources(nested, "AWS::Logs::LogGroup").values():
            reference = group["Properties"]["KmsKeyId"]["Ref"]  # a parameter the parent fills with its key's ARN
            assert reference in nested["Parameters"]
        assert not [k for k in resources(nested, "AWS::KMS::Key") if k.startswith("LogsKey")]


def test_the_key_rotates_and_lets_only_cloudwatch_logs_of_this_region_use_it_for_this_accounts_groups(app):
    for name, template in _templates(app.outdir).items():
        for key_id, key in resources(template, "AWS::KMS::Key").items():
            if not key_id.startswith("LogsKey"):
                continue
            assert key["Properties"]["EnableKeyRotation"] is True
            assert key["DeletionPolicy"] == "Delete"  # every log group of the apps is deleted with its stack
            (logs_statement,) = [
                s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Service" in s.get("Principal", {})
            ]
            region = app.config.region
            assert logs_statement["Principal"]["Service"] == f"logs.{region}.amazonaws.com"
            assert sorted(logs_statement["Action"]) == sorted(LOGS_KEY_ACTIONS)
            ((operator, condition),) = logs_statement["Condition"].items()
            ((key_name, arns),) = condition.items()
            assert (operator, key_name) == ("ArnLike", "kms:EncryptionContext:aws:logs:arn"), name
            assert template_text(arns).endswith(f":logs:{region}:<token>:log-group:*")
            assert {"Ref": "AWS::AccountId"} in arns["Fn::Join"][1]  # this account's log groups only


def test_the_pipelines_stages_key_their_log_groups():
    pipeline = synthesized_pipeline()
    for path in pipeline.template_paths():
        for group in resources(json.loads(path.read_text()), "AWS::Logs::LogGroup").values():
            assert "KmsKeyId" in group["Properties"], path.name


def test_a_kept_log_group_keeps_its_key_and_a_group_with_a_key_keeps_it():
    """A construct user's log group kept at stack deletion keeps the key too, or its logs become unreadable;
    a log group given a key of its own is left alone."""
    app = cdk.App(outdir=str(new_outdir()), context=CDK_CONTEXT)
    add_nag_packs(app)
    cdk.Aspects.of(app).add(NagAcknowledgments())
    stack = cdk.Stack(app, "Kept", env=cdk.Environment(account="123456789012", region="us-west-2"))
    logs.LogGroup(stack, "Kept", removal_policy=cdk.RemovalPolicy.RETAIN)
    nested = cdk.NestedStack(stack, "Nested")
    logs.LogGroup(nested, "Deleted", removal_policy=cdk.RemovalPolicy.DESTROY)
    encrypt_log_groups(stack)
    template = app.synth().get_stack_by_name("Kept").template
    (key,) = resources(template, "AWS::KMS::Key").values()
    assert key["DeletionPolicy"] == "Retain"
