"""A compute group's Capacity Reservation or Capacity Block as EC2 tells it: the one reading of it that `trn doctor`,
`trn block`, `trn cost --blocks` and `trn usage` share.

EC2 answers DescribeCapacityReservations with a block's state, dates, type and size, and
DescribeCapacityBlockExtensionHistory with each extension bought for it: status, window, upfront fee and currency.
Nothing in EC2's API tells the fee of a block as it was first bought (PurchaseCapacityBlock answers the reservation,
without its price; the price is the offering's, DescribeCapacityBlockOfferings, before the purchase): a block's fee is
readable only for the hours its paid extensions added (:func:`block_fee`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from trainium_cdk.app.config import ComputeGroup
from trainium_cdk.cli._common import CliError, error_code, is_denied
from trainium_cdk.facts.capacity_blocks import EXTENSION_PAID

CAPACITY_BLOCK = "capacity-block"  # DescribeCapacityReservations ReservationType of a block
FEE_CURRENCY = "USD"  # the price table's (facts/prices.py): a fee in another currency is not converted
HISTORY_ACTION = "ec2:DescribeCapacityBlockExtensionHistory"


@dataclass(frozen=True)
class Reservation:
    """One Capacity Reservation (a Capacity Block when ``kind`` is capacity-block), as DescribeCapacityReservations
    tells it."""

    id: str
    state: str
    kind: str
    instance_type: str
    total: int
    available: int
    az_id: str | None
    start: dt.datetime | None
    end: dt.datetime | None

    @property
    def is_block(self) -> bool:
        return self.kind == CAPACITY_BLOCK

    @property
    def label(self) -> str:
        return "capacity block" if self.is_block else "reservation"

    @property
    def summary(self) -> str:
        return f"{self.label} {self.id} ({self.state}, {self.total} x {self.instance_type} in {self.az_id})"

    def hours_left(self, now: dt.datetime) -> float | None:
        """The hours of the block still to come (all of them before it starts), or None: it has no end."""
        if self.end is None:
            return None
        begin = max(now, self.start) if self.start is not None else now
        return max(0.0, (self.end - begin).total_seconds() / 3600)


@dataclass(frozen=True)
class Extension:
    """One extension of a block, as DescribeCapacityBlockExtensionHistory tells it."""

    offering_id: str
    status: str
    hours: int
    instances: int
    start: dt.datetime | None
    end: dt.datetime | None
    purchased: dt.datetime | None
    fee: Decimal | None
    currency: str

    @property
    def fee_text(self) -> str:
        return money(self.fee, self.currency)

    @property
    def per_node_hour(self) -> Decimal | None:
        if self.fee is None or self.hours <= 0 or self.instances <= 0:
            return None
        return self.fee / (self.hours * self.instances)


def reservation_id(group: ComputeGroup) -> str:
    """The ``cr-...`` id of a group bought into a reservation or block (the config requires it there)."""
    rid = group.capacity.reservation_id
    if rid is None:
        raise CliError(f"compute group {group.name} has no capacity.reservation_id (capacity.type is "
                       f"{group.capacity.type})")
    return rid


def read_reservation(ec2: Any, reservation_id: str) -> Reservation | None:
    """The reservation ``reservation_id``, or None: EC2 knows none of that id in this region and account."""
    from botocore.exceptions import ClientError

    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except ClientError as error:
        if error_code(error).startswith("InvalidCapacityReservationId"):
            return None
        raise
    reservations = found.get("CapacityReservations") or []
    if not reservations:
        return None
    r = reservations[0]
    total = int(r.get("TotalInstanceCount", 0))
    return Reservation(
        id=r.get("CapacityReservationId", reservation_id), state=r.get("State", ""),
        kind=r.get("ReservationType", "default"), instance_type=r.get("InstanceType", ""), total=total,
        available=int(r.get("AvailableInstanceCount", total)), az_id=r.get("AvailabilityZoneId"),
        start=_utc(r.get("StartDate")), end=_utc(r.get("EndDate")),
    )


def read_extensions(ec2: Any, reservation_id: str) -> tuple[Extension, ...]:
    """Every extension bought for the block ``reservation_id``, oldest purchase first."""
    pages = ec2.get_paginator("describe_capacity_block_extension_history").paginate(
        CapacityReservationIds=[reservation_id])
    found = [_extension(e) for page in pages for e in page.get("CapacityBlockExtensions", [])
             if e.get("CapacityReservationId", reservation_id) == reservation_id]
    oldest = dt.datetime.min.replace(tzinfo=dt.UTC)
    return tuple(sorted(found, key=lambda e: e.purchased or e.start or oldest))


def extensions_or_denied(ec2: Any, reservation_id: str) -> tuple[tuple[Extension, ...], str]:
    """The block's extensions and ''; or none and a line saying the history was denied (the IAM action, the code)."""
    from botocore.exceptions import ClientError

    try:
        return read_extensions(ec2, reservation_id), ""
    except ClientError as error:
        if not is_denied(error):
            raise
        return (), f"{HISTORY_ACTION} was denied ({error_code(error)})"


