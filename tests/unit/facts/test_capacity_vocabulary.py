"""The capacity vocabulary is written once (trainium_cdk/facts/capacity.py) and every writer knows every kind of it; a
compute group's nodes reach every backend as the one GroupNodes the config maps them to."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

import trainium_cdk
from tests.support.helpers import config_with
from trainium_cdk.charts.karpenter import capacity_types
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.capacity import CAPACITY_KINDS, CapacityKind, GroupNodes, NodeCapacity
from trainium_cdk.facts.catalog import DEFAULT_CATALOG

PACKAGE = Path(trainium_cdk.__file__).resolve().parent
HOME = PACKAGE / "facts" / "capacity.py"
RESERVATION = "cr-0aaaaaaaaaaaaaaaa"


def _literals_with(value: str, path: Path) -> list[int]:
    """Lines of ``path`` where a ``Literal[...]`` or a tuple/list/set literal names ``value`` with other strings: a
    copy of a vocabulary (a dict mapping it to a service's words is not one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        elements: list[ast.expr] = []
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            elements = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elements = list(node.elts)
        strings = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if value in strings and len(strings) > 1:
            found.append(node.lineno)
    return found


def test_the_kinds_are_spelled_out_only_in_their_home():
    copies = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py")) if path != HOME
        for lines in [_literals_with("capacity-block", path)] if lines
    }
    assert not copies, f"the capacity kinds written again (use trainium_cdk.facts.capacity.CapacityKind): {copies}"


def test_the_config_speaks_the_vocabulary():
    from trainium_cdk.app.config.models import Capacity

    assert typing.get_args(Capacity.model_fields["type"].annotation) == CAPACITY_KINDS == typing.get_args(CapacityKind)


@pytest.mark.parametrize("kind", CAPACITY_KINDS)
def test_every_writer_knows_every_kind(kind):
    from trainium_cdk.parallelcluster.configuration import _CAPACITY_TYPE

    assert capacity_types(kind) and _CAPACITY_TYPE[kind]


def test_node_constructs_take_the_group_whole():
    """No construct or chart takes the capacity as loose fields any more (the pair each once had)."""
    from trainium_cdk.charts.karpenter import NodePoolProps
    from trainium_cdk.constructs.batch import TrainiumBatch
    from trainium_cdk.constructs.efa_launch_template import EfaLaunchTemplate
    from trainium_cdk.constructs.eks_nodegroup import TrainiumNodeGroup
    from trainium_cdk.parallelcluster.configuration import SlurmQueue

    for taker in (TrainiumBatch, TrainiumNodeGroup, EfaLaunchTemplate, NodePoolProps, SlurmQueue):
        parameters = set(inspect.signature(taker.__init__).parameters)
        assert not parameters & {"capacity_reservation_id", "capacity_block", "reservation_id", "capacity_type"}, taker
        assert parameters & {"group", "nodes", "capacity"}, taker


@pytest.mark.parametrize("kind, reservation_id, placement_group, field", [
    ("spot", None, None, "NodeCapacity.kind"),
    ("reservation", None, None, "NodeCapacity.reservation_id"),
    ("capacity-block", None, None, "NodeCapacity.reservation_id"),
    ("on-demand", RESERVATION, None, "NodeCapacity.reservation_id"),
    ("on-demand", None, "ml-pg", "NodeCapacity.placement_group"),
])
def test_a_capacity_that_cannot_work_is_refused_by_name(kind, reservation_id, placement_group, field):
    with pytest.raises(ConfigError) as err:
        NodeCapacity(kind, reservation_id, placement_group)  # type: ignore[arg-type]
    assert err.value.field == field


def test_the_config_maps_a_group_to_its_nodes_once():
    """What a user writes under compute_groups[] arrives as one GroupNodes, capacity included."""
    config = config_with(group={"max_nodes": 4, "root_volume_gib": 800, "capacity": {
        "type": "reservation", "reservation_id": RESERVATION, "placement_group": "ml-reservation-pg"}})
    (group,) = config.compute_groups
    assert config.group_nodes(group) == GroupNodes(
        "train", DEFAULT_CATALOG.get("trn1.32xlarge"), max_nodes=4, root_volume_gib=800,
        capacity=NodeCapacity.reservation(RESERVATION, placement_group="ml-reservation-pg"),
    )
