"""An importing CDK app that uses the constructs as it would aws-cdk-lib's: ``grant_submit_job`` and
``grant_job_control`` on a TrainiumBatch, ``connections`` on LustreStorage, TrainiumCluster and DevInstance (in
Python, and handed to aws-cdk-lib as ``ec2.IConnectable``). It imports everything from the package root,
synthesizes under cdk-nag (AwsSolutions and NIST 800-53 rev 5: a finding not acknowledged fails the synth) and
cfn-lint, and the test asserts the IAM statements it grants and who can reach whom (tests/support/reachability.py)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam

from tests.support.helpers import CDK_CONTEXT, add_nag_packs, cfn_lint_errors, new_outdir, resources
from tests.support.reachability import Reachability
from trainium_cdk import (
    DEFAULT_CATALOG,
    ComputePlacement,
    ConfigError,
    DataRepositoryProps,
    DevInstance,
    GroupNodes,
    LustreStorage,
    TrainingNetwork,
    TrainiumBatch,
    TrainiumCluster,
)
from trainium_cdk.constructs.nag import NagAcknowledgments

ENV = cdk.Environment(account="123456789012", region="us-west-2")
STACK = "Importer"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1"
LUSTRE = (988, *range(1018, 1024))
TRN1N = DEFAULT_CATALOG.get("trn1n.32xlarge")


def build(stack: cdk.Stack) -> dict[str, Any]:
    """What a user writes: a network, a file system, a Batch queue, a cluster and a dev instance, and the verbs
    of aws-cdk-lib between them and the app's own roles and security groups."""
    network = TrainingNetwork(stack, "Net", az_ids=["usw2-az4", "usw2-az3"],
                              compute_groups=[ComputePlacement(name="pretrain", az_ids=("usw2-az4",))])
    storage = LustreStorage(stack, "Datasets", vpc=network.vpc, subnet=network.compute_subnet("pretrain"),
                            clients=[network.efa_security_group], data_repository=DataRepositoryProps(s3_prefix="data/"))
    queue = TrainiumBatch(stack, "Queue", group=GroupNodes("pretrain", TRN1N, max_nodes=2), vpc=network.vpc,
                          subnets=network.compute_subnets("pretrain"), security_groups=[network.efa_security_group],
                          placement_group=network.placement_group("pretrain"), storage=storage, image_uri=IMAGE)
    cluster = TrainiumCluster(stack, "Trainer", vpc=network.vpc, subnets=network.private_subnets, system_nodes=1)
    cluster.add_lustre_storage(storage, subnet=network.compute_subnet("pretrain"))
    dev = DevInstance(stack, "Dev", vpc=network.vpc, spec=DEFAULT_CATALOG.get("trn1.2xlarge"), storage=storage,
                      storage_client_group=network.efa_security_group)

    # A CI pipeline's role submits jobs; an operator's follows them (trn status, logs, cancel).
    submitter = iam.Role(stack, "Submitter", assumed_by=iam.AccountRootPrincipal())
    queue.grant_submit_job(submitter)
    operator = iam.Role(stack, "Operator", assumed_by=iam.AccountRootPrincipal())
    queue.grant_job_control(operator)
    reader = iam.Role(stack, "Reader", assumed_by=iam.AccountRootPrincipal())
    storage.grant_read_data(reader)
    # A data-preparation host of the app's: Lustre to the file system; SSH to the dev instance.
    prep = ec2.SecurityGroup(stack, "DataPrep", vpc=network.vpc, allow_all_outbound=False,
                             description="Data preparation hosts")
    storage.connections.allow_default_port_from(prep)
    prep.connections.allow_to(dev, ec2.Port.tcp(22), "SSH to the dev instance")  # dev as aws-cdk-lib's IConnectable
    # The dev instance's own group (its storage client group is open already: skipped, no duplicate rule).
    storage.connections.allow_default_port_from(dev)
    # The cluster's nodes (its cluster security group) are open already, by add_lustre_storage: skipped too.
    storage.connections.allow_default_port_from(ec2.Connections(security_groups=[cluster.cluster.cluster_security_group]))
    # A CI runner's group reaches the cluster's private API endpoint.
    runner = ec2.SecurityGroup(stack, "CiRunner", vpc=network.vpc, allow_all_outbound=False, description="CI runners")
    cluster.connections.allow_default_port_from(runner)
    outsider = ec2.SecurityGroup(stack, "Outsider", vpc=network.vpc, description="Opened to nothing")
    # A metrics scraper of the app's reads the Batch nodes' exporter: TrainiumBatch as aws-cdk-lib's IConnectable.
    scraper = ec2.SecurityGroup(stack, "Scraper", vpc=network.vpc, allow_all_outbound=False, description="Scrapers")
    scraper.connections.allow_to(queue, ec2.Port.tcp(9100), "node metrics")

    for role in (submitter, operator, reader):
        cdk.Validations.of(role).acknowledge(cdk.Acknowledgment(
            id="NIST.800.53.R5-IAMNoInlinePolicy", reason="The app's role: its grants in its DefaultPolicy"))
    for finding in ("Resource::*", "Resource::arn:<AWS::Partition>:batch:us-west-2:123456789012:job/*"):
        cdk.Validations.of(operator).acknowledge(cdk.Acknowledgment(
            id=f"AwsSolutions-IAM5[{finding}]", reason="Batch's describe and list calls take '*' only"))
    bucket = stack.get_logical_id(storage.bucket.node.default_child)  # of the construct's path: no id is pinned
    for finding in ("Action::s3:GetBucket*", "Action::s3:GetObject*", "Action::s3:List*",
                    f"Resource::<{bucket}.Arn>/data/*"):
        cdk.Validations.of(reader).acknowledge(cdk.Acknowledgment(
            id=f"AwsSolutions-IAM5[{finding}]", reason="aws-cdk-lib's Bucket.grant_read: the data set's prefix"))
    return {"storage": storage, "queue": queue, "cluster": cluster, "dev": dev, "prep": prep, "runner": runner,
            "outsider": outsider, "scraper": scraper, "submitter": submitter, "operator": operator, "reader": reader, "network": network}


