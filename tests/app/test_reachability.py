"""The fabric and data paths every training run needs, checked on the security groups CloudFormation creates.

For every backend and every supported instance type: EFA to EFA, all traffic, both ways; every node
set that mounts FSx reaches it on the Lustre ports and back; torchrun's rendezvous port between
training nodes (Batch task interfaces included); nothing open to the internet.
"""

from __future__ import annotations

import ipaddress

import pytest

from tests.support.apps import VARIANTS, synthesized
from tests.support.reachability import (
    ACCESS_HOST,
    CONTROL_PLANE,
    EKS_CLUSTER_SG,
    LUSTRE_PORTS,
    VPC_DEFAULT_SG,
    Interface,
    NodeSet,
    Reachability,
    Rule,
)
from trainium_cdk.facts.catalog import SUPPORTED_TRAINING_TYPES
from trainium_cdk.runtime.training_env import MASTER_PORT


@pytest.fixture(scope="module", params=sorted(VARIANTS), ids=sorted(VARIANTS))
def app(request):
    result = synthesized(request.param)
    return result, Reachability.from_dir(result.outdir)


def test_the_variants_cover_every_supported_type_on_every_backend():
    covered = {(backend, g["instance_type"]) for v in VARIANTS.values() for backend in v["backends"]
               for g in v["compute_groups"] if backend != "instance"}
    for backend in ("eks", "batch", "parallelcluster"):
        assert {t for b, t in covered if b == backend} == set(SUPPORTED_TRAINING_TYPES), backend


def test_every_compute_group_is_a_node_set_of_every_backend(app):
    result, model = app
    types = sorted(g.instance_type for g in result.config.compute_groups)
    for backend in result.config.backends:
        sets = model.of_backend(backend)
        assert sets, backend
        if backend != "instance":
            assert sorted(n.instance_type for n in sets if n.instance_type.startswith("trn")) == types, backend
    # EKS adds its system nodes, ParallelCluster its head node.
    assert any(n.labels.get("trainium-cdk/role") == "system" for n in model.of_backend("eks"))


def _failures(model: Reachability, check) -> list[str]:
    return [f"{node}: {problem}" for node in model.node_sets for problem in check(model, node)]


def _efa(model: Reachability, node: NodeSet) -> list[str]:
    efa = {i.groups for i in node.efa_interfaces}
    return [
        f"EFA {sorted(a)} -> {sorted(b)}"
        for a in efa for b in efa if not model.reaches(a, b, "-1", efa=True)
    ]


def _fsx(model: Reachability, node: NodeSet) -> list[str]:
    if not node.mounts_fsx:
        return []
    found = []
    for fs, fs_groups in model.file_systems.items():
        for groups in {i.groups for i in node.interfaces}:
            for port in LUSTRE_PORTS:
                if not model.reaches(groups, fs_groups, "tcp", port):
                    found.append(f"to {fs} tcp/{port}")
                if not model.reaches(fs_groups, groups, "tcp", port):
                    found.append(f"from {fs} tcp/{port}")
    return found


def _rendezvous(model: Reachability, node: NodeSet) -> list[str]:
    if node.rendezvous is None:
        return []
    return [] if model.reaches(node.rendezvous, node.rendezvous, "tcp", MASTER_PORT) else [f"tcp/{MASTER_PORT}"]


def test_efa_interfaces_reach_each_other_with_all_traffic_both_ways(app):
    result, model = app
    efa_sets = [n for n in model.node_sets if n.efa_interfaces]
    expected = sum(result.config.spec(g).has_efa for g in result.config.compute_groups)
    assert len(efa_sets) == expected * len([b for b in result.config.backends if b != "instance"])
    assert _failures(model, _efa) == []


def test_every_node_set_that_mounts_fsx_reaches_it_and_back(app):
    result, model = app
    assert model.file_systems
    assert {n.backend for n in model.node_sets if n.mounts_fsx} == set(result.config.backends)
    assert _failures(model, _fsx) == []


def test_the_batch_cpu_queue_reaches_the_file_system_and_no_training_node(app):
    """The CPU queue's nodes (the recipes' data jobs, issue 44 item 8) mount /fsx: Lustre's ports both ways; they are
    not in the EFA group, and no training node's group lets them in on any port (torchrun's included)."""
    result, model = app
    (cpu,) = [n for n in model.of_backend("batch") if not n.instance_type.startswith("trn")]
    assert cpu.instance_type == result.config.batch.cpu_instance_type == "m7i.2xlarge"
    assert cpu.mounts_fsx and not cpu.efa_interfaces and cpu.rendezvous is None
    assert _fsx(model, cpu) == []
    for node in model.of_backend("batch"):
        if node.instance_type.startswith("trn"):
            for port in (22, 988, MASTER_PORT):
                assert not model.reaches(cpu.all_groups, node.all_groups, "tcp", port), (node, port)


