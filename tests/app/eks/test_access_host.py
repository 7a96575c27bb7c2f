"""The EKS API access host: what it may open (the reachability model over the synthesized app) and the
managed policy that lets a user port-forward through it and do nothing else with Session Manager."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.support.apps import synthesized
from tests.support.cli_support import REGION, assert_one_clean_line, run_cli
from tests.support.helpers import BASE_CONFIG, config_with, resources, synth
from tests.support.reachability import ACCESS_HOST, CONTROL_PLANE, EKS_CLUSTER_SG, VPC_ENDPOINT, Reachability
from tests.unit.cli.test_cli_connect import HOST, OWN_CLUSTER, OWN_STACK, deployed, home, tools  # noqa: F401 (fixture)
from trainium_cdk.facts.names import OUTPUT_CONNECT_POLICY_ARN

SESSION_MANAGER = ("ssm", "ssmmessages", "ec2messages")


@pytest.fixture(scope="module")
def with_endpoints():
    """The EKS backend in a VPC with interface endpoints, as a user writes it: `network.interface_endpoints: true`."""
    result = synth(config_with(backends=["eks"], network={**BASE_CONFIG["network"], "interface_endpoints": True}),
                   nag=False)
    return Reachability.from_dir(result.outdir)


def _host_and_plane(model: Reachability):
    (host,), (plane,) = model.of_backend(ACCESS_HOST), model.of_backend(CONTROL_PLANE)
    return host, plane


def test_with_interface_endpoints_the_host_reaches_the_api_and_session_manager_and_nothing_else(with_endpoints):
    model = with_endpoints
    host, plane = _host_and_plane(model)
    endpoints = {e.name: e for e in model.of_backend(VPC_ENDPOINT)}
    assert set(endpoints) == {"ecr.api", "ecr.dkr", "sts", "logs", *SESSION_MANAGER}
    assert model.reaches(host.all_groups, plane.all_groups, "tcp", 443)
    for name in SESSION_MANAGER:
        assert model.reaches(host.all_groups, endpoints[name].all_groups, "tcp", 443), name
    for name in set(endpoints) - set(SESSION_MANAGER):
        assert not model.reaches(host.all_groups, endpoints[name].all_groups, "tcp", 443), name
    # The API endpoint's own group, not the cluster security group every node carries.
    (api,) = [g for g in plane.all_groups if not g.endswith(EKS_CLUSTER_SG)]
    allowed = {api}.union(*(endpoints[n].all_groups for n in SESSION_MANAGER))
    egress = [r for g in host.all_groups for r in model.rules_of(g, "out")]
    assert [r for r in egress if r.cidr is not None] == []  # nothing on the internet, nor in the VPC by address
    assert {(r.protocol, r.from_port, r.to_port) for r in egress} == {("tcp", 443, 443)}
    assert {r.peer for r in egress} == allowed


def test_through_nat_the_host_opens_https_only():
    """Without interface endpoints the SSM agent reaches Session Manager's public addresses through NAT, which
    no prefix list names: HTTPS to any address, and to the API endpoint's own group (not the cluster's)."""
    model = Reachability.from_dir(synthesized("trn1.32xlarge").outdir)
    host, plane = _host_and_plane(model)
    egress = [r for g in host.all_groups for r in model.rules_of(g, "out")]
    (api,) = [g for g in plane.all_groups if not g.endswith(EKS_CLUSTER_SG)]
    assert sorted((r.protocol, r.from_port, r.to_port, str(r.cidr), str(r.peer)) for r in egress) == [
        ("tcp", 443, 443, "0.0.0.0/0", "None"), ("tcp", 443, 443, "None", api),
    ]


def _connect_policy() -> tuple[dict[str, Any], str]:
    """The EKS stack's managed policy its ConnectPolicyArn output names, and the stack's logical ID of the host."""
    result = synthesized("trn1.32xlarge")
    template = result.template_json("eks")
    (policy_id,) = [template["Outputs"][k]["Value"]["Ref"] for k in template["Outputs"]
                    if k == OUTPUT_CONNECT_POLICY_ARN]
    (host_id,) = resources(template, "AWS::EC2::Instance")
    return template["Resources"][policy_id], host_id


def _arn(*parts: Any) -> dict[str, Any]:
    return {"Fn::Join": ["", list(parts)]}


PARTITION, ACCOUNT = {"Ref": "AWS::Partition"}, {"Ref": "AWS::AccountId"}


def test_the_connect_policy_allows_port_forwarding_to_the_host_only(home):  # noqa: F811
    policy, host_id = _connect_policy()
    assert policy["Type"] == "AWS::IAM::ManagedPolicy"
    (cluster_id,) = resources(synthesized("trn1.32xlarge").template_json("eks"), "AWS::EKS::Cluster")
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {
            "Sid": "PortForwardingToTheAccessHostOnly",
            "Action": "ssm:StartSession",
            "Effect": "Allow",
            "Condition": {"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}},
            "Resource": [
                _arn("arn:", PARTITION, f":ec2:{REGION}:", ACCOUNT, ":instance/", {"Ref": host_id}),
                _arn("arn:", PARTITION, f":ssm:{REGION}::document/AWS-StartPortForwardingSessionToRemoteHost"),
            ],
        },
        {
            "Sid": "OwnSessionsOnly",
            "Action": ["ssm:ResumeSession", "ssm:TerminateSession"],
            "Effect": "Allow",
            "Resource": _arn("arn:", PARTITION, f":ssm:{REGION}:", ACCOUNT, ":session/${aws:userid}-*"),
        },
        {"Sid": "ReadTheStack", "Action": "cloudformation:DescribeStacks", "Effect": "Allow",
         "Resource": {"Ref": "AWS::StackId"}},
        {"Sid": "ReadTheCluster", "Action": ["eks:DescribeCluster", "eks:ListAccessEntries"], "Effect": "Allow",
         "Resource": {"Fn::GetAtt": [cluster_id, "Arn"]}},
    ]


def test_trn_connect_starts_the_one_document_the_policy_allows(aws, home, tmp_path, monkeypatch):  # noqa: F811
    """What `trn connect` sends to Session Manager, in full: its document is the one the policy names."""
    policy, _ = _connect_policy()
    (allowed,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "ssm:StartSession"]
    document = allowed["Resource"][1]["Fn::Join"][1][-1].rsplit("/", 1)[1]
    cluster = deployed(aws, access_host=True, stack=OWN_STACK, cluster_name=OWN_CLUSTER)
    argv = tmp_path / "argv"
    tools(tmp_path, monkeypatch, session_manager_plugin="echo 1.2.707.0",
          aws=f'printf "%s\\n" "$@" > {argv}; echo "AccessDeniedException" >&2; exit 254')
    result = run_cli("connect", "--stack", OWN_STACK, "--region", REGION, "--port", "18443")
    assert_one_clean_line(result, f"may ssm:StartSession on it with {document}")
    endpoint = urlparse(cluster["endpoint"]).netloc.rsplit(":", 1)[0]
    sent = argv.read_text().splitlines()
    assert sent[:-1] == ["ssm", "start-session", "--region", REGION, "--target", HOST, "--document-name", document,
                         "--parameters"]
    assert json.loads(sent[-1]) == {"host": [endpoint], "portNumber": ["443"], "localPortNumber": ["18443"]}
