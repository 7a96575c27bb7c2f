"""Deploy order of the EKS stack, read from the synthesized dependency graph (DependsOn plus the
implicit edges of Ref and Fn::GetAtt): nothing that needs a running pod is created before a node
group that can run it, and whatever waits for pods waits long enough."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.helpers import config_with, helm_chart_name, resources, synth

# Every knob that adds something to the cluster is on: jobs (Volcano CRD objects), data loader,
# shell, TensorBoard, scheduler extension and monitor.
EVERYTHING = config_with(
    group={"nodes": 2, "max_nodes": 4},
    eks={"neuron_scheduler_extension": True, "neuron_monitor": True},
    workloads={
        "jobs": [{"name": "bert", "nodes": 2}, {"name": "single", "nodes": 1}],
        "data_loader": {"s3_uri": "s3://my-datasets/bert/"},
        "tensorboard": True,
        "shell": True,
    },
)
# Add-ons whose pods are DaemonSets only: a cluster without nodes runs none, and they report ACTIVE.
DAEMONSET_ONLY_ADDONS = {"vpc-cni", "kube-proxy", "eks-pod-identity-agent"}
# API groups served by Kubernetes itself; an object of any other group is a custom resource, whose
# definition and admission webhook (Volcano's) run in pods.
BUILTIN_API = re.compile(
    r"^(v1|(apps|batch|policy|autoscaling)/v[0-9]+|[a-z.]*\.k8s\.io/v[0-9a-z]+)$"
)
# The kubectl provider's Lambda runs at most 15 minutes; a Helm wait must end before it does.
HELM_TIMEOUT_RANGE_MINUTES = (8, 14)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return synth(EVERYTHING, nag=False).template_json("eks")


def _references(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            yield value["Ref"]
        elif set(value) == {"Fn::GetAtt"}:
            target = value["Fn::GetAtt"]
            yield target[0] if isinstance(target, list) else target.split(".", 1)[0]
        for item in value.values():
            yield from _references(item)
    elif isinstance(value, list):
        for item in value:
            yield from _references(item)
    elif isinstance(value, str):
        yield from re.findall(r"\$\{([A-Za-z0-9]+)(?:\.[^}]*)?\}", value)  # Fn::Sub


def edges(template: dict[str, Any]) -> dict[str, set[str]]:
    """Logical id -> the resources CloudFormation creates before it."""
    names = set(template["Resources"])
    graph: dict[str, set[str]] = {}
    for logical_id, resource in template["Resources"].items():
        depends = resource.get("DependsOn", [])
        depends = [depends] if isinstance(depends, str) else depends
        refs = _references({k: v for k, v in resource.items() if k != "DependsOn"})
        graph[logical_id] = {d for d in (*depends, *refs) if d in names and d != logical_id}
    return graph


def ancestors(graph: dict[str, set[str]], logical_id: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[logical_id])
    while todo:
        item = todo.pop()
        if item not in seen:
            seen.add(item)
            todo.extend(graph[item])
    return seen


def _system_node_group(template: dict[str, Any]) -> str:
    (logical_id,) = [
        k for k, v in resources(template, "AWS::EKS::Nodegroup").items()
        if v["Properties"].get("Labels", {}).get("trainium-cdk/role") == "system"
    ]
    return logical_id


def _api_versions(manifest: Any) -> set[str]:
    return set(re.findall(r'\\?"apiVersion\\?":\\?"([^"\\]+)', json.dumps(manifest)))


def needs_a_pod(template: dict[str, Any]) -> dict[str, str]:
    """Logical id -> why it cannot be created until pods run."""
    found: dict[str, str] = {}
    for logical_id, resource in template["Resources"].items():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::EKS::Addon" and props["AddonName"] not in DAEMONSET_ONLY_ADDONS:
            found[logical_id] = f"add-on {props['AddonName']} runs a Deployment"
        elif kind == "Custom::AWSCDK-EKS-HelmChart" and props.get("Wait") in (True, "true"):
            found[logical_id] = f"Helm chart {helm_chart_name(props)} waits for its pods"
        elif kind == "Custom::AWSCDK-EKS-KubernetesResource":
            custom = sorted(v for v in _api_versions(props.get("Manifest")) if not BUILTIN_API.match(v))
            if custom:
                found[logical_id] = f"manifest of custom resources {custom} (CRDs and webhooks run in pods)"
    return found


def test_the_graph_sees_what_a_pod_needs(template):
    reasons = needs_a_pod(template).values()
    assert any("coredns" in r for r in reasons)
    assert any("aws-fsx-csi-driver" in r for r in reasons)
    assert any("Helm chart volcano" in r for r in reasons)
    assert any("scheduling.volcano.sh/v1beta1" in r for r in reasons)  # the queue
    assert any("batch.volcano.sh/v1alpha1" in r for r in reasons)  # a gang job


def test_nothing_that_needs_a_pod_comes_before_the_system_node_group(template):
    graph = edges(template)
    system = _system_node_group(template)
    early = {
        logical_id: why for logical_id, why in needs_a_pod(template).items() if system not in ancestors(graph, logical_id)
    }
    assert early == {}


def test_custom_resources_come_after_the_chart_that_defines_them(template):
    graph = edges(template)
    (volcano,) = [k for k, v in resources(template, "Custom::AWSCDK-EKS-HelmChart").items() if helm_chart_name(v["Properties"]) == "volcano"]
    for logical_id, why in needs_a_pod(template).items():
        if "volcano.sh" in why:
            assert volcano in ancestors(graph, logical_id), logical_id


def test_fsx_csi_driver_comes_after_its_pod_identity_and_the_agent(template):
    graph = edges(template)
    addons = {v["Properties"]["AddonName"]: k for k, v in resources(template, "AWS::EKS::Addon").items()}
    before = ancestors(graph, addons["aws-fsx-csi-driver"])
    assert addons["eks-pod-identity-agent"] in before
    assert set(resources(template, "AWS::EKS::PodIdentityAssociation")) & before


def test_helm_waits_are_sized_for_image_pulls_within_the_provider_limit(template):
    for logical_id, chart in resources(template, "Custom::AWSCDK-EKS-HelmChart").items():
        props = chart["Properties"]
        if props.get("Wait") in (True, "true"):
            amount, unit = re.fullmatch(r"([0-9]+)([sm])", props.get("Timeout", "5m")).groups()  # Helm's default
            minutes = int(amount) / (60 if unit == "s" else 1)
            low, high = HELM_TIMEOUT_RANGE_MINUTES
            assert low <= minutes <= high, f"{logical_id}: {minutes} min"


def test_graph_helpers_follow_refs_getatts_and_subs():
    template = {
        "Resources": {
            "A": {"Type": "X"},
            "B": {"Type": "X", "Properties": {"P": {"Fn::GetAtt": ["A", "Arn"]}}},
            "C": {"Type": "X", "Properties": {"P": {"Fn::Sub": "${B.Arn}/x"}}},
            "D": {"Type": "X", "DependsOn": "C"},
        }
    }
    graph = edges(template)
    assert ancestors(graph, "D") == {"A", "B", "C"}
    assert ancestors(graph, "A") == set()
