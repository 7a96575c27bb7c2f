"""docs/contributing/from-yaml-to-cloudformation.md against the code: each trace's hops are where the page says
(the file exists, the function or type is defined in it and names the value as the table says), each count is its
table's rows, and the property a trace ends in holds the config's value in a synthesized template."""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Match, Template

from tests.support import apps, paths
from tests.support.helpers import config_with, quality_synth

PAGE = paths.DOCS / "contributing" / "from-yaml-to-cloudformation.md"
TRACES = ("storage.throughput_mb_per_tib", "compute_groups[].capacity")
# A value none of the defaults holds (250 is the default in three places): only the YAML's can reach the template.
THROUGHPUT = 500


@cache
def _page() -> str:
    return PAGE.read_text()


def _code(cell: str) -> str:
    (found,) = re.findall(r"`([^`]+)`", cell)
    return found


def _trace(name: str) -> tuple[list[list[str]], int]:
    """The hop rows of a trace's table (cells: hop, file, function or type, the value there, what happens), and
    the count the page states after it."""
    text = _page()
    start = text.index(f"<!-- trace: {name} -->")
    table, rest = text[start:].split("\n\n", 1)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[3:]]
    stated = re.match(r"\*\*(\d+) hops?\.\*\*", rest)
    assert stated, f"{name}: the table is not followed by its count (**N hops.**)"
    return rows, int(stated.group(1))


def _definition(path: Path, dotted: str) -> str:
    """The source of a module-level class or function, or a method (``Class.method``), of ``path``."""
    tree = ast.parse(path.read_text())
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in dotted.split("."):
        node = next((n for n in body if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == part), None)
        assert node is not None, f"{path.relative_to(paths.ROOT)}: no {dotted}"
        body = getattr(node, "body", [])
    segment = ast.get_source_segment(path.read_text(), node)
    assert segment is not None
    return segment


@pytest.mark.parametrize("name", TRACES)
def test_each_hop_is_where_the_page_says_and_the_count_is_the_tables(name):
    rows, stated = _trace(name)
    assert [row[0] for row in rows] == [str(n) for n in range(1, len(rows) + 1)], rows
    assert stated == len(rows), f"{name}: the page says {stated} hops, its table has {len(rows)}"
    for hop, file, symbol, value, _ in rows:
        source = _definition(paths.ROOT / _code(file), _code(symbol))
        assert re.search(rf"\b{re.escape(_code(value))}\b", source), f"{name}, hop {hop}: {_code(symbol)} never names {_code(value)}"


def test_every_file_the_page_names_exists():
    named = set(re.findall(r"`((?:trainium_cdk/)?(?:app|constructs|charts|facts|parallelcluster)/[\w/]+\.py)`", _page()))
    assert named
    missing = sorted(n for n in named if not (paths.PACKAGE / n.removeprefix("trainium_cdk/")).is_file())
    assert not missing, missing


def test_the_throughput_in_the_yaml_is_the_file_systems_property(tmp_path):
    """The trace's end, from a YAML file: the value the config holds is LustreConfiguration.PerUnitStorageThroughput
    of the storage stack's file system (the network and storage stacks alone, as the app composes them)."""
    from trainium_cdk.app.config import load_config
    from trainium_cdk.app.stacks.network_stack import NetworkStack
    from trainium_cdk.app.stacks.storage_stack import StorageStack

    assert "`AWS::FSx::FileSystem`" in _page() and "`LustreConfiguration.PerUnitStorageThroughput`" in _page()
    raw = yaml.safe_load((paths.ROOT / "config" / "default.yaml").read_text())
    raw["storage"]["throughput_mb_per_tib"] = THROUGHPUT
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    config = load_config(tmp_path / "config.yaml")
    app, env = cdk.App(), cdk.Environment(region=config.region)
    network = NetworkStack(app, config.stack_name("network"), config=config, env=env)
    storage = StorageStack(app, config.stack_name("storage"), config=config, network=network.network, env=env)
    Template.from_stack(storage).has_resource_properties("AWS::FSx::FileSystem", {
        "LustreConfiguration": Match.object_like({"PerUnitStorageThroughput": THROUGHPUT}),
    })


def test_the_capacity_in_the_config_is_the_launch_templates_properties():
    """The trace's end: a group's reservation id is its launch template's CapacityReservationId, and a Capacity
    Block's also sets MarketType capacity-block; on Batch and on EKS's managed node groups (tests/support/apps.py's
    capacity app, shared with tests/app/test_capacity.py)."""
    for words in ("`AWS::EC2::LaunchTemplate`",
                  "`LaunchTemplateData.CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId`",
                  "`LaunchTemplateData.InstanceMarketOptions.MarketType`"):
        assert words in _page(), words
    result = quality_synth(config_with(**apps.CAPACITY))
    # The EKS stack's template (its managed node groups) and the nested stacks' (each Batch group is one), read from
    # the assembly's files: the helpers that find them by stack compose the app again (10 s here).
    eks = json.loads((result.outdir / f"{result.config.stack_name('eks')}.template.json").read_text())
    nested = [json.loads(f.read_text()) for f in sorted(result.outdir.glob("*.nested.template.json"))]
    batch = {"Resources": {f"{i}-{k}": v for i, t in enumerate(nested) for k, v in t["Resources"].items()}}
    for template in (Template.from_json(eks), Template.from_json(batch)):
        for reservation, market in ((apps.CAPACITY_RESERVATION_ID, Match.absent()),
                                    (apps.CAPACITY_BLOCK_ID, {"MarketType": "capacity-block"})):
            template.has_resource_properties("AWS::EC2::LaunchTemplate", {"LaunchTemplateData": Match.object_like({
                "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": reservation}},
                "InstanceMarketOptions": market,
            })})
