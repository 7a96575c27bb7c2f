"""A reachability model of a synthesized app: which interfaces may talk to which, per its security groups.

Read from the CloudFormation templates of every stack (references across stacks resolved through
their exports), never from the constructs, so that it sees what CloudFormation will create:

- rules: every inline rule of an ``AWS::EC2::SecurityGroup`` (a group without inline egress gets
  EC2's default all-outbound rule) and every ``AWS::EC2::SecurityGroupIngress``/``Egress``;
- groups that no template declares but something attaches, with the rules their owner documents:
  the EKS cluster security group (all traffic from itself, all outbound), ParallelCluster's managed
  head and compute groups (``pcluster.templates.cluster_stack``), and the VPC's default group, with
  AWS's rules (all traffic in from itself, all out) unless the template removes them (the L2 Vpc's
  ``Custom::VpcRestrictDefaultSG``): what the tasks need must be in the templates;
- node sets: the interfaces of each backend's nodes and the groups each carries.

:meth:`Reachability.reaches` answers as EC2 does: the egress of some source group must allow the
traffic to the destination (a CIDR covering it, or a group it carries) and the ingress of some
destination group must allow it from the source. EFA traffic is not IP: with ``efa=True`` only
all-traffic rules that reference a group count.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainium_cdk.facts.names import STARTUP_TAINT_PREFIX

ALL = "-1"
INTERNET = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
_PROTOCOLS = {"-1": ALL, "tcp": "tcp", "6": "tcp", "udp": "udp", "17": "udp", "icmp": "icmp", "1": "icmp"}
# Lustre (FSx for Lustre security group guide): TCP 988 and 1018-1023, both directions.
LUSTRE_PORTS = (988, *range(1018, 1024))
EKS_CLUSTER_SG = "eks-cluster-security-group"
# Node sets that are not a backend's compute: the EKS API endpoint, and the host that forwards to it.
CONTROL_PLANE = "eks-control-plane"
ACCESS_HOST = "eks-access"
# Interface VPC endpoints, named by their service's last word (ssm, ssmmessages, ec2messages, ecr.api, ...).
VPC_ENDPOINT = "vpc-endpoint"
VPC_DEFAULT_SG = "vpc-default-security-group"
PCLUSTER_HEAD_SG = "pcluster:HeadNodeSecurityGroup"
PCLUSTER_COMPUTE_SG = "pcluster:ComputeSecurityGroup"

Groups = frozenset[str]



def manifest_objects(manifest: Any) -> list[dict[str, Any]]:
    """The Kubernetes objects of a synthesized ``Custom::AWSCDK-EKS-KubernetesResource`` manifest, CloudFormation
    expressions left in place of the values only known at deploy (a manifest with tokens is an Fn::Join of JSON text:
    a value that is one expression comes back as it; one with text around it keeps a marker in its place)."""
    if isinstance(manifest, str):
        return json.loads(manifest)
    (fn, (separator, parts)), = manifest.items()
    assert fn == "Fn::Join" and separator == "", manifest
    expressions: dict[str, Any] = {}
    text = ""
    for part in parts:
        if isinstance(part, str):
            text += part
        else:
            marker = f"@@expr{len(expressions)}@@"
            expressions[marker] = part
            text += marker

    def restore(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restore(v) for v in value]
        return expressions.get(value, value) if isinstance(value, str) else value

    return restore(json.loads(text))


def _names_a_file_system(user_data: Any) -> bool:
    """Whether a synthesized user data has a LUSTRE_SOURCE header line (the node setup mounts that file system)."""
    body = user_data.get("Fn::Base64", "") if isinstance(user_data, dict) else user_data or ""
    parts = body["Fn::Join"][1] if isinstance(body, dict) else [body]
    return any(isinstance(p, str) and "\nLUSTRE_SOURCE=" in p for p in parts)

@dataclass(frozen=True)
class Rule:
    """One security group rule: ``group`` allows ``direction`` traffic to/from ``peer`` or ``cidr``."""

    group: str
    direction: str  # "in" or "out"
    protocol: str  # "-1", "tcp", "udp", "icmp"
    from_port: int
    to_port: int
    peer: str | None = None
    cidr: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    source: str = ""  # where the rule was read, for messages

    def allows(self, protocol: str, port: int | None) -> bool:
        if self.protocol == ALL:
            return True
        if protocol != self.protocol:
            return False
        return port is None or self.from_port <= port <= self.to_port

    @property
    def internet(self) -> bool:
        return self.cidr is not None and self.cidr in INTERNET


@dataclass(frozen=True)
class Interface:
    """The groups one network interface carries."""

    groups: Groups
    efa: bool = False


@dataclass
class NodeSet:
    """Nodes of one kind in one backend (a node group, a compute environment, a queue, an instance).

    :param interfaces: the interfaces of one node; the first is the primary (pods and tasks use its IPs
        unless ``rendezvous`` says otherwise).
    :param rendezvous: groups of the interfaces torchrun and the Neuron bootstrap use between nodes
        (a Batch task's own interface), or None when the node set does not train across nodes.
    :param mounts_fsx: the nodes (or pods on them) mount the FSx file system.
    """

    backend: str
    name: str
    interfaces: tuple[Interface, ...]
    rendezvous: Groups | None = None
    mounts_fsx: bool = False
    instance_type: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    # Taints a new node carries until something on it takes them off (the health check's): tests/support/scheduling.py.
    startup_taints: tuple[Mapping[str, str], ...] = ()

    @property
    def primary(self) -> Groups:
        return self.interfaces[0].groups

    @property
    def efa_interfaces(self) -> tuple[Interface, ...]:
        return tuple(i for i in self.interfaces if i.efa)

    @property
    def all_groups(self) -> Groups:
        return frozenset().union(*(i.groups for i in self.interfaces))

    def __str__(self) -> str:
        return f"{self.backend}/{self.name}"


class Reachability:
    """Security groups, rules and node sets of every stack of one synthesized app."""

    def __init__(self, templates: Mapping[str, dict[str, Any]],
                 nested: Mapping[str, tuple[str, dict[str, Any]]] | None = None) -> None:
        self.templates = dict(templates)
        # A nested stack's template (each Batch compute group's) -> its parent and the parameters it passes.
        self.nested = dict(nested or {})
        self.exports: dict[str, tuple[str, Any]] = {}
        for stack, template in self.templates.items():
            for output in (template.get("Outputs") or {}).values():
                name = (output.get("Export") or {}).get("Name")
                if isinstance(name, str):
                    self.exports[name] = (stack, output["Value"])
        self.vpc_cidrs = [
            ipaddress.ip_network(r["Properties"]["CidrBlock"])
            for _, _, r in self._resources("AWS::EC2::VPC")
            if isinstance(r["Properties"].get("CidrBlock"), str)
        ]
        self.groups: set[str] = set()
        self.rules: list[Rule] = []
        self._read_rules()
        self.node_sets: list[NodeSet] = []
        self.file_systems: dict[str, Groups] = {}
        self._read_nodes()

    @classmethod
    def from_dir(cls, outdir: Path) -> Reachability:
        templates = {p.name.removesuffix(".template.json"): json.loads(p.read_text())
                     for p in sorted(Path(outdir).glob("*.template.json"))}
        # A nested stack's TemplateURL names its asset, <hash>.json; the assets manifests give the file.
        sources = {h: f["source"]["path"].removesuffix(".template.json")
                   for manifest in Path(outdir).glob("*.assets.json")
                   for h, f in json.loads(manifest.read_text()).get("files", {}).items()}
        nested = {}
        for stack, template in templates.items():
            for resource in template.get("Resources", {}).values():
                if resource["Type"] == "AWS::CloudFormation::Stack":
                    url = json.dumps(resource["Properties"].get("TemplateURL"))
                    for name in [n for h, n in sources.items() if f"/{h}.json" in url and n in templates]:
                        nested[name] = (stack, resource["Properties"].get("Parameters", {}))
        return cls(templates, nested)

    # -- questions ---------------------------------------------------------------------------------

    def reaches(
        self, src: Iterable[str], dst: Iterable[str], protocol: str, port: int | None = None, *, efa: bool = False
    ) -> bool:
        """May an interface carrying ``src`` open ``protocol``/``port`` to one carrying ``dst``?

        ``protocol`` "-1" asks for all traffic (only all-traffic rules answer it). With ``efa`` only
        rules that reference a group count, and only all-traffic ones (EFA's SRD is not IP).
        """
        src, dst = frozenset(src), frozenset(dst)
        protocol = _PROTOCOLS[str(protocol).lower()]
        if efa:
            protocol, port = ALL, None

        def fits(rule: Rule, peers: Groups) -> bool:
            if protocol == ALL and rule.protocol != ALL:
                return False
            if not rule.allows(protocol, port):
                return False
            if rule.peer is not None:
                return rule.peer in peers
            return not efa and self._covers_vpc(rule.cidr)

        out = any(fits(r, dst) for r in self.rules if r.direction == "out" and r.group in src)
        into = any(fits(r, src) for r in self.rules if r.direction == "in" and r.group in dst)
        return out and into

    def internet_reachable(self, groups: Iterable[str], port: int | None = None) -> list[Rule]:
        """Ingress rules of ``groups`` open to 0.0.0.0/0 or ::/0 (on ``port``, or on any port)."""
        groups = frozenset(groups)
        return [
            r for r in self.rules
            if r.direction == "in" and r.group in groups and r.internet
            and (port is None or r.allows("tcp", port) or r.allows("udp", port))
        ]

    def rules_of(self, group: str, direction: str | None = None) -> list[Rule]:
        return [r for r in self.rules if r.group == group and (direction is None or r.direction == direction)]

    def of_backend(self, backend: str) -> list[NodeSet]:
        return [n for n in self.node_sets if n.backend == backend]

    def _covers_vpc(self, cidr: Any) -> bool:
        # Every node lives in the VPC: a CIDR rule counts when it covers the whole VPC (a narrower one
        # might miss the subnet the node lands in).
        return cidr is not None and bool(self.vpc_cidrs) and all(
            v.version == cidr.version and v.subnet_of(cidr) for v in self.vpc_cidrs
        )

    # -- reading the templates ---------------------------------------------------------------------

    def _resources(self, type_name: str) -> Iterable[tuple[str, str, dict[str, Any]]]:
        for stack, template in self.templates.items():
            for logical_id, resource in template.get("Resources", {}).items():
                if resource["Type"] == type_name:
                    yield stack, logical_id, resource

    def _resource(self, stack: str, logical_id: str) -> dict[str, Any] | None:
        return self.templates[stack].get("Resources", {}).get(logical_id)

    def group_of(self, stack: str, value: Any) -> str | None:
        """The group key a group-id expression of ``stack`` names, or None when it names none."""
        if isinstance(value, dict) and len(value) == 1:
            (fn, arg), = value.items()
            if fn == "Fn::ImportValue" and isinstance(arg, str) and arg in self.exports:
                return self.group_of(*self.exports[arg])
            if fn == "Ref" and isinstance(arg, str) and arg in self.nested.get(stack, ("", {}))[1]:
                parent, parameters = self.nested[stack]
                return self.group_of(parent, parameters[arg])
            if fn == "Ref" and isinstance(arg, str):
                resource = self._resource(stack, arg)
                if resource and resource["Type"] == "AWS::EC2::SecurityGroup":
                    return f"{stack}/{arg}"
            if fn == "Fn::GetAtt":
                logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                resource = self._resource(stack, logical_id)
                if resource is None:
                    return None
                if resource["Type"] == "AWS::EC2::SecurityGroup" and attribute == "GroupId":
                    return f"{stack}/{logical_id}"
                if resource["Type"] == "AWS::EKS::Cluster" and attribute == "ClusterSecurityGroupId":
                    return f"{stack}/{logical_id}:{EKS_CLUSTER_SG}"
                if resource["Type"] == "AWS::EC2::VPC" and attribute == "DefaultSecurityGroup":
                    return f"{stack}/{logical_id}:{VPC_DEFAULT_SG}"
        return None

    def groups_of(self, stack: str, values: Any) -> Groups:
        found = set()
        for value in values or []:
            group = self.group_of(stack, value)
            assert group is not None, f"{stack}: cannot resolve security group {value}"
            found.add(group)
        return frozenset(found)

    def _rule(self, stack: str, group: str, direction: str, props: Mapping[str, Any], source: str) -> None:
        protocol = _PROTOCOLS[str(props.get("IpProtocol")).lower()]
        low, high = props.get("FromPort", 0), props.get("ToPort", 65535)
        if protocol in ("tcp", "udp") and (not isinstance(low, int) or not isinstance(high, int)):
            raise AssertionError(f"{source}: ports are not literal: {props}")
        peer_key = "SourceSecurityGroupId" if direction == "in" else "DestinationSecurityGroupId"
        cidr = props.get("CidrIp") or props.get("CidrIpv6")
        peer = self.group_of(stack, props[peer_key]) if peer_key in props else None
        if peer_key in props and peer is None:
            raise AssertionError(f"{source}: cannot resolve {props[peer_key]}")
        if peer is None and cidr is None:
            return  # a prefix list: neither a group nor the internet
        network = ipaddress.ip_network(cidr) if isinstance(cidr, str) else self._vpc_cidr(stack, cidr)
        if peer is None and network is None:
            raise AssertionError(f"{source}: CIDR is not literal: {cidr}")
        self.groups.add(group)
        self.rules.append(Rule(group, direction, protocol, low if protocol != ALL else 0,
                               high if protocol != ALL else 65535, peer, network, source))

    def _vpc_cidr(self, stack: str, value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        """The VPC's CIDR when ``value`` names it (an interface endpoint's ingress: GetAtt Vpc.CidrBlock)."""
        if isinstance(value, dict) and list(value) == ["Fn::ImportValue"] and value["Fn::ImportValue"] in self.exports:
            return self._vpc_cidr(*self.exports[value["Fn::ImportValue"]])
        if isinstance(value, dict) and list(value) == ["Fn::GetAtt"] and value["Fn::GetAtt"][1] == "CidrBlock":
            vpc = self._resource(stack, value["Fn::GetAtt"][0])
            if vpc and vpc["Type"] == "AWS::EC2::VPC" and isinstance(vpc["Properties"].get("CidrBlock"), str):
                return ipaddress.ip_network(vpc["Properties"]["CidrBlock"])
        return None

    def _read_rules(self) -> None:
        for stack, logical_id, resource in self._resources("AWS::EC2::SecurityGroup"):
            group = f"{stack}/{logical_id}"
            self.groups.add(group)
            props = resource["Properties"]
            for rule in props.get("SecurityGroupIngress") or []:
                self._rule(stack, group, "in", rule, group)
            if "SecurityGroupEgress" not in props:
                # EC2 gives a new group all-outbound unless the template lists egress rules inline.
                self._rule(stack, group, "out", {"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"}, f"{group} (EC2 default)")
            for rule in props.get("SecurityGroupEgress") or []:
                self._rule(stack, group, "out", rule, group)
        for kind, direction in (("AWS::EC2::SecurityGroupIngress", "in"), ("AWS::EC2::SecurityGroupEgress", "out")):
            for stack, logical_id, resource in self._resources(kind):
                props = resource["Properties"]
                group = self.group_of(stack, props["GroupId"])
                assert group is not None, f"{stack}/{logical_id}: cannot resolve {props['GroupId']}"
                self._rule(stack, group, direction, props, f"{stack}/{logical_id}")
        # A VPC's default group, as EC2 creates it (VPC user guide, "Default security groups for your VPCs"),
        # unless the stack revokes those rules.
        restricted = {json.dumps(r["Properties"].get("DefaultSecurityGroupId"))
                      for _, _, r in self._resources("Custom::VpcRestrictDefaultSG")}
        for stack, logical_id, _ in self._resources("AWS::EC2::VPC"):
            if json.dumps({"Fn::GetAtt": [logical_id, "DefaultSecurityGroup"]}) not in restricted:
                group = f"{stack}/{logical_id}:{VPC_DEFAULT_SG}"
                self.rules += [Rule(group, "in", ALL, 0, 65535, peer=group, source=f"{group} (AWS default)"),
                               Rule(group, "out", ALL, 0, 65535, cidr=INTERNET[0], source=f"{group} (AWS default)")]
        # The EKS cluster security group: EKS creates it with these rules (EKS user guide, "Amazon EKS
        # security group requirements").
        for stack, logical_id, _ in self._resources("AWS::EKS::Cluster"):
            group = f"{stack}/{logical_id}:{EKS_CLUSTER_SG}"
            self.groups.add(group)
            self.rules += [
                Rule(group, "in", ALL, 0, 65535, peer=group, source=f"{group} (EKS)"),
                Rule(group, "out", ALL, 0, 65535, cidr=INTERNET[0], source=f"{group} (EKS)"),
                Rule(group, "out", ALL, 0, 65535, cidr=INTERNET[1], source=f"{group} (EKS)"),
            ]

    def _pcluster_rules(self, head: str, compute: str, allowed_ssh: str | None) -> None:
        # ParallelCluster 3 cluster_stack.py: the managed compute group allows all traffic to and from
        # itself and from the head node groups, and all outbound; the managed head group allows SSH from
        # Ssh.AllowedIps and all traffic from the compute groups, with EC2's default all-outbound.
        self.groups |= {head, compute}
        self.rules += [
            Rule(compute, "in", ALL, 0, 65535, peer=compute, source=compute),
            Rule(compute, "out", ALL, 0, 65535, peer=compute, source=compute),
            Rule(compute, "out", ALL, 0, 65535, cidr=INTERNET[0], source=compute),
            Rule(compute, "in", ALL, 0, 65535, peer=head, source=compute),
            Rule(head, "in", ALL, 0, 65535, peer=compute, source=head),
            Rule(head, "out", ALL, 0, 65535, cidr=INTERNET[0], source=head),
        ]
        if allowed_ssh:
            self.rules.append(Rule(head, "in", "tcp", 22, 22, cidr=ipaddress.ip_network(allowed_ssh), source=head))

    # -- reading the nodes -------------------------------------------------------------------------

    def _launch_template_interfaces(self, stack: str, ref: Any) -> tuple[tuple[Interface, ...], str, Any]:
        (logical_id,) = ref.values() if isinstance(ref, dict) and "Ref" in ref else (None,)
        assert logical_id is not None, f"{stack}: launch template {ref} is not in the stack"
        data = self._resource(stack, logical_id)["Properties"]["LaunchTemplateData"]
        interfaces = tuple(
            Interface(self.groups_of(stack, i.get("Groups")), efa=i.get("InterfaceType") == "efa")
            for i in sorted(data.get("NetworkInterfaces") or [], key=lambda i: (i.get("NetworkCardIndex", 0),
                                                                             i.get("DeviceIndex", 0)))
        )
        if not interfaces and data.get("SecurityGroupIds"):
            interfaces = (Interface(self.groups_of(stack, data["SecurityGroupIds"])),)
        return interfaces, data.get("InstanceType"), data.get("UserData")

    def _read_nodes(self) -> None:
        for stack, logical_id, resource in self._resources("AWS::FSx::FileSystem"):
            self.file_systems[f"{stack}/{logical_id}"] = self.groups_of(stack, resource["Properties"]["SecurityGroupIds"])
        fsx = bool(self.file_systems)

        for stack, logical_id, resource in self._resources("AWS::EKS::Nodegroup"):
            props = resource["Properties"]
            cluster = props["ClusterName"]["Ref"]
            cluster_sg = frozenset({f"{stack}/{cluster}:{EKS_CLUSTER_SG}"})
            instance_type = (props.get("InstanceTypes") or [None])[0]
            interfaces: tuple[Interface, ...] = ()
            if "LaunchTemplate" in props:
                interfaces, lt_type, _ = self._launch_template_interfaces(stack, props["LaunchTemplate"]["Id"])
                instance_type = lt_type or instance_type
            # Without security groups in a launch template, EKS attaches the cluster security group.
            interfaces = interfaces or (Interface(cluster_sg),)
            efa = any(i.efa for i in interfaces)
            self.node_sets.append(NodeSet(
                "eks", logical_id, interfaces, rendezvous=interfaces[0].groups if efa else None,
                # Training pods and the data pods (loader, shell, TensorBoard) mount the FSx claim.
                mounts_fsx=fsx, instance_type=instance_type, labels=dict(props.get("Labels") or {}),
                # A node group's taints with Cluster Autoscaler's startup prefix are startup taints (names.py).
                taints=tuple(t for t in props.get("Taints") or () if not t["Key"].startswith(STARTUP_TAINT_PREFIX)),
                startup_taints=tuple(t for t in props.get("Taints") or () if t["Key"].startswith(STARTUP_TAINT_PREFIX)),
            ))

        self._read_karpenter_node_pools(fsx)

        multinode = {
            s for s, _, r in self._resources("AWS::Batch::JobDefinition") if r["Properties"].get("Type") == "multinode"
        }
        for stack, logical_id, resource in self._resources("AWS::Batch::ComputeEnvironment"):
            compute = resource["Properties"]["ComputeResources"]
            ce_groups = self.groups_of(stack, compute.get("SecurityGroupIds"))
            interfaces, user_data = (), None
            if "LaunchTemplate" in compute:
                interfaces, _, user_data = self._launch_template_interfaces(
                    stack, compute["LaunchTemplate"]["LaunchTemplateId"]
                )
            interfaces = interfaces or (Interface(ce_groups),)
            # awsvpc tasks (multi-node parallel jobs) get the compute environment's groups, or the VPC's
            # default group when it lists none (AWS Batch user guide, "Compute environments for MNP jobs").
            task_groups = ce_groups or frozenset({self._vpc_default_group()})
            # Job definitions name no compute environment: a multi-node one runs where EFA is.
            trains = stack in multinode and any(i.efa for i in interfaces)
            self.node_sets.append(NodeSet(
                "batch", logical_id, interfaces, rendezvous=task_groups if trains else None,
                # The node setup (an S3 asset) mounts the file system its user data names (LUSTRE_SOURCE).
                mounts_fsx=_names_a_file_system(user_data), instance_type=compute["InstanceTypes"][0],
            ))

        # The API endpoint's interfaces in the VPC carry the cluster security group and the groups of
        # ResourcesVpcConfig (EKS user guide, "Amazon EKS security group requirements").
        clusters = set()
        for stack, logical_id, resource in self._resources("AWS::EKS::Cluster"):
            clusters.add(stack)
            vpc_config = resource["Properties"].get("ResourcesVpcConfig", {})
            groups = self.groups_of(stack, vpc_config.get("SecurityGroupIds")) | {f"{stack}/{logical_id}:{EKS_CLUSTER_SG}"}
            self.node_sets.append(NodeSet(CONTROL_PLANE, logical_id, (Interface(groups),)))

        # An interface endpoint's network interfaces carry its security groups (VPC user guide, "Access an AWS
        # service using an interface VPC endpoint").
        for stack, _logical_id, resource in self._resources("AWS::EC2::VPCEndpoint"):
            props = resource["Properties"]
            if props.get("VpcEndpointType") == "Interface":
                service = json.dumps(props["ServiceName"]).rsplit(".", 1)[-1].strip('"]}')
                name = "ecr." + service if service in ("api", "dkr") else service
                self.node_sets.append(NodeSet(VPC_ENDPOINT, name, (Interface(self.groups_of(stack, props["SecurityGroupIds"])),)))

        for stack, logical_id, resource in self._resources("AWS::EC2::Instance"):
            props = resource["Properties"]
            groups = self.groups_of(stack, props.get("SecurityGroupIds"))
            # The only instance of an EKS stack is its API access host; elsewhere, the development instance.
            # The setup (an S3 asset) mounts the file system its user data names (LUSTRE_SOURCE).
            self.node_sets.append(NodeSet(
                ACCESS_HOST if stack in clusters else "instance", logical_id, (Interface(groups),),
                mounts_fsx=_names_a_file_system(props.get("UserData")), instance_type=props["InstanceType"],
            ))

        for stack, _logical_id, resource in self._resources("Custom::PclusterCluster"):
            config = resource["Properties"]["ClusterConfiguration"]
            head, compute = f"{stack}/{PCLUSTER_HEAD_SG}", f"{stack}/{PCLUSTER_COMPUTE_SG}"
            self._pcluster_rules(head, compute, config["HeadNode"].get("Ssh", {}).get("AllowedIps"))
            existing_fsx = any(
                "FileSystemId" in (s.get("FsxLustreSettings") or {}) for s in config.get("SharedStorage") or []
            )
            networking = config["HeadNode"]["Networking"]
            head_groups = (self.groups_of(stack, networking.get("SecurityGroups")) or frozenset({head})) | \
                self.groups_of(stack, networking.get("AdditionalSecurityGroups"))
            self.node_sets.append(NodeSet(
                "parallelcluster", "head", (Interface(head_groups),), mounts_fsx=existing_fsx,
                instance_type=config["HeadNode"]["InstanceType"],
            ))
            for queue in config["Scheduling"]["SlurmQueues"]:
                net = queue["Networking"]
                groups = (self.groups_of(stack, net.get("SecurityGroups")) or frozenset({compute})) | \
                    self.groups_of(stack, net.get("AdditionalSecurityGroups"))
                for resource_ in queue["ComputeResources"]:
                    efa = bool(resource_.get("Efa", {}).get("Enabled"))
                    self.node_sets.append(NodeSet(
                        "parallelcluster", f"{queue['Name']}/{resource_['Name']}", (Interface(groups, efa=efa),),
                        rendezvous=groups if efa else None, mounts_fsx=existing_fsx,
                        instance_type=resource_["InstanceType"],
                    ))

    def manifests(self) -> Iterable[tuple[str, list[dict[str, Any]]]]:
        """The Kubernetes objects of every manifest the stacks apply (manifest_objects)."""
        for stack, _, resource in self._resources("Custom::AWSCDK-EKS-KubernetesResource"):
            yield stack, manifest_objects(resource["Properties"]["Manifest"])

    def _read_karpenter_node_pools(self, fsx: bool) -> None:
        """Karpenter NodePools are node sets: the nodes a pool would launch carry its EC2NodeClass's
        security groups on every interface (the ENA primary and each efa-only one), its template's
        labels and taints, and the instance type of its requirement."""
        objects = [(stack, o) for stack, objs in self.manifests() for o in objs]
        classes = {o["metadata"]["name"]: (stack, o["spec"]) for stack, o in objects if o.get("kind") == "EC2NodeClass"}
        for _stack, pool in objects:
            if pool.get("kind") != "NodePool":
                continue
            template = pool["spec"]["template"]
            class_stack, node_class = classes[template["spec"]["nodeClassRef"]["name"]]
            groups = frozenset(
                self.group_of(class_stack, term["id"]) or f"unresolved:{term['id']}"
                for term in node_class["securityGroupSelectorTerms"]
            )
            declared = node_class.get("networkInterfaces") or [{"interfaceType": "interface"}]
            interfaces = tuple(
                Interface(groups, efa=i["interfaceType"] == "efa-only")
                for i in sorted(declared, key=lambda i: (i.get("networkCardIndex", 0), i.get("deviceIndex", 0)))
            )
            (instance_type,) = next(
                r["values"] for r in template["spec"]["requirements"] if r["key"] == "node.kubernetes.io/instance-type"
            )
            efa = any(i.efa for i in interfaces)
            self.node_sets.append(NodeSet(
                "eks", f"nodepool/{pool['metadata']['name']}", interfaces, rendezvous=groups if efa else None,
                mounts_fsx=fsx, instance_type=instance_type,
                labels={**template["metadata"].get("labels", {}), "karpenter.sh/nodepool": pool["metadata"]["name"]},
                taints=tuple({"Key": t["key"], "Value": t.get("value", ""), "Effect": t["effect"]}
                             for t in template["spec"].get("taints") or ()),
                startup_taints=tuple({"Key": t["key"], "Value": t.get("value", ""), "Effect": t["effect"]}
                                     for t in template["spec"].get("startupTaints") or ()),
            ))

    def _vpc_default_group(self) -> str:
        ((stack, logical_id, _),) = list(self._resources("AWS::EC2::VPC"))
        group = f"{stack}/{logical_id}:{VPC_DEFAULT_SG}"
        self.groups.add(group)
        return group
