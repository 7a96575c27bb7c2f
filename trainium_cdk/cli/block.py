"""`trn block`: the EC2 Capacity Blocks of the config's compute groups (``capacity: {type: capacity-block}``).

    trn block list [--group NAME]                   every block: state, start, end, instances, hours left
    trn block status [--group NAME]                 one block, and what happens next (start, end, termination, payment)
    trn block extend --group NAME --days N [--yes]  EC2's extension offering, its fee; bought once you say yes

The block is read as `trn doctor` reads it (reservations.py): DescribeCapacityReservations and
DescribeCapacityBlockExtensionHistory. An extension is EC2's offering (DescribeCapacityBlockExtensionOfferings) for
the days asked, bought with PurchaseCapacityBlockExtension only after a yes typed at a terminal, or --yes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any, TextIO

from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.cli._common import CliError, client, is_interactive, parse_overrides, read_config, session, table
from trainium_cdk.cli.reservations import (
    Extension,
    Reservation,
    decimal,
    extensions_or_denied,
    money,
    read_reservation,
    relative,
    reservation_id,
    when,
)
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts.capacity_blocks import (
    ACTIVE,
    EXTEND_EARLIEST,
    EXTEND_LATEST,
    EXTENDABLE_STATES,
    EXTENSION_PENDING,
    PAYMENT_FAILED,
    PAYMENT_PENDING,
    SCHEDULED,
    TERMINATION_LEAD,
    extension_days,
    payment_deadline,
    termination_starts,
)

NO_BLOCKS = ("the config has no capacity-block group: give a compute group capacity: {type: capacity-block, "
             "reservation_id: cr-...} (the block EC2 sold you)")
YES = ("y", "yes")


def add_parser(sub: Any) -> None:
    block = sub.add_parser(
        "block", help="the EC2 Capacity Blocks of the config's groups: list, status, extend",
        description="The EC2 Capacity Blocks of the config's capacity-block groups: list them, show one and what "
        "happens next, or extend one (EC2's offering and its fee, bought once you confirm).",
    )
    inner = block.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, func, text, group in (
        ("list", list_blocks, "every capacity-block group's block: state, start, end, instances, hours left",
         "only this capacity-block group (default: every one)"),
        ("status", status, "one block's details and what happens next: start, end, termination, extension payment",
         "the capacity-block group (default: the config's only one)"),
        ("extend", extend, "EC2's offering to extend a block by N days and its upfront fee; buys it once confirmed",
         "the capacity-block group whose block to extend (required)"),
    ):
        p = inner.add_parser(name, help=text, description=text)
        p.add_argument("--group", metavar="NAME", help=group)
        p.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
        p.add_argument("-c", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
                       help="override like `cdk synth -c` (region, ...); repeatable")
        p.set_defaults(func=func)
        if name == "extend":
            p.add_argument("--days", metavar="N", help="days to add: 1 to 14, or a multiple of 7 up to 182 (required)")
            p.add_argument("--yes", action="store_true",
                           help="buy the offering without asking (without it, trn asks at the terminal)")


def _now() -> dt.datetime:
    from trainium_cdk.cli.jobs import CLOCK

    return CLOCK.now().astimezone(dt.UTC)


def block_groups(config: Config, name: str | None) -> list[ComputeGroup]:
    """The capacity-block groups of the config (``name``: that one), or a line saying there is none."""
    blocks = [g for g in config.compute_groups if g.capacity.is_capacity_block]
    if name is None:
        if not blocks:
            raise CliError(NO_BLOCKS)
        return blocks
    for group in blocks:
        if group.name == name:
            return [group]
    others = [g.name for g in config.compute_groups]
    allowed = one_of(g.name for g in blocks) if blocks else f"the config has none ({NO_BLOCKS.split(': ', 1)[1]})"
    what = "a capacity-block group" if name in others else "a compute group with a capacity block"
    raise ConfigError("--group", name, f"{what} of the config; {allowed}")


def _one_group(config: Config, name: str | None, *, verb: str) -> ComputeGroup:
    groups = block_groups(config, name)
    if len(groups) > 1:
        raise CliError(f"pass --group NAME: the config has {len(groups)} capacity-block groups "
                       f"({', '.join(g.name for g in groups)}); `trn block {verb}` takes one")
    return groups[0]


def _read(ec2: Any, config: Config, group: ComputeGroup) -> Reservation:
    rid = reservation_id(group)
    found = read_reservation(ec2, rid)
    if found is None:
        raise CliError(f"block {rid} of group {group.name} does not exist in {config.region} for this account: check "
                       f"compute_groups[{group.name}].capacity.reservation_id and the region")
    return found


def _load(args: argparse.Namespace) -> tuple[Config, Any]:
    config = read_config(args.config, parse_overrides(args.overrides))
    return config, client(session(config.region), "ec2")


# -- list -------------------------------------------------------------------------------------------------------


def list_blocks(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = read_config(args.config, parse_overrides(args.overrides))
    groups = block_groups(config, args.group)
    ec2 = client(session(config.region), "ec2")
    now = _now()
    rows, missing = [], []
    for group in groups:
        rid = reservation_id(group)
        r = read_reservation(ec2, rid)
        if r is None:
            missing.append(rid)
            rows.append((group.name, rid, "not found", "-", "-", "-", "-"))
            continue
        left = r.hours_left(now)
        rows.append((group.name, r.id, r.state, when(r.start), when(r.end), f"{r.total} x {r.instance_type}",
                     f"{left:.1f}" if left is not None else "-"))
    out.write(f"capacity blocks of {config.project} in {config.region}, at {when(now)}:\n")
    table(rows, ["GROUP", "BLOCK", "STATE", "START", "END", "INSTANCES", "HOURS LEFT"], out)
    if missing:
        out.write(f"not found in {config.region} for this account: {', '.join(missing)} (check the groups' "
                  "capacity.reservation_id and the region)\n")
        return 1
    return 0


# -- status -----------------------------------------------------------------------------------------------------


def status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config, ec2 = _load(args)
    group = _one_group(config, args.group, verb="status")
    r = _read(ec2, config, group)
    now = _now()
    extensions, denied = extensions_or_denied(ec2, r.id) if r.is_block else ((), "")
    out.write(f"{r.summary}, group {group.name}, {r.available} free\n")
    rows = [("start", f"{when(r.start)}" + (f" ({relative(r.start, now)})" if r.start else "")),
            ("end", f"{when(r.end)}" + (f" ({relative(r.end, now)})" if r.end else ""))]
    if r.end is not None and r.is_block:
        stop = termination_starts(r.end)
        rows.append(("terminating", f"{when(stop)} ({relative(stop, now)}): EC2 starts terminating the block's "
                     f"instances {int(TERMINATION_LEAD.total_seconds() // 60)} minutes before its end"))
    left = r.hours_left(now)
    if left is not None:
        rows.append(("hours left", f"{left:.1f} ({left * r.total:.1f} instance-hours)"))
    rows += [("extension", _extension_line(e, r, now)) for e in extensions]
    if denied:
        rows.append(("extensions", f"not read: {denied}"))
    for label, text in rows:
        out.write(f"  {label:<12} {text}\n")
    out.write(f"next: {_next(group, r, extensions, now)}\n")
    return 0


def _extension_line(e: Extension, r: Reservation, now: dt.datetime) -> str:
    line = (f"+{e.hours} h, {when(e.start)} to {when(e.end)}: {e.status}, {e.fee_text}"
            f" (bought {when(e.purchased)})")
    if e.status == EXTENSION_PENDING and r.end is not None:
        deadline = payment_deadline(e.purchased, r.end)
        line += f"; to be paid by {when(deadline)} ({relative(deadline, now)}), else the block ends at {when(r.end)}"
    return line


def _next(group: ComputeGroup, r: Reservation, extensions: tuple[Extension, ...], now: dt.datetime) -> str:
    extend = f"`trn block extend --group {group.name} --days N`"
    if r.state == PAYMENT_PENDING:
        return "EC2 is taking the block's payment: once paid it is scheduled, and nodes launch from its start"
    if r.state == PAYMENT_FAILED:
        return "the block's payment failed: it will not start; buy another block and set capacity.reservation_id"
    if r.state == SCHEDULED and r.start is not None:
        return f"it starts {relative(r.start, now)}: the group's nodes can launch from then, not before"
    if r.state == ACTIVE and r.end is not None:
        stop = termination_starts(r.end)
        pending = [e for e in extensions if e.status == EXTENSION_PENDING]
        if pending:
            deadline = payment_deadline(pending[-1].purchased, r.end)
            return (f"an extension waits for its payment until {when(deadline)}; until it is paid, EC2 starts "
                    f"terminating the nodes {relative(stop, now)}")
        if r.end - now <= EXTEND_LATEST:
            return f"EC2 starts terminating the nodes {relative(stop, now)}; it is too late to extend the block"
        return (f"nodes can launch now; EC2 starts terminating them {relative(stop, now)}: checkpoint before then, or "
                f"extend the block ({extend}, until {when(r.end - EXTEND_LATEST)})")
    return "the block has ended: buy a new one and set capacity.reservation_id"


# -- extend -----------------------------------------------------------------------------------------------------


def extend(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.group is None:
        raise CliError("pass --group NAME: the capacity-block group whose block to extend")
    if args.days is None:
        raise CliError("pass --days N: the days to add to the block (1 to 14, or a multiple of 7 up to 182)")
    days = extension_days(args.days)
    config, ec2 = _load(args)
    group = block_groups(config, args.group)[0]
    r = _read(ec2, config, group)
    now = _now()
    _extendable(r, now)
    extensions, denied = extensions_or_denied(ec2, r.id)
    pending = [e for e in extensions if e.status == EXTENSION_PENDING]
    if pending and r.end is not None:
        deadline = payment_deadline(pending[-1].purchased, r.end)
        raise CliError(f"{r.id} has an extension still payment-pending ({pending[-1].fee_text}, to be paid by "
                       f"{when(deadline)}): EC2 extends a block with none pending; `trn block status --group "
                       f"{group.name}` shows it")
    offer = _offering(ec2, r, days)
    _print_offer(offer, r, group, days, now, out)
    if denied:
        out.write(f"  (its earlier extensions were not read: {denied})\n")
    if not (args.yes or _confirmed(offer, out)):
        out.write("not bought\n")
        return 1
    bought = (ec2.purchase_capacity_block_extension(
        CapacityBlockExtensionOfferingId=offer["CapacityBlockExtensionOfferingId"], CapacityReservationId=r.id,
    ).get("CapacityBlockExtensions") or [{}])[0]
    state = bought.get("CapacityBlockExtensionStatus", "payment-pending")
    out.write(f"bought: the extension of {r.id} to {when(offer.get('CapacityBlockExtensionEndDate'))} is {state}")
    if state == EXTENSION_PENDING and r.end is not None:
        deadline = payment_deadline(bought.get("CapacityBlockExtensionPurchaseDate") or now, r.end)
        out.write(f": EC2 must take {_fee(offer)} by {when(deadline)}, else it fails and the block ends at "
                  f"{when(r.end)}; `trn block status --group {group.name}` follows it, `trn doctor` warns while it "
                  "is pending")
    out.write("\n")
    return 0


def _confirmed(offer: dict[str, Any], out: TextIO) -> bool:
    """Whether the user typed yes at the terminal; no terminal (a script, a pipe) is one line, never a purchase."""
    if not is_interactive(sys.stdin):
        raise CliError("not bought: stdin is not a terminal to confirm on; run again with --yes to buy this offering")
    out.write(f"Buy it for {_fee(offer)}? Type yes to buy: ")
    out.flush()
    return sys.stdin.readline().strip().lower() in YES


def _extendable(r: Reservation, now: dt.datetime) -> None:
    if not r.is_block:
        raise CliError(f"{r.id} is an On-Demand Capacity Reservation, not a capacity block: only blocks are extended")
    if r.state not in EXTENDABLE_STATES:
        raise CliError(f"{r.summary} cannot be extended: EC2 extends an active or scheduled block")
    if r.end is None:
        raise CliError(f"{r.summary} has no end date to extend")
    if r.end - now < EXTEND_LATEST:
        raise CliError(f"{r.summary} ends {relative(r.end, now)}: EC2 extends a block until 1 hour before its end")
    if r.end - now > EXTEND_EARLIEST:
        raise CliError(f"{r.summary} ends {relative(r.end, now)}: EC2 extends a block from 56 days before its end, "
                       f"{when(r.end - EXTEND_EARLIEST)}")


def _offering(ec2: Any, r: Reservation, days: int) -> dict[str, Any]:
    hours = days * 24
    pages = ec2.get_paginator("describe_capacity_block_extension_offerings").paginate(
        CapacityBlockExtensionDurationHours=hours, CapacityReservationId=r.id)
    offers = [o for page in pages for o in page.get("CapacityBlockExtensionOfferings", [])
              if o.get("CapacityBlockExtensionDurationHours", hours) == hours]
    if not offers:
        raise CliError(f"EC2 offers no extension of {days} day(s) for {r.id} now (no capacity to add): try fewer days "
                       "or later; nothing was bought", code=1)
    return offers[0]


def _fee(offer: dict[str, Any]) -> str:
    return money(offer.get("UpfrontFee"), offer.get("CurrencyCode"))


def _print_offer(offer: dict[str, Any], r: Reservation, group: ComputeGroup, days: int, now: dt.datetime,
                 out: TextIO) -> None:
    count = int(offer.get("InstanceCount", r.total))
    hours = int(offer.get("CapacityBlockExtensionDurationHours", days * 24))
    new_end = offer.get("CapacityBlockExtensionEndDate")
    out.write(f"extension of capacity block {r.id} (group {group.name}) by {days} day(s), {hours} h, {count} x "
              f"{offer.get('InstanceType', r.instance_type)}:\n")
    out.write(f"  end          {when(r.end)} -> {when(new_end)}\n")
    fee = decimal(offer.get("UpfrontFee"))
    rate = f" ({money(fee / (hours * count), offer.get('CurrencyCode'))} per instance-hour)" if fee and hours * count else ""
    out.write(f"  upfront fee  {_fee(offer)}{rate}, charged when bought\n")
    if r.end is not None:
        out.write(f"  payment      EC2 keeps it payment-pending until paid: by {when(payment_deadline(now, r.end))} "
                  f"at the latest, else it fails and the block ends at {when(r.end)}\n")
