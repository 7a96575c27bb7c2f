"""Karpenter node pools: one EC2NodeClass and one NodePool per compute group (EKS capacity from zero).

What Karpenter 1.14.1 (versions.KARPENTER_VERSION) offers and this chart relies on, from the CRDs and
docs of github.com/aws/karpenter-provider-aws at that tag (the CRDs are vendored in tests/data/karpenter):

- multi-card EFA: ``EC2NodeClass.spec.networkInterfaces`` takes, per network card, an ``interface``
  (ENA) or ``efa-only`` interface and must include the primary ``interface`` at card 0 / device 0.
  Without it, Karpenter attaches one EFA interface per network card only when a pod requests
  ``vpc.amazonaws.com/efa`` (PR 5068, pkg/providers/instance getEFACountForInstance); listing them
  gives every node of the group all of them, whatever pod came first.
- placement groups: ``spec.placementGroupSelector`` (name or id), since 1.11.
- reservations and Capacity Blocks: ``spec.capacityReservationSelectorTerms`` with the NodePool
  capacity type ``reserved``; "Capacity blocks are modeled as on-demand capacity reservations" (docs,
  tasks/odcrs.md); the ReservedCapacity feature gate is on by default since 1.6 (reference/settings.md).
- the AMI: ``amiSelectorTerms: [{alias: al2023@<release>}]`` resolves the EKS AL2023 AMI of the
  node's kind, the Neuron variant for Trainium types, pinned to one release.

A NodePool keeps no node: the group exists only while a pending pod asks for it, and empty nodes go
after ``consolidate_after``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdk8s import Chart
from constructs import Construct

from trainium_cdk.charts._k8s import CHART_LABELS, INSTANCE_TYPE_LABEL, api_object, check_name
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.capacity import CapacityKind, GroupNodes
from trainium_cdk.facts.names import (
    GROUP_LABEL,
    HEALTH_TAINT_KEY,
    HEALTH_TAINT_VALUE,
    NEURON_TAINT_KEY,
    NEURON_TAINT_VALUE,
    NODE_EFA_LABEL,
    NODE_INSTANCE_TYPE_LABEL,
)

NODE_POOLS_CHART_ID = "karpenter-node-pools"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
NODE_POOL_LABEL = "karpenter.sh/nodepool"
ROOT_DEVICE_NAME = "/dev/xvda"
# Same reasoning as the launch template's (efa_launch_template.METADATA_HOP_LIMIT): pods use Pod
# Identity, node agents use the host network, so no container needs to reach IMDS.
METADATA_HOP_LIMIT = 1
DEFAULT_CONSOLIDATE_AFTER = "10m"


def compute_node_labels(group: str, instance_type: str, efa: bool) -> dict[str, str]:
    """The labels of a compute group's nodes: charts select on them (training pods on GROUP_LABEL)."""
    return {GROUP_LABEL: group, NODE_INSTANCE_TYPE_LABEL: instance_type, NODE_EFA_LABEL: "true" if efa else "false"}


def capacity_types(capacity: CapacityKind) -> list[str]:
    """Karpenter capacity types of a group, in the order Karpenter prefers them (reserved first).

    A reservation falls back to on-demand when it is full (same price, outside the reservation). A
    Capacity Block is reserved only: outside its window EC2 sells no such capacity to the block's
    owner at block prices, and an on-demand fallback would bill trn nodes the user never bought.
    """
    return {"on-demand": ["on-demand"], "reservation": ["reserved", "on-demand"], "capacity-block": ["reserved"]}[
        capacity
    ]


@dataclass(frozen=True)
class NodePoolProps:
    """One compute group as Karpenter sees it.

    :param nodes: the group's nodes: its name (the NodePool's and EC2NodeClass's name, and GROUP_LABEL), its
        instance type (its EFA interfaces, one per network card, and its vCPUs for the NodePool's cpu limit), the
        most nodes the pool may launch, the root volume, and how they are bought (a reservation or Capacity Block
        is selected by its id).
    :param node_role: name of the IAM role of the nodes (a token works).
    :param subnet_ids: the group's compute subnets (exactly one for an EFA type: EFA needs one subnet).
    :param security_group_ids: groups of every interface (the EFA group and the cluster group).
    :param placement_group: name of the group's cluster placement group, or None. Default: None.
    :param ami_alias: the EC2NodeClass AMI alias, such as al2023@v20260930.
    :param consolidate_after: how long a node stays empty before it goes. Default: 10m.
    :param tags: EC2 tags of the instances and volumes. Default: none.
    :param user_data: the nodes' user data (MIME multi-part with NodeConfig parts, trainium_cdk.runtime.eks_user_data),
        which Karpenter merges with its own. Default: none.
    :param root_volume_throughput: the root volume's gp3 throughput, MiB/s. Default: gp3's baseline.
    """

    nodes: GroupNodes
    node_role: str
    subnet_ids: Sequence[str]
    security_group_ids: Sequence[str]
    ami_alias: str
    placement_group: str | None = None
    consolidate_after: str = DEFAULT_CONSOLIDATE_AFTER
    tags: Mapping[str, str] = field(default_factory=dict)
    user_data: str | None = None
    root_volume_throughput: int | None = None

    @property
    def name(self) -> str:
        """The group's name: the NodePool's and the EC2NodeClass's."""
        return self.nodes.group_name

    def __post_init__(self) -> None:
        check_name("NodePoolProps.nodes.group_name", self.name)
        if self.nodes.max_nodes < 1:
            raise ConfigError("NodePoolProps.nodes.max_nodes", self.nodes.max_nodes, "at least 1")
        if not self.subnet_ids or (self.nodes.spec.efa_interfaces and len(self.subnet_ids) != 1):
            raise ConfigError(
                "NodePoolProps.subnet_ids", list(self.subnet_ids), "one subnet for an EFA type, at least one otherwise"
            )
        if not self.security_group_ids:
            raise ConfigError("NodePoolProps.security_group_ids", [], "at least one security group")


