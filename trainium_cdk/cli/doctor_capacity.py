"""`trn doctor`'s capacity checks: a group's reservation or capacity block exists, is usable, sits in the group's AZ
and holds its nodes, and is not about to end (a block: when EC2 starts terminating its instances); a block's extension
still to be paid says by when; an on-demand group hears of the open reservations it could use. The reservation and its
extensions are read as `trn block` reads them (reservations.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.cli.doctor_local import FAIL, PASS, WARN, Check
from trainium_cdk.cli.reservations import (
    HISTORY_ACTION,
    Reservation,
    extensions_or_denied,
    read_reservation,
    relative,
    reservation_id,
    when,
)
from trainium_cdk.facts.capacity_blocks import (
    EXTENDABLE_STATES,
    EXTENSION_FAILED,
    EXTENSION_PENDING,
    payment_deadline,
    termination_starts,
)

# Reservation states in which nodes can launch now / later.
USABLE_NOW = ("active",)
USABLE_LATER = ("scheduled", "payment-pending", "pending", "assessing", "delayed")
ENDING_SOON = dt.timedelta(hours=24)


def capacity(config: Config, client: Callable[[str], Any], now: dt.datetime) -> list[Check]:
    """Each group's reservation or capacity block (and a block's extension being paid), or the open reservations an
    on-demand group could use."""
    checks: list[Check] = []
    for group in config.compute_groups:
        if not group.capacity.reserved:
            checks.append(_open_reservations(config, client, group))
            continue
        found = read_reservation(client("ec2"), reservation_id(group))
        checks.append(_reservation(config, group, found, now))
        if found is not None and found.is_block and group.capacity.is_capacity_block:
            checks += _extensions(client, group, found, now)
    return checks

def _reservation(config: Config, group: ComputeGroup, r: Reservation | None, now: dt.datetime) -> Check:
    name = f"capacity {group.name}"
    rid = group.capacity.reservation_id
    if r is None:
        return Check(FAIL, name, f"{rid} does not exist in {config.region} for this account",
                     "check capacity.reservation_id and the region (`aws ec2 describe-capacity-reservations`)")
    what = r.summary
    if r.instance_type != group.instance_type:
        return Check(FAIL, name, f"{what} is not for {group.instance_type}",
                     f"set compute_groups[{group.name}].instance_type: {r.instance_type} "
                     "or use another reservation")
    if r.az_id and r.az_id != group.az_id:
        return Check(FAIL, name, f"{what} is not in the group's AZ {group.az_id}",
                     f"set compute_groups[{group.name}].az_ids: {r.az_id}: "
                     "nodes must launch in the reservation's AZ")
    if r.state not in USABLE_NOW + USABLE_LATER:
        return Check(FAIL, name, f"{what} cannot be used",
                     "buy or create a new one and set capacity.reservation_id")
    if r.total < group.nodes:
        status = FAIL if r.is_block else WARN
        return Check(status, name, f"{what} holds fewer instances than nodes ({group.nodes})",
                     "lower nodes or extend the reservation")
    if r.state in USABLE_LATER:
        return Check(WARN, name, f"{what} is not active yet" + (f": starts {when(r.start)}" if r.start else ""),
                     "nodes launch only once it is active; deploy with nodes: 0 or wait until then")
    expected = "capacity-block" if group.capacity.is_capacity_block else "default"
    if r.kind != expected:
        return Check(WARN, name, f"{what} is a {r.label}, the config says capacity.type {group.capacity.type}",
                     f"set capacity.type: {'capacity-block' if r.is_block else 'reservation'}")
    if r.end is not None and r.end - now < ENDING_SOON:
        return _ending(group, r, now)
    if r.available < group.nodes:
        return Check(WARN, name, f"{what}: only {r.available} instance(s) free now",
                     "other instances use it: stop them or lower nodes")
    return Check(PASS, name, f"{what}, {r.available} free")

def _ending(group: ComputeGroup, r: Reservation, now: dt.datetime) -> Check:
    """A reservation or block that ends within ENDING_SOON: when, and for a block when EC2 starts terminating."""
    assert r.end is not None
    name = f"capacity {group.name}"
    if not r.is_block:
        return Check(WARN, name, f"{r.summary} ends {when(r.end)} ({relative(r.end, now)})",
                     "instances are terminated when it ends: extend it or plan the job around it")
    stop = termination_starts(r.end)
    return Check(WARN, name, f"{r.summary} ends {when(r.end)} ({relative(r.end, now)}); EC2 starts terminating its "
                 f"instances at {when(stop)} ({relative(stop, now)})",
                 f"instances are terminated from then: checkpoint before it, or extend the block "
                 f"(`trn block extend --group {group.name} --days N`) at least an hour before its end")

def _extensions(client: Callable[[str], Any], group: ComputeGroup, r: Reservation, now: dt.datetime) -> list[Check]:
    """A block's extension that still has to be paid (or whose payment failed, the block keeping its old end)."""
    if r.end is None or r.state not in EXTENDABLE_STATES:
        return []  # a block that has ended (or not been paid for) has no extension to pay
    name = f"extension {group.name}"
    extensions, denied = extensions_or_denied(client("ec2"), r.id)
    if denied:
        return [Check(WARN, name, f"could not check: {denied}", f"allow {HISTORY_ACTION} (read-only) for this identity")]
    if not extensions:
        return []
    last = extensions[-1]
    if last.status == EXTENSION_PENDING:
        deadline = payment_deadline(last.purchased, r.end)
        return [Check(WARN, name, f"the extension of {r.id} by {last.hours} h ({last.fee_text}) is not paid yet: "
                      f"payment must go through by {when(deadline)} ({relative(deadline, now)})",
                      f"else it fails and the block ends at {when(r.end)}: check the account's payment method "
                      "(Billing console), then `trn block status`")]
    if last.status == EXTENSION_FAILED:
        return [Check(WARN, name, f"the payment of the extension of {r.id} by {last.hours} h failed: the block still "
                      f"ends at {when(r.end)} ({relative(r.end, now)})",
                      f"buy another extension (`trn block extend --group {group.name} --days N`) or plan the job "
                      "around the end")]
    return []

def _open_reservations(config: Config, client: Callable[[str], Any], group: ComputeGroup) -> Check:
    name = f"capacity {group.name}"
    pages = client("ec2").get_paginator("describe_capacity_reservations").paginate(Filters=[
        {"Name": "instance-type", "Values": [group.instance_type]},
        {"Name": "state", "Values": ["active"]},
    ])
    matching = [
        r for page in pages for r in page.get("CapacityReservations", [])
        if r.get("AvailabilityZoneId") in group.az_ids
    ]
    if not matching:
        return Check(PASS, name, f"on-demand {group.nodes} x {group.instance_type}; no active reservation in "
                     f"{', '.join(group.az_ids)} (launches depend on free on-demand capacity)")
    listed = ", ".join(
        f"{r['CapacityReservationId']} ({r.get('AvailableInstanceCount', '?')} free, "
        f"{r.get('InstanceMatchCriteria', 'open')}"
        f"{', capacity block' if r.get('ReservationType') == 'capacity-block' else ''})"
        for r in matching
    )
    return Check(PASS, name, f"on-demand; matching reservations: {listed}"
                 " (targeted ones and capacity blocks are used only with capacity.reservation_id)")