def test_torchrun_rendezvous_between_training_nodes(app):
    result, model = app
    training = [n for n in model.node_sets if n.rendezvous is not None]
    efa_groups = [g for g in result.config.compute_groups if result.config.spec(g).has_efa]
    assert len(training) == len(efa_groups) * len([b for b in result.config.backends if b != "instance"])
    assert _failures(model, _rendezvous) == []


def test_batch_tasks_use_a_group_the_templates_own(app):
    _, model = app
    for node in model.of_backend("batch"):
        if node.rendezvous is not None:
            for group in node.rendezvous:
                assert model.rules_of(group, "in") and model.rules_of(group, "out"), (node, group)


def test_nothing_is_reachable_from_the_internet(app):
    _, model = app
    assert model.internet_reachable(model.groups) == []
    for node in model.node_sets:
        for port in (22, 443, 988, 6006, MASTER_PORT):
            assert model.internet_reachable(node.all_groups, port) == [], node


def test_the_private_api_endpoint_is_reached_by_the_nodes_and_the_access_host_only(app):
    """kubectl from a workstation goes through the access host (SSM port forwarding, `trn connect`): the host
    opens HTTPS to the API endpoint and nothing else in the VPC, and nothing opens anything to the host."""
    result, model = app
    planes = model.of_backend(CONTROL_PLANE)
    if "eks" not in result.config.backends:
        assert planes == [] and model.of_backend(ACCESS_HOST) == []
        return
    (plane,), (host,) = planes, model.of_backend(ACCESS_HOST)
    assert model.reaches(host.all_groups, plane.all_groups, "tcp", 443)
    for node in model.of_backend("eks"):
        assert model.reaches(node.primary, plane.all_groups, "tcp", 443), node
    others = [n for n in model.node_sets if n is not host and n is not plane]
    for node in others:
        for protocol, port in (("tcp", 22), ("tcp", 443), ("tcp", 988), ("tcp", MASTER_PORT), ("-1", None)):
            assert not model.reaches(host.all_groups, node.all_groups, protocol, port), (node, protocol, port)
            assert not model.reaches(node.all_groups, host.all_groups, protocol, port), (node, protocol, port)
    for groups in model.file_systems.values():
        assert not model.reaches(host.all_groups, groups, "tcp", 988)
    assert [r for g in host.all_groups for r in model.rules_of(g, "in")] == []


# -- the model itself, on hand-written templates -------------------------------------------------------

def _sg(egress=None, ingress=None):
    props = {"GroupDescription": "x", "VpcId": {"Ref": "Vpc"}}
    if egress is not None:
        props["SecurityGroupEgress"] = egress
    if ingress is not None:
        props["SecurityGroupIngress"] = ingress
    return {"Type": "AWS::EC2::SecurityGroup", "Properties": props}


def _self_rule(kind, peer_key, protocol="-1", **ports):
    return {"Type": f"AWS::EC2::SecurityGroup{kind}", "Properties": {
        "GroupId": {"Fn::GetAtt": ["Efa", "GroupId"]}, "IpProtocol": protocol,
        peer_key: {"Fn::GetAtt": ["Efa", "GroupId"]}, **ports}}


def _model(efa_egress: list, *extra) -> Reachability:
    resources = {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
        "Efa": _sg(egress=efa_egress),
        "In": _self_rule("Ingress", "SourceSecurityGroupId"),
    }
    resources.update({f"R{i}": r for i, r in enumerate(extra)})
    return Reachability({"net": {"Resources": resources}})


def test_model_all_outbound_does_not_carry_efa_but_a_self_rule_does():
    efa = {"net/Efa"}
    all_out = [{"CidrIp": "0.0.0.0/0", "IpProtocol": "-1"}]
    assert _model(all_out).reaches(efa, efa, "tcp", 29500)
    assert not _model(all_out).reaches(efa, efa, "-1", efa=True)
    assert _model(all_out, _self_rule("Egress", "DestinationSecurityGroupId")).reaches(efa, efa, "-1", efa=True)
    # A TCP-only self rule carries TCP but not EFA.
    tcp_only = _self_rule("Egress", "DestinationSecurityGroupId", "tcp", FromPort=0, ToPort=65535)
    assert not _model(all_out, tcp_only).reaches(efa, efa, "-1", efa=True)


def test_model_needs_egress_and_ingress():
    efa = {"net/Efa"}
    no_egress = [{"CidrIp": "255.255.255.255/32", "IpProtocol": "icmp", "FromPort": 252, "ToPort": 86}]
    assert not _model(no_egress).reaches(efa, efa, "tcp", 988)
    # A group without inline egress gets EC2's default all-outbound.
    model = Reachability({"net": {"Resources": {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}, "Efa": _sg()}}})
    assert model.rules_of("net/Efa", "out")[0].cidr == ipaddress.ip_network("0.0.0.0/0")
    assert not model.reaches(efa, efa, "tcp", 988)  # no ingress