def network_interfaces(efa_interfaces: int) -> list[dict[str, Any]]:
    """Every EFA interface of the type: the ENA primary at card 0 / device 0, then one efa-only
    interface per network card (card 0 on device 1, the others on device 0), the layout current EC2
    guidance gives for multi-card instances and the only one the CRD accepts with a primary interface."""
    if efa_interfaces == 0:
        return []
    return [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        *(
            {"networkCardIndex": card, "deviceIndex": 1 if card == 0 else 0, "interfaceType": "efa-only"}
            for card in range(efa_interfaces)
        ),
    ]


def ec2_node_class_spec(pool: NodePoolProps) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "role": pool.node_role,
        "amiSelectorTerms": [{"alias": pool.ami_alias}],
        "subnetSelectorTerms": [{"id": subnet} for subnet in pool.subnet_ids],
        "securityGroupSelectorTerms": [{"id": group} for group in pool.security_group_ids],
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": METADATA_HOP_LIMIT,
            "httpTokens": "required",
        },
        "blockDeviceMappings": [
            {
                "deviceName": ROOT_DEVICE_NAME,
                "rootVolume": True,
                "ebs": {
                    "volumeSize": f"{pool.nodes.root_volume_gib}Gi", "volumeType": "gp3", "encrypted": True,
                    "deleteOnTermination": True,
                    **({"throughput": pool.root_volume_throughput} if pool.root_volume_throughput else {}),
                },
            }
        ],
    }
    if pool.user_data is not None:
        spec["userData"] = pool.user_data
    interfaces = network_interfaces(pool.nodes.spec.efa_interfaces)
    if interfaces:
        spec["networkInterfaces"] = interfaces
    if pool.placement_group is not None:
        spec["placementGroupSelector"] = {"name": pool.placement_group}
    if pool.nodes.capacity.reservation_id is not None:
        spec["capacityReservationSelectorTerms"] = [{"id": pool.nodes.capacity.reservation_id}]
    if pool.tags:
        spec["tags"] = dict(pool.tags)
    if pool.user_data is not None:
        spec["userData"] = pool.user_data
    return spec


def node_pool_spec(pool: NodePoolProps) -> dict[str, Any]:
    return {
        "template": {
            "metadata": {"labels": compute_node_labels(pool.name, pool.nodes.spec.name, pool.nodes.spec.efa_interfaces > 0)},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool.name},
                "requirements": [
                    {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [pool.nodes.spec.name]},
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": capacity_types(pool.nodes.capacity.kind)},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                ],
                "taints": [{"key": NEURON_TAINT_KEY, "value": NEURON_TAINT_VALUE, "effect": "NoSchedule"}],
                # Until the node health check passes (charts/node_health.py): Karpenter puts it on every new node
                # and, as a startup taint, leaves it out when it decides whether a pod fits the pool.
                "startupTaints": [{"key": HEALTH_TAINT_KEY, "value": HEALTH_TAINT_VALUE, "effect": "NoSchedule"}],
                # Expiry is forceful in Karpenter v1 (it drains past do-not-disrupt): a week-long run
                # must not be cut by the default 720h. Empty nodes go through consolidation instead.
                "expireAfter": "Never",
            },
        },
        # nodes: the node count (docs, concepts/nodepools.md "spec.limits"); cpu too, which every 1.x counts.
        "limits": {"nodes": str(pool.nodes.max_nodes), "cpu": str(pool.nodes.max_nodes * pool.nodes.spec.vcpus)},
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": pool.consolidate_after},
    }


class TrainiumNodePools(Chart):
    """An EC2NodeClass and a NodePool of the same name per compute group.

    :param pools: one per compute group.
    """

    def __init__(self, scope: Construct, id: str, *, pools: Sequence[NodePoolProps]) -> None:
        if not pools:
            raise ConfigError("TrainiumNodePools.pools", [], "at least one compute group")
        super().__init__(scope, id, labels=CHART_LABELS)
        self.node_classes = {}
        self.node_pools = {}
        for pool in pools:
            self.node_classes[pool.name] = api_object(
                self, f"NodeClass-{pool.name}", api_version="karpenter.k8s.aws/v1", kind="EC2NodeClass",
                name=pool.name, spec=ec2_node_class_spec(pool),
            )
            self.node_pools[pool.name] = api_object(
                self, f"NodePool-{pool.name}", api_version="karpenter.sh/v1", kind="NodePool", name=pool.name,
                spec=node_pool_spec(pool),
            )
