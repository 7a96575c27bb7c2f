"""`trn doctor`'s capacity checks: a group's reservation or capacity block exists, is usable, sits in the group's AZ
and holds its nodes; an on-demand group hears of the open reservations it could use."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.cli._common import error_code
from trainium_cdk.cli.doctor_local import FAIL, PASS, WARN, Check

# Reservation states in which nodes can launch now / later.
USABLE_NOW = ("active",)
USABLE_LATER = ("scheduled", "payment-pending", "pending", "assessing", "delayed")
ENDING_SOON = dt.timedelta(hours=24)


def capacity(config: Config, client: Callable[[str], Any], now: dt.datetime) -> list[Check]:
    """Each group's reservation or capacity block, or the open reservations an on-demand group could use."""
    return [
        _reservation(config, client, group, now) if group.capacity.reserved else _open_reservations(config, client, group)
        for group in config.compute_groups
    ]

def _reservation(config: Config, client: Callable[[str], Any], group: ComputeGroup, now: dt.datetime) -> Check:
    from botocore.exceptions import ClientError

    name = f"capacity {group.name}"
    rid = group.capacity.reservation_id
    try:
        found = client("ec2").describe_capacity_reservations(CapacityReservationIds=[rid])
    except ClientError as error:
        if not error_code(error).startswith("InvalidCapacityReservationId"):
            raise
        return Check(FAIL, name, f"{rid} does not exist in {config.region} for this account",
                     "check capacity.reservation_id and the region (`aws ec2 describe-capacity-reservations`)")
    reservations = found.get("CapacityReservations", [])
    if not reservations:
        return Check(FAIL, name, f"{rid} was not found", "check capacity.reservation_id")
    r = reservations[0]
    kind = "capacity block" if r.get("ReservationType") == "capacity-block" else "reservation"
    what = (
        f"{kind} {rid} ({r.get('State')}, {r.get('TotalInstanceCount')} x {r.get('InstanceType')} "
        f"in {r.get('AvailabilityZoneId')})"
    )
    if r.get("InstanceType") != group.instance_type:
        return Check(FAIL, name, f"{what} is not for {group.instance_type}",
                     f"set compute_groups[{group.name}].instance_type: {r.get('InstanceType')} "
                     "or use another reservation")
    if r.get("AvailabilityZoneId") and r["AvailabilityZoneId"] != group.az_id:
        return Check(FAIL, name, f"{what} is not in the group's AZ {group.az_id}",
                     f"set compute_groups[{group.name}].az_ids: {r['AvailabilityZoneId']}: "
                     "nodes must launch in the reservation's AZ")
    state = r.get("State", "")
    if state not in USABLE_NOW + USABLE_LATER:
        return Check(FAIL, name, f"{what} cannot be used",
                     "buy or create a new one and set capacity.reservation_id")
    total = int(r.get("TotalInstanceCount", 0))
    if total < group.nodes:
        status = FAIL if kind == "capacity block" else WARN
        return Check(status, name, f"{what} holds fewer instances than nodes ({group.nodes})",
                     "lower nodes or extend the reservation")
    if state in USABLE_LATER:
        start = r.get("StartDate")
        return Check(WARN, name, f"{what} is not active yet" + (f": starts {start}" if start else ""),
                     "nodes launch only once it is active; deploy with nodes: 0 or wait until then")
    expected = "capacity-block" if group.capacity.type == "capacity-block" else "default"
    if r.get("ReservationType", "default") != expected:
        return Check(WARN, name, f"{what} is a {kind}, the config says capacity.type {group.capacity.type}",
                     f"set capacity.type: {'capacity-block' if kind == 'capacity block' else 'reservation'}")
    end = r.get("EndDate")
    if isinstance(end, dt.datetime) and end - now < ENDING_SOON:
        return Check(WARN, name, f"{what} ends {end:%Y-%m-%d %H:%M %Z}",
                     "instances are terminated when it ends: extend it or plan the job around it")
    available = int(r.get("AvailableInstanceCount", total))
    if available < group.nodes:
        return Check(WARN, name, f"{what}: only {available} instance(s) free now",
                     "other instances use it: stop them or lower nodes")
    return Check(PASS, name, f"{what}, {available} free")

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
