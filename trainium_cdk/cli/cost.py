"""`trn cost`: the bill of a config before its deploy, offline, from the pinned price table."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from trainium_cdk.app.config import az_id_prefix
from trainium_cdk.app.cost import bill, render
from trainium_cdk.cli._common import parse_overrides, read_config


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "cost",
        help="print the idle floor (per hour and month) and each compute group's price at full size",
        description="Estimate what a config costs: the idle floor (EKS control plane, NAT gateways, FSx, system "
        "nodes, interface endpoints, head node) and each compute group's hourly price at max_nodes, from the "
        "price table pinned in trainium_cdk/facts/prices.py. No AWS call.",
    )
    p.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
    p.add_argument("--region", metavar="REGION", help="price in this region (default: the config's region)")
    p.add_argument("-c", "--context", action="append", metavar="KEY=VALUE",
                   help="a context override as for cdk synth (backends, instance_type, nodes)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = read_config(args.config, parse_overrides(args.context))
    if args.region is not None:
        az_id_prefix(args.region)  # a region code, or a ConfigError naming it
    out.write(render(bill(config, args.region)) + "\n")
    return 0