def _extension(e: dict[str, Any]) -> Extension:
    return Extension(
        offering_id=e.get("CapacityBlockExtensionOfferingId", ""), status=e.get("CapacityBlockExtensionStatus", ""),
        hours=int(e.get("CapacityBlockExtensionDurationHours", 0)), instances=int(e.get("InstanceCount", 0)),
        start=_utc(e.get("CapacityBlockExtensionStartDate")), end=_utc(e.get("CapacityBlockExtensionEndDate")),
        purchased=_utc(e.get("CapacityBlockExtensionPurchaseDate")), fee=decimal(e.get("UpfrontFee")),
        currency=e.get("CurrencyCode") or FEE_CURRENCY,
    )


def _utc(value: Any) -> dt.datetime | None:
    if not isinstance(value, dt.datetime):
        return None
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def decimal(value: Any) -> Decimal | None:
    """An amount as EC2 writes it (UpfrontFee is a string), or None: none, or not a number."""
    try:
        return Decimal(str(value)) if value not in (None, "") else None
    except InvalidOperation:
        return None


# -- a block's fee -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FeePeriod:
    """Hours of a block whose price EC2 tells: a paid extension's window, at its fee per node-hour."""

    start: dt.datetime
    end: dt.datetime
    usd_per_node_hour: float
    extension: Extension


@dataclass(frozen=True)
class BlockFee:
    """What EC2 tells of the price of block ``reservation_id``: the windows of its paid extensions, each at its fee
    per node-hour, and one line saying what was used (or why nothing could be)."""

    reservation_id: str
    periods: tuple[FeePeriod, ...]
    said: str

    @property
    def latest(self) -> FeePeriod | None:
        return self.periods[-1] if self.periods else None

    def split(self, start: dt.datetime, end: dt.datetime) -> tuple[list[tuple[float, float]], float]:
        """The hours of [start, end) inside the fee's windows, as (hours, USD per node-hour) pairs, and the hours
        outside them (priced on demand by the caller)."""
        priced, inside = [], 0.0
        for period in self.periods:
            hours = (min(end, period.end) - max(start, period.start)).total_seconds() / 3600
            if hours > 0:
                priced.append((hours, period.usd_per_node_hour))
                inside += hours
        return priced, max(0.0, (end - start).total_seconds() / 3600 - inside)


def block_fee(ec2: Any, reservation_id: str) -> BlockFee:
    """The block's fee as far as EC2 tells it (its paid extensions'); a denied history is said, not raised."""
    extensions, denied = extensions_or_denied(ec2, reservation_id)
    if denied:
        return BlockFee(reservation_id, (), f"capacity block {reservation_id}: its fee cannot be read ({denied}): at "
                        "the on-demand rate")
    periods = tuple(_periods(extensions))
    if not periods:
        return BlockFee(reservation_id, (), f"capacity block {reservation_id}: its fee cannot be read (EC2 tells the "
                        f"fees of a block's paid extensions only, and it has {_none_paid(extensions)}): at the on-demand "
                        "rate")
    latest = periods[-1]
    ext = latest.extension
    others = f"; {len(periods) - 1} earlier extension(s) at their own fees" if len(periods) > 1 else ""
    return BlockFee(reservation_id, periods, (
        f"capacity block {reservation_id}: {latest.usd_per_node_hour:,.2f} USD per node-hour, the fee of its latest "
        f"paid extension ({ext.fee_text} for {ext.hours} h x {ext.instances} instances from {when(latest.start)})"
        f"{others}; EC2 does not tell the fee of the block as first bought"))


def _periods(extensions: Iterable[Extension]) -> Iterable[FeePeriod]:
    for ext in extensions:
        rate = ext.per_node_hour
        if (ext.status == EXTENSION_PAID and rate is not None and ext.currency == FEE_CURRENCY
                and ext.start is not None and ext.end is not None):
            yield FeePeriod(ext.start, ext.end, float(rate), ext)


def _none_paid(extensions: tuple[Extension, ...]) -> str:
    if not extensions:
        return "no extension"
    foreign = sorted({e.currency for e in extensions if e.currency != FEE_CURRENCY})
    if foreign:
        return f"none paid in {FEE_CURRENCY} (fees in {', '.join(foreign)} are not converted)"
    return "no paid extension with a fee"


# -- times as `trn` prints them -------------------------------------------------------------------------------


def money(amount: Any, currency: str | None) -> str:
    """``4,100.00 USD``; an amount EC2 did not tell is said so."""
    value = amount if isinstance(amount, Decimal) else decimal(amount)
    return f"{value:,.2f} {currency or FEE_CURRENCY}" if value is not None else "fee not told"


def when(moment: Any) -> str:
    utc = _utc(moment)
    return f"{utc:%Y-%m-%d %H:%M} UTC" if utc is not None else "unknown"


def span(delta: dt.timedelta) -> str:
    """A duration as a person reads it: 3 d 4 h, 46 h 40 min, 25 min."""
    minutes = int(abs(delta).total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days >= 2:
        return f"{days} d {hours} h"
    if days or hours:
        return f"{days * 24 + hours} h {minutes} min"
    return f"{minutes} min"


def relative(moment: dt.datetime, now: dt.datetime) -> str:
    """``in 3 h 10 min`` or ``5 min ago``."""
    return f"in {span(moment - now)}" if moment >= now else f"{span(now - moment)} ago"
