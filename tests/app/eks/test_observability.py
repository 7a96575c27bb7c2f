"""Health and metrics on EKS: the node monitoring agent and node repair, Container Insights with Neuron
and EFA metrics through Pod Identity, alarms, and the cluster's dashboard."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.helpers import (
    cfn_lint_errors,
    config_with,
    helm_chart_name,
    nag_violations,
    quality_synth,
    resources,
    synth,
    template_text,
)
from trainium_cdk.constructs.observability import (
    CLOUDWATCH_ADDON,
    CLOUDWATCH_NAMESPACE,
    CLOUDWATCH_SERVICE_ACCOUNT,
    NODE_MONITORING_ADDON,
)


@pytest.fixture(scope="module")
def app():
    return quality_synth(config_with(backends=["eks"]))


@pytest.fixture(scope="module")
def eks(app):
    return app.template_json("eks")


def _addon(template, name):
    (found,) = [(k, r) for k, r in resources(template, "AWS::EKS::Addon").items() if r["Properties"]["AddonName"] == name]
    return found


def test_node_monitoring_agent_feeds_karpenters_node_repair(app, eks):
    """The default capacity path: Karpenter replaces a node whose AcceleratedHardwareReady is False."""
    _addon(eks, NODE_MONITORING_ADDON)
    (karpenter,) = [c["Properties"] for c in resources(eks, "Custom::AWSCDK-EKS-HelmChart").values()
                    if helm_chart_name(c["Properties"]) == "karpenter"]
    values = karpenter["Values"]
    text = values if isinstance(values, str) else "".join(p for p in values["Fn::Join"][1] if isinstance(p, str))
    assert '"featureGates":{"nodeRepair":true}' in text
    assert not [r for r in resources(eks, "AWS::EKS::Nodegroup").values()
                if r["Properties"].get("AmiType") == "AL2023_x86_64_NEURON"]


@pytest.fixture(scope="module")
def managed():
    return synth(config_with(backends=["eks"], eks={"capacity": "managed"}), nag=False)


def test_node_monitoring_agent_feeds_node_repair_of_every_trainium_node_group(managed):
    eks = managed.template_json("eks")
    _addon(eks, NODE_MONITORING_ADDON)
    trainium = [
        r for r in resources(eks, "AWS::EKS::Nodegroup").values()
        if r["Properties"].get("AmiType") == "AL2023_x86_64_NEURON"
    ]
    assert len(trainium) == len(managed.config.compute_groups)
    for group in trainium:
        assert group["Properties"]["NodeRepairConfig"] == {"Enabled": True}


def test_cloudwatch_observability_authenticates_through_pod_identity(eks):
    logical_id, addon = _addon(eks, CLOUDWATCH_ADDON)
    (association_id, association), = [
        (k, r) for k, r in resources(eks, "AWS::EKS::PodIdentityAssociation").items()
        if r["Properties"]["ServiceAccount"] == CLOUDWATCH_SERVICE_ACCOUNT
    ]
    assert association["Properties"]["Namespace"] == CLOUDWATCH_NAMESPACE
    assert association_id in addon["DependsOn"]  # the agent starts with credentials
    role = eks["Resources"][association["Properties"]["RoleArn"]["Fn::GetAtt"][0]]
    assert [s["Principal"] for s in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]] == [
        {"Service": "pods.eks.amazonaws.com"}]
    # CloudWatchAgentServerPolicy's actions, its log actions on this cluster's Container Insights groups only: the
    # managed policy's logs:PutRetentionPolicy on * could shorten the EKS audit log's retention.
    assert "ManagedPolicyArns" not in role["Properties"]
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    statements = [s for p in resources(eks, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]
                  for s in p["Properties"]["PolicyDocument"]["Statement"]]
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if statement["Resource"] == "*":
            assert not [a for a in actions if a.startswith("logs:") and a != "logs:DescribeLogGroups"], statement
            assert not [a for a in actions if a.startswith(("ssm:", "xray:"))], statement
        else:
            groups = ["arn:", {"Ref": "AWS::Partition"}, ":logs:us-west-2:", {"Ref": "AWS::AccountId"},
                      ":log-group:/aws/containerinsights/t-eks/*"]
            assert statement["Resource"] == [
                {"Fn::Join": ["", groups]}, {"Fn::Join": ["", [*groups[:-1], groups[-1] + ":log-stream:*"]]}]
    granted = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"logs:PutRetentionPolicy", "logs:PutLogEvents", "cloudwatch:PutMetricData"} <= granted


def test_alarms_on_neuron_hardware_errors_and_failed_nodes(eks):
    alarms = {r["Properties"]["MetricName"]: r["Properties"] for r in resources(eks, "AWS::CloudWatch::Alarm").values()}
    hardware = alarms["node_neurondevice_hw_ecc_events_total"]
    assert hardware["Namespace"] == "ContainerInsights"
    assert hardware["ComparisonOperator"] == "GreaterThanThreshold" and hardware["Threshold"] == 0
    assert "AcceleratedHardwareReady" in hardware["AlarmDescription"]
    # The alarm that fires when the node monitoring agent sets AcceleratedHardwareReady=False: Container
    # Insights counts a node with any bad condition as failed.
    failed = alarms["cluster_failed_node_count"]
    assert failed["Statistic"] == "Maximum" and failed["Threshold"] == 0
    assert failed["ComparisonOperator"] == "GreaterThanThreshold"
    assert "AcceleratedHardwareReady" in failed["AlarmDescription"]


def test_dashboard_shows_neuron_efa_and_fsx(app, eks):
    (dashboard,) = resources(eks, "AWS::CloudWatch::Dashboard").values()
    body = json.loads(template_text(dashboard["Properties"]["DashboardBody"]))
    searched, listed = set(), set()
    for metric in [m for widget in body["widgets"] for m in widget["properties"].get("metrics", [])]:
        if isinstance(metric[0], dict):  # a search: its schema, metric name and cluster
            found = re.fullmatch(r"SEARCH\('\{([^}]*)\} MetricName=\"(\w+)\" ClusterName=\"([^\"]*)\"', '\w+', \d+\)",
                                 metric[0]["expression"])
            assert found, metric
            searched.add(found.groups())
        else:
            listed.add(tuple(metric[:3]))
    per_node = "ContainerInsights,ClusterName,InstanceId,NodeName"
    assert searched >= {(per_node, m, "t-eks") for m in ("node_neuroncore_utilization", "node_neuroncore_memory_usage_total",
                                                         "node_efa_rx_bytes", "node_efa_tx_bytes")}
    assert listed >= {("AWS/FSx", "DataReadBytes", "FileSystemId"), ("AWS/FSx", "DataWriteBytes", "FileSystemId")}
    assert dashboard["Properties"]["DashboardName"] == f"{app.config.stack_name('eks')}-training"


def test_passes_cfn_lint_and_cdk_nag(app):
    assert not nag_violations(app)
    (path,) = [p for p in app.template_paths() if "eks" in p.name]
    assert cfn_lint_errors(path, app.config.region) == []