def test_model_resolves_imports_and_knows_the_groups_eks_and_the_vpc_attach():
    network = {
        "Resources": {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}, "Efa": _sg([])},
        "Outputs": {"E": {"Value": {"Fn::GetAtt": ["Efa", "GroupId"]}, "Export": {"Name": "net:Efa"}}},
    }
    eks = {"Resources": {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {}},
        "Rule": {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
            "GroupId": {"Fn::ImportValue": "net:Efa"}, "IpProtocol": "tcp", "FromPort": 988, "ToPort": 988,
            "SourceSecurityGroupId": {"Fn::GetAtt": ["Cluster", "ClusterSecurityGroupId"]}}},
    }}
    model = Reachability({"net": network, "eks": eks})
    cluster_sg = f"eks/Cluster:{EKS_CLUSTER_SG}"
    assert model.reaches({cluster_sg}, {"net/Efa"}, "tcp", 988)
    assert not model.reaches({cluster_sg}, {"net/Efa"}, "tcp", 989)
    # EKS's cluster group: all traffic in from itself, but out only to CIDRs, which EFA ignores.
    assert model.reaches({cluster_sg}, {cluster_sg}, "tcp", 443)
    assert not model.reaches({cluster_sg}, {cluster_sg}, "-1", efa=True)
    assert model.group_of("net", {"Fn::GetAtt": ["Vpc", "DefaultSecurityGroup"]}) == f"net/Vpc:{VPC_DEFAULT_SG}"
    # AWS's rules of the default group count until a template revokes them.
    default = f"net/Vpc:{VPC_DEFAULT_SG}"
    assert {(r.direction, r.protocol, r.peer, r.cidr) for r in model.rules_of(default)} == {
        ("in", "-1", default, None), ("out", "-1", None, ipaddress.ip_network("0.0.0.0/0"))}
    network["Resources"]["Restrict"] = {"Type": "Custom::VpcRestrictDefaultSG", "Properties": {
        "DefaultSecurityGroupId": {"Fn::GetAtt": ["Vpc", "DefaultSecurityGroup"]}}}
    assert Reachability({"net": network, "eks": eks}).rules_of(default) == []


def test_model_internet_rules():
    model = _model([], {"Type": "AWS::EC2::SecurityGroupIngress", "Properties": {
        "GroupId": {"Ref": "Efa"}, "IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "CidrIp": "0.0.0.0/0"}})
    (rule,) = model.internet_reachable({"net/Efa"})
    assert isinstance(rule, Rule) and rule.internet
    assert model.internet_reachable({"net/Efa"}, 443) == []
    assert Interface(frozenset({"a"})).groups == {"a"}


def _outside(model: Reachability, groups: frozenset[str], protocol: str, port: int | None) -> list[Rule]:
    """Egress rules of ``groups`` that let ``protocol``/``port`` leave for addresses (not a group)."""
    return [r for r in model.rules if r.direction == "out" and r.group in groups and r.cidr is not None
            and (r.protocol == "-1" or (protocol != "-1" and r.allows(protocol, port)))]


_PROBES = [("-1", None), ("tcp", 22), ("tcp", 80), ("tcp", 988), ("tcp", MASTER_PORT), ("udp", 53), ("icmp", None)]


def test_the_vpc_default_group_admits_only_the_batch_tasks_and_lets_them_out_only_to_https(app):
    """The multi-node Batch tasks carry the VPC's default group (batch_tasks.py): nothing else the app launches
    reaches them, they reach each other on TCP only (rendezvous, Neuron bootstrap), and they leave the group for
    HTTPS only (AWS APIs, S3 through the gateway endpoint): AWS's allow-all rules are revoked."""
    result, model = app
    ((vpc_stack, vpc, _),) = list(model._resources("AWS::EC2::VPC"))
    tasks = frozenset({f"{vpc_stack}/{vpc}:{VPC_DEFAULT_SG}"})
    others = [i.groups for n in model.node_sets for i in n.interfaces if not i.groups & tasks]
    assert others
    reaching = [f"{sorted(g)} {p}/{port}" for g in others for p, port in _PROBES if model.reaches(g, tasks, p, port)]
    assert reaching == []
    if "batch" in result.config.backends and any(n.rendezvous == tasks for n in model.of_backend("batch")):
        assert model.reaches(tasks, tasks, "tcp", MASTER_PORT)
        assert not model.reaches(tasks, tasks, "-1")
    # Out of the group: HTTPS only, and no reach to any other group the app has on any probe.
    assert [str(r.source) for p, port in _PROBES for r in _outside(model, tasks, p, port)] == []
    assert {(r.protocol, r.from_port, r.to_port) for r in _outside(model, tasks, "tcp", 443)} <= {("tcp", 443, 443)}
    assert [f"{sorted(g)} {p}/{port}" for g in others for p, port in _PROBES if model.reaches(tasks, g, p, port)] == []
