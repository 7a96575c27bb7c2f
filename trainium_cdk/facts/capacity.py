"""A compute group's nodes as every node construct, chart and cluster configuration takes them: which instance
type, how many, what disk, and how they are bought (:class:`NodeCapacity`).

The capacity vocabulary is written here once: the config's ``capacity.type`` is a :data:`CapacityKind`, the app
maps each compute group to one :class:`GroupNodes` (``Config.group_nodes``), and ``TrainiumBatch``,
``TrainiumNodeGroup``, ``EfaLaunchTemplate``, Karpenter's ``NodePoolProps`` and ParallelCluster's ``SlurmQueue``
take it whole, each turning a kind into its own service's words. Plain values, no CDK and no config: the charts
and the pcluster CLI's renderer load this module too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts import defaults
from trainium_cdk.facts.catalog import InstanceSpec

# How a group's nodes are bought: on-demand, into an On-Demand Capacity Reservation (falling back to on-demand
# where the service can), or into an EC2 Capacity Block for ML (reserved only, inside the block's window).
CapacityKind = Literal["on-demand", "reservation", "capacity-block"]
CAPACITY_KINDS: tuple[CapacityKind, ...] = get_args(CapacityKind)


@dataclass(frozen=True)
class NodeCapacity:
    """How one compute group's nodes are bought.

    :param kind: on-demand, reservation or capacity-block. Default: on-demand.
    :param reservation_id: the ``cr-...`` id of the reservation or Capacity Block; set exactly when ``kind`` is
        not on-demand. Default: none.
    :param placement_group: the name of the cluster placement group the reservation was made in, which the nodes
        then launch into (a placement group of their own fights a reservation made without one). Default: none.
    """

    kind: CapacityKind = "on-demand"
    reservation_id: str | None = None
    placement_group: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in CAPACITY_KINDS:
            raise ConfigError("NodeCapacity.kind", self.kind, one_of(CAPACITY_KINDS))
        if (self.kind == "on-demand") != (self.reservation_id is None):
            raise ConfigError("NodeCapacity.reservation_id", self.reservation_id,
                              f"the cr-... id, set exactly when kind is not on-demand (kind is {self.kind})")
        if self.placement_group is not None and self.kind == "on-demand":
            raise ConfigError("NodeCapacity.placement_group", self.placement_group, "only with a reservation")

    @classmethod
    def reservation(cls, reservation_id: str, *, placement_group: str | None = None) -> NodeCapacity:
        """Nodes in an On-Demand Capacity Reservation (``cr-...``)."""
        return cls("reservation", reservation_id, placement_group)

    @classmethod
    def capacity_block(cls, reservation_id: str, *, placement_group: str | None = None) -> NodeCapacity:
        """Nodes in an EC2 Capacity Block for ML (``cr-...``)."""
        return cls("capacity-block", reservation_id, placement_group)

    @property
    def is_capacity_block(self) -> bool:
        return self.kind == "capacity-block"


@dataclass(frozen=True)
class GroupNodes:
    """One compute group's nodes, as the app builds them once from the config and every backend's node construct
    takes them.

    :param group_name: the group's name (its label, its queue, its node pool).
    :param spec: its instance type, from the catalog.
    :param max_nodes: the most nodes the group scales to.
    :param root_volume_gib: the encrypted gp3 root volume of each node, GiB. Default: 512.
    :param capacity: how the nodes are bought. Default: on-demand.
    """

    group_name: str
    spec: InstanceSpec
    max_nodes: int
    root_volume_gib: int = defaults.ROOT_VOLUME_GIB
    capacity: NodeCapacity = field(default_factory=NodeCapacity)