@pytest.fixture(scope="module")
def app() -> tuple[dict[str, Any], dict[str, Any], Any]:
    outdir = new_outdir()
    application = cdk.App(outdir=str(outdir), context=CDK_CONTEXT)
    add_nag_packs(application)
    cdk.Aspects.of(application).add(NagAcknowledgments())
    stack = cdk.Stack(application, STACK, env=ENV)
    built = build(stack)
    application.synth()  # cdk-nag runs here: an unacknowledged finding raises
    template = json.loads((outdir / f"{STACK}.template.json").read_text())
    ids = {name: stack.get_logical_id(c.node.default_child) for name, c in built.items()
           if isinstance(c, (ec2.SecurityGroup, iam.Role))}
    ids["storage"] = stack.get_logical_id(built["storage"].security_group.node.default_child)
    ids["bucket"] = stack.get_logical_id(built["storage"].bucket.node.default_child)
    ids["dev"] = stack.get_logical_id(built["dev"].security_group.node.default_child)
    ids["api"] = stack.get_logical_id(built["cluster"].api_security_group.node.default_child)
    ids["efa"] = stack.get_logical_id(built["network"].efa_security_group.node.default_child)
    return template, ids, outdir


def policy_of(template: dict[str, Any], role: str) -> set[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """The statements of a role's policy, each (effect, actions, resources), in no order (CDK sorts and merges)."""
    (policy,) = [p for p in resources(template, "AWS::IAM::Policy").values()
                 if p["Properties"]["Roles"] == [{"Ref": role}]]

    def listed(value: Any) -> tuple[str, ...]:
        return tuple(sorted(json.dumps(v, sort_keys=True) for v in (value if isinstance(value, list) else [value])))

    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert all(set(s) == {"Action", "Effect", "Resource"} for s in statements)  # no condition, no principal
    return {(s["Effect"], listed(s["Action"]), listed(s["Resource"])) for s in statements}


def statement(actions: list[str], resources: list[Any]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    return ("Allow", tuple(sorted(json.dumps(a) for a in actions)),
            tuple(sorted(json.dumps(r, sort_keys=True) for r in resources)))


def test_the_app_passes_cfn_lint(app):
    _, _, outdir = app
    assert cfn_lint_errors(outdir / f"{STACK}.template.json", ENV.region) == []


def test_grant_submit_job_grants_submit_on_the_job_definition_and_queue_only(app):
    template, ids, _ = app
    (definition,) = resources(template, "AWS::Batch::JobDefinition")
    (queue,) = resources(template, "AWS::Batch::JobQueue")
    assert policy_of(template, ids["submitter"]) == {
        statement(["batch:SubmitJob"], [{"Ref": definition}, {"Fn::GetAtt": [queue, "JobQueueArn"]}]),
    }


def test_grant_job_control_grants_what_trn_status_logs_and_cancel_call(app):
    template, ids, _ = app
    (log_group,) = [k for k in resources(template, "AWS::Logs::LogGroup") if k.startswith("QueueLogs")]
    assert policy_of(template, ids["operator"]) == {
        statement(["batch:DescribeJobs", "batch:ListJobs", "batch:DescribeJobDefinitions", "batch:DescribeJobQueues"],
                  ["*"]),
        statement(["batch:TerminateJob"],
                  [{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":batch:us-west-2:123456789012:job/*"]]}]),
        statement(["cloudformation:DescribeStacks"], [{"Ref": "AWS::StackId"}]),
        # aws-cdk-lib's LogGroup.grant_read: trn logs calls GetLogEvents.
        statement(["logs:DescribeLogGroups", "logs:DescribeLogStreams", "logs:FilterLogEvents", "logs:GetLogEvents",
                   "logs:GetLogGroupFields"], [{"Fn::GetAtt": [log_group, "Arn"]}]),
    }


