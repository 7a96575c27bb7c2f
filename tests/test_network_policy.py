"""What the training namespace's pods may open, by the NetworkPolicies the EKS stack applies.

A small evaluator of the Kubernetes NetworkPolicy rules for egress (networking.k8s.io/v1): a pod that no
policy with policyType Egress selects may open anything; one that some select may open what any of their
rules allows (a rule with no ``to`` allows every peer, with no ``ports`` every port; an ipBlock allows its
CIDR minus its ``except``). The VPC CNI enforces them once its network policy agent is on.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from tests.helpers import config_with, resources, synth
from tests.reachability import Reachability
from trainium_cdk.names import TRAINING_NAMESPACE


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # what the charts use
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_allows(peer: dict[str, Any], ip: str) -> bool:
    if "ipBlock" not in peer:
        return False  # pod and namespace selectors: not asked here
    block = peer["ipBlock"]
    address = ipaddress.ip_address(ip)
    return address in ipaddress.ip_network(block["cidr"]) and not any(
        address in ipaddress.ip_network(e) for e in block.get("except", []))


def egress_allowed(policies: list[dict[str, Any]], namespace: str, labels: dict[str, str], ip: str, port: int,
                   protocol: str = "TCP") -> bool:
    selecting = [p for p in policies if p["metadata"].get("namespace") == namespace
                 and "Egress" in p["spec"].get("policyTypes", []) and _selects(p["spec"]["podSelector"], labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("egress", []):
            peers_ok = "to" not in rule or any(_peer_allows(peer, ip) for peer in rule["to"])
            ports_ok = "ports" not in rule or any(
                p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in rule["ports"])
            if peers_ok and ports_ok:
                return True
    return False


@pytest.fixture(scope="module")
def app():
    return synth(config_with(workloads={"data_loader": {"s3_uri": "s3://my-bucket/datasets/"}}), nag=False)


@pytest.fixture(scope="module")
def objects(app):
    return [o for _, objs in Reachability.from_dir(app.outdir).manifests() for o in objs]


def _pods(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    """(namespace, labels) of every pod template the stack applies."""
    found = []
    for o in objects:
        spec = o.get("spec", {})
        templates = [t["template"] for t in spec.get("tasks", [])] or ([spec["template"]] if "template" in spec else [])
        for template in templates:
            found.append((o["metadata"].get("namespace", "default"), template.get("metadata", {}).get("labels", {})))
    return found


def test_training_pods_cannot_reach_the_instance_metadata_and_reach_the_rest(objects):
    policies = [o for o in objects if o.get("kind") == "NetworkPolicy"]
    training = [labels for namespace, labels in _pods(objects) if namespace == TRAINING_NAMESPACE]
    assert training  # the data loader, the shell, TensorBoard
    for labels in training:
        assert not egress_allowed(policies, TRAINING_NAMESPACE, labels, "169.254.169.254", 80), labels
        # EKS Pod Identity (the data loader's S3 access), DNS, peers (torchrun), AWS APIs and the internet.
        for ip, port, protocol in (("169.254.170.23", 80, "TCP"), ("10.0.64.10", 53, "UDP"), ("10.0.64.10", 53, "TCP"),
                                   ("10.0.70.3", 29500, "TCP"), ("52.218.0.1", 443, "TCP")):
            assert egress_allowed(policies, TRAINING_NAMESPACE, labels, ip, port, protocol), (labels, ip, port)
    # Other namespaces (kube-system's agents, Karpenter, Volcano) are not selected: nothing changes for them.
    for namespace, labels in _pods(objects):
        if namespace != TRAINING_NAMESPACE:
            assert egress_allowed(policies, namespace, labels, "169.254.169.254", 80), namespace


def test_the_vpc_cni_enforces_network_policies(app):
    addons = {a["Properties"]["AddonName"]: a["Properties"] for a in resources(app.template_json("eks"), "AWS::EKS::Addon").values()}
    assert json.loads(addons["vpc-cni"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}


def test_the_evaluator_reads_rules_as_kubernetes_does():
    deny_all = {"metadata": {"namespace": "n"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}
    assert not egress_allowed([deny_all], "n", {}, "10.0.0.1", 53)
    assert egress_allowed([deny_all], "other", {}, "10.0.0.1", 53)
    dns = {"metadata": {"namespace": "n"}, "spec": {"podSelector": {"matchLabels": {"a": "b"}}, "policyTypes": ["Egress"],
                                                     "egress": [{"ports": [{"protocol": "UDP", "port": 53}]}]}}
    assert egress_allowed([dns], "n", {"a": "b"}, "10.0.0.1", 53, "UDP")
    assert not egress_allowed([dns], "n", {"a": "b"}, "10.0.0.1", 53, "TCP")
    assert egress_allowed([dns], "n", {"a": "c"}, "10.0.0.1", 443)  # not selected
