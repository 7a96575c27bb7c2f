"""A compute group's nodes as every backend's node construct takes them (EKS node groups and node pools,
Batch compute environments)."""

from __future__ import annotations

from dataclasses import dataclass

from trainium_cdk.catalog import InstanceSpec
from trainium_cdk.config import ComputeGroup, Config


@dataclass(frozen=True)
class GroupNodes:
    """One compute group's nodes: its name, instance type (from the catalog), size, disk and capacity.

    :param group_name: the group's name. :param spec: its instance type. :param max_nodes: the most nodes.
    :param root_volume_gib: each node's root volume. :param capacity_reservation_id: a reservation's id, or None.
    :param capacity_block: the reservation is a Capacity Block for ML.
    """

    group_name: str
    spec: InstanceSpec
    max_nodes: int
    root_volume_gib: int
    capacity_reservation_id: str | None
    capacity_block: bool


def group_nodes(config: Config, group: ComputeGroup) -> GroupNodes:
    return GroupNodes(
        group_name=group.name,
        spec=config.spec(group),
        max_nodes=group.maximum,
        root_volume_gib=group.root_volume_gib,
        capacity_reservation_id=group.capacity.reservation_id,
        capacity_block=group.capacity.type == "capacity-block",
    )
