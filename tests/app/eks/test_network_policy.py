"""What the training namespace's pods may open, by the NetworkPolicies the EKS stack applies.

A small evaluator of the Kubernetes NetworkPolicy rules (networking.k8s.io/v1), both directions: a connection
needs the source pod's egress and the destination pod's ingress. A pod that no policy of a direction selects
is open in it; one that some select takes what any of their rules allows (a rule with no peers allows every
peer, with no ``ports`` every port; an ipBlock allows its CIDR minus its ``except``; a podSelector alone means
the policy's namespace). The VPC CNI enforces them once its network policy agent is on, and lets a pod's own
node in (kubelet probes).
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.support.helpers import config_with, resources, synth
from tests.support.reachability import Reachability
from trainium_cdk.app.dist import write_dist
from trainium_cdk.facts.names import TRAINING_NAMESPACE


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: tuple[tuple[str, str], ...]
    ip: str

    @classmethod
    def of(cls, namespace: str, labels: dict[str, str], ip: str) -> Pod:
        return cls(namespace, tuple(sorted(labels.items())), ip)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # what the charts use
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_matches(peer: dict[str, Any], policy_namespace: str, other: Pod | str) -> bool:
    """Whether a ``from``/``to`` entry names ``other`` (a pod, or an address outside every pod)."""
    ip = other.ip if isinstance(other, Pod) else other
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(ip)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except", []))
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        namespace_ok = _selects(peer["namespaceSelector"], {NAMESPACE_NAME_LABEL: other.namespace})
    else:
        namespace_ok = other.namespace == policy_namespace
    return namespace_ok and _selects(peer.get("podSelector", {}), dict(other.labels))


def _direction_allows(policies: list[dict[str, Any]], direction: str, pod: Pod, other: Pod | str, port: int,
                      protocol: str) -> bool:
    """Kubernetes' rule for one end: a pod no policy of this direction selects is open; a selected one takes
    what any rule of any selecting policy allows (no peers: every peer; no ports: every port)."""
    peers_key = "to" if direction == "Egress" else "from"
    selecting = [p for p in policies if p["metadata"].get("namespace") == pod.namespace
                 and direction in p["spec"].get("policyTypes", []) and _selects(p["spec"]["podSelector"], dict(pod.labels))]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(direction.lower(), []):
            peers_ok = peers_key not in rule or any(
                _peer_matches(peer, policy["metadata"]["namespace"], other) for peer in rule[peers_key])
            ports_ok = "ports" not in rule or any(
                p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in rule["ports"])
            if peers_ok and ports_ok:
                return True
    return False


def connects(policies: list[dict[str, Any]], source: Pod | str, destination: Pod | str, port: int,
             protocol: str = "TCP", *, node_ips: tuple[str, ...] = ()) -> bool:
    """Whether ``source`` may open a connection to ``destination``: the source pod's egress and the destination
    pod's ingress must both allow it. The VPC CNI's agent always admits the destination's own node (kubelet
    probes), given in ``node_ips``."""
    if isinstance(source, Pod) and not _direction_allows(policies, "Egress", source, destination, port, protocol):
        return False
    if isinstance(destination, Pod):
        source_ip = source.ip if isinstance(source, Pod) else source
        if source_ip not in node_ips and not _direction_allows(policies, "Ingress", destination, source, port, protocol):
            return False
    return True


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
INSTANCE_METADATA = "169.254.169.254"
POD_IDENTITY_AGENT = "169.254.170.23"
NODE = "10.0.64.200"  # the node a pod runs on, as kubelet probes it
COREDNS = Pod.of("kube-system", {"k8s-app": "kube-dns"}, "10.0.64.10")
# What a training pod must not open beyond DNS: kube-system's agents, Volcano's admission webhook.
SYSTEM_PODS = (
    (Pod.of("amazon-cloudwatch", {"app.kubernetes.io/name": "cloudwatch-agent"}, "10.0.65.20"), 4316),
    (Pod.of("volcano-system", {"app": "volcano-admission"}, "10.0.65.21"), 8443),
    (Pod.of("kube-system", {"app.kubernetes.io/name": "karpenter"}, "10.0.65.22"), 8080),
)


@pytest.fixture(scope="module")
def app():
    return synth(config_with(eks={"example_images": True}, workloads={"data_loader": {"s3_uri": "s3://my-bucket/datasets/"}}), nag=False)


@pytest.fixture(scope="module")
def objects(app, tmp_path_factory):
    """What the stack applies and the jobs users apply from dist/ (their placeholders stay: inert here)."""
    applied = [o for _, objs in Reachability.from_dir(app.outdir).manifests() for o in objs]
    dist = tmp_path_factory.mktemp("dist")
    write_dist(app.config, dist)
    jobs = [o for path in sorted(dist.glob("eks/workloads/job-*.yaml")) for o in yaml.safe_load_all(path.read_text()) if o]
    assert jobs, "the dist jobs are part of the model"
    return applied + jobs


def _pods(objects: list[dict[str, Any]]) -> list[Pod]:
    """Every pod template the stack applies or dist/ ships, each at an address of its own."""
    found = []
    for o in objects:
        spec = o.get("spec", {})
        templates = [t["template"] for t in spec.get("tasks", [])] or ([spec["template"]] if "template" in spec else [])
        for template in templates:
            found.append(Pod.of(o["metadata"].get("namespace", "default"), template.get("metadata", {}).get("labels", {}),
                                f"10.0.70.{len(found) + 1}"))
    return found


def _policies(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == "NetworkPolicy"]


def test_training_pods_open_what_jobs_need_and_nothing_else(objects):
    policies, pods = _policies(objects), _pods(objects)
    training = [p for p in pods if p.namespace == TRAINING_NAMESPACE]
    # The data loader, the shell, TensorBoard, the single-node job, the distributed job's leader and worker.
    assert len(training) >= 6, training
    for pod in training:
        assert not connects(policies, pod, INSTANCE_METADATA, 80), pod
        # EKS Pod Identity (the data loader's S3 access), DNS, AWS APIs and the internet over HTTPS.
        for destination, port, protocol in ((POD_IDENTITY_AGENT, 80, "TCP"), (COREDNS, 53, "UDP"), (COREDNS, 53, "TCP"),
                                            ("52.218.0.1", 443, "TCP"), ("10.0.1.10", 443, "TCP")):
            assert connects(policies, pod, destination, port, protocol), (pod, destination, port)
        assert not connects(policies, pod, "52.218.0.1", 80), pod  # plain HTTP out: not needed, not open
        for system, port in SYSTEM_PODS:
            assert not connects(policies, pod, system, port), (pod, system)
        # Every other pod of the namespace, both ways: torchrun's rendezvous, the Neuron runtime's bootstrap.
        for peer in training:
            assert connects(policies, pod, peer, 29500), (pod, peer)
        # Kubelet probes from the pod's own node; nobody else from outside the namespace.
        assert connects(policies, NODE, pod, 6006, node_ips=(NODE,))
        assert not connects(policies, "10.0.64.201", pod, 6006, node_ips=(NODE,))
        for system, _ in SYSTEM_PODS:
            assert not connects(policies, system, pod, 6006), (system, pod)


def test_other_namespaces_are_not_selected(objects):
    """kube-system's agents, Karpenter, Volcano: the training namespace's policies change nothing for them."""
    policies = _policies(objects)
    others = [p for p in _pods(objects) if p.namespace != TRAINING_NAMESPACE]
    assert others
    for pod in others:
        assert connects(policies, pod, INSTANCE_METADATA, 80), pod
        assert connects(policies, pod, "52.218.0.1", 80), pod


def test_the_vpc_cni_enforces_network_policies(app):
    addons = {a["Properties"]["AddonName"]: a["Properties"] for a in resources(app.template_json("eks"), "AWS::EKS::Addon").values()}
    assert json.loads(addons["vpc-cni"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}


def test_the_evaluator_reads_rules_as_kubernetes_does():
    a, b, c = Pod.of("n", {"a": "b"}, "10.0.0.2"), Pod.of("n", {"a": "c"}, "10.0.0.3"), Pod.of("other", {"a": "b"}, "10.0.0.4")
    deny_egress = {"metadata": {"namespace": "n"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}
    assert not connects([deny_egress], a, "10.0.0.1", 53)
    assert connects([deny_egress], c, "10.0.0.1", 53)
    dns = {"metadata": {"namespace": "n"}, "spec": {"podSelector": {"matchLabels": {"a": "b"}}, "policyTypes": ["Egress"],
                                                     "egress": [{"ports": [{"protocol": "UDP", "port": 53}]}]}}
    assert connects([dns], a, "10.0.0.1", 53, "UDP")
    assert not connects([dns], a, "10.0.0.1", 53, "TCP")
    assert connects([dns], b, "10.0.0.1", 443)  # not selected
    # A podSelector alone is the policy's own namespace; ingress is the destination's to grant.
    same = {"metadata": {"namespace": "n"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"],
                                                      "ingress": [{"from": [{"podSelector": {}}]}]}}
    assert connects([same], b, a, 22)
    assert not connects([same], c, a, 22)
    assert not connects([same], "10.0.0.9", a, 22)
    assert connects([same], "10.0.0.9", a, 22, node_ips=("10.0.0.9",))
    assert connects([same], a, c, 22)  # c's namespace selects nothing
    labelled = {"metadata": {"namespace": "n"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [
        {"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "other"}}}]}]}}
    assert connects([labelled], c, a, 22)
    assert not connects([labelled], b, a, 22)
