"""`trn cost`: the bill of a config before its deploy, offline, from the pinned price table; with ``--blocks``, each
capacity-block group at its block's fee as far as EC2 tells it (the one call `trn cost` makes)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from trainium_cdk.app.config import Config, az_id_prefix
from trainium_cdk.app.cost import BlockRate, bill, render
from trainium_cdk.cli._common import parse_overrides, read_config


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "cost",
        help="print the idle floor (per hour and month) and each compute group's price at full size",
        description="Estimate what a config costs: the idle floor (EKS control plane, NAT gateways, FSx, system "
        "nodes, interface endpoints, head node) and each compute group's hourly price at max_nodes, from the "
        "price table pinned in trainium_cdk/facts/prices.py. No AWS call, unless --blocks.",
    )
    p.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
    p.add_argument("--region", metavar="REGION", help="price in this region (default: the config's region)")
    p.add_argument("-c", "--context", action="append", metavar="KEY=VALUE",
                   help="a context override as for cdk synth (backends, instance_type, nodes)")
    p.add_argument("--blocks", action="store_true",
                   help="price each capacity-block group at its block's fee as EC2 tells it (its paid extensions': "
                   "ec2:DescribeCapacityBlockExtensionHistory, in the config's region); where EC2 tells none, the "
                   "on-demand rate, said in a note")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = read_config(args.config, parse_overrides(args.context))
    if args.region is not None:
        az_id_prefix(args.region)  # a region code, or a ConfigError naming it
    rates = block_rates(config, err) if args.blocks else None
    out.write(render(bill(config, args.region, block_rates=rates)) + "\n")
    return 0


def block_rates(config: Config, err: TextIO) -> dict[str, BlockRate]:
    """Each capacity-block group's rate as EC2 tells its block's fee (reservations.block_fee)."""
    from trainium_cdk.cli._common import client, session
    from trainium_cdk.cli.reservations import block_fee, reservation_id

    groups = [g for g in config.compute_groups if g.capacity.is_capacity_block]
    if not groups:
        err.write("trn cost --blocks: the config has no capacity-block group; every group is at the table's rate\n")
        return {}
    ec2 = client(session(config.region), "ec2")
    rates = {}
    for group in groups:
        fee = block_fee(ec2, reservation_id(group))
        latest = fee.latest
        rates[group.name] = BlockRate(latest.usd_per_node_hour if latest else None, fee.said)
    return rates