def test_grant_read_data_reads_the_data_repositorys_prefix(app):
    template, ids, _ = app
    assert policy_of(template, ids["reader"]) == {statement(
        ["s3:GetObject*", "s3:GetBucket*", "s3:List*"],
        [{"Fn::GetAtt": [ids["bucket"], "Arn"]},
         {"Fn::Join": ["", [{"Fn::GetAtt": [ids["bucket"], "Arn"]}, "/data/*"]]}],
    )}


def test_lustre_connections_open_a_client_both_ways_on_lustre_ports_only(app):
    template, ids, _ = app
    model = Reachability({STACK: template})
    prep, storage, outsider = f"{STACK}/{ids['prep']}", f"{STACK}/{ids['storage']}", f"{STACK}/{ids['outsider']}"
    for port in LUSTRE:
        assert model.reaches({prep}, {storage}, "tcp", port)
        assert model.reaches({storage}, {prep}, "tcp", port)  # Lustre servers call clients back
    assert not model.reaches({prep}, {storage}, "tcp", 1000)
    assert not model.reaches({prep}, {storage}, "tcp", 22)
    assert not model.reaches({outsider}, {storage}, "tcp", 988)


def test_the_dev_instance_is_a_lustre_client_and_an_iconnectable(app):
    template, ids, _ = app
    model = Reachability({STACK: template})
    dev, storage, prep = (f"{STACK}/{ids[k]}" for k in ("dev", "storage", "prep"))
    assert all(model.reaches({dev}, {storage}, "tcp", port) for port in LUSTRE)
    assert model.reaches({prep}, {dev}, "tcp", 22)  # aws-cdk-lib's allow_to read the DevInstance's connections
    assert not model.reaches({prep}, {dev}, "tcp", 23)


def test_the_batch_queue_is_an_iconnectable_of_its_nodes_groups(app):
    template, ids, _ = app
    model = Reachability({STACK: template})
    scraper, nodes, outsider = (f"{STACK}/{ids[k]}" for k in ("scraper", "efa", "outsider"))
    assert model.reaches({scraper}, {nodes}, "tcp", 9100)
    assert not model.reaches({scraper}, {nodes}, "tcp", 9101)
    assert not model.reaches({outsider}, {nodes}, "tcp", 9100)


def test_the_cluster_connections_reach_the_api_endpoint(app):
    template, ids, _ = app
    model = Reachability({STACK: template})
    runner, api = f"{STACK}/{ids['runner']}", f"{STACK}/{ids['api']}"
    assert model.reaches({runner}, {api}, "tcp", 443)
    assert not model.reaches({runner}, {api}, "tcp", 80)


def test_no_rule_is_made_twice(app):
    """EC2 refuses a duplicate rule at deploy: the dev instance's storage client group (the EFA group) and the
    cluster's group were open already (``clients=``, ``add_lustre_storage``), and allow_default_port_from skipped
    them."""
    template, _, _ = app
    rules = [json.dumps(r["Properties"], sort_keys=True) for kind in
             ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
             for r in resources(template, kind).values()]
    assert [r for r, n in Counter(rules).items() if n > 1] == []


def test_granting_a_file_system_without_a_data_repository_names_the_prop():
    app = cdk.App(outdir=str(new_outdir()), context=CDK_CONTEXT)
    stack = cdk.Stack(app, STACK, env=ENV)
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    storage = LustreStorage(stack, "Fs", vpc=vpc, subnet=vpc.private_subnets[0], clients=[])
    with pytest.raises(ConfigError, match="data_repository"):
        storage.grant_read_data(iam.Role(stack, "Reader", assumed_by=iam.AccountRootPrincipal()))
