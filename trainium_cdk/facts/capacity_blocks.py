"""EC2 Capacity Blocks for ML: their life's timings and extension rules as the EC2 User Guide states them (pure data).

"Monitor Capacity Blocks using EventBridge": EC2 starts terminating a block's instances 30 minutes before its end and
sends "Expiration Warning" 40 minutes before it. "Extend Capacity Blocks": a block can be extended while it is active
or scheduled and has no extension in payment-pending, from 56 days to 1 hour before its end, by whole days up to 14
days and by whole weeks up to 182 days; its reservation id stays. An extension stays payment-pending until it is paid;
unpaid 12 hours after its purchase or 35 minutes before the block's end, whichever comes first, it fails
(payment-failed) and the block ends at its old end.
"""

from __future__ import annotations

import datetime as dt

from trainium_cdk.errors import ConfigError

# The block's states (DescribeCapacityReservations State of a ReservationType capacity-block).
PAYMENT_PENDING, PAYMENT_FAILED, SCHEDULED, ACTIVE, EXPIRED = (
    "payment-pending", "payment-failed", "scheduled", "active", "expired",
)
# An extension's statuses (DescribeCapacityBlockExtensionHistory CapacityBlockExtensionStatus).
EXTENSION_PENDING, EXTENSION_FAILED, EXTENSION_PAID = "payment-pending", "payment-failed", "payment-succeeded"

TERMINATION_LEAD = dt.timedelta(minutes=30)  # EC2 starts terminating the block's instances this long before its end
EXPIRATION_WARNING_LEAD = dt.timedelta(minutes=40)  # the "Expiration Warning" event, this long before the end

EXTENDABLE_STATES = (ACTIVE, SCHEDULED)
EXTEND_LATEST = dt.timedelta(hours=1)  # an extension is bought at least this long before the block's end
EXTEND_EARLIEST = dt.timedelta(days=56)  # and at most this long before it
DAY_STEPS_UP_TO = 14  # extensions of 1 to 14 whole days
WEEK_STEPS_UP_TO = 182  # then whole weeks up to 182 days (26 weeks)
EXTENSION_STEPS = f"1 to {DAY_STEPS_UP_TO} days, or a multiple of 7 up to {WEEK_STEPS_UP_TO} (EC2's extension steps)"

PAYMENT_WINDOW = dt.timedelta(hours=12)  # an extension unpaid this long after its purchase fails
PAYMENT_CUTOFF = dt.timedelta(minutes=35)  # and so does one still unpaid this long before the block's end


def extension_days(value: str) -> int:
    """The days of an extension as a user types them (``--days``), or a ConfigError naming the allowed steps."""
    try:
        days = int(value)
    except ValueError:
        raise ConfigError("--days", value, f"a whole number of days: {EXTENSION_STEPS}") from None
    if days < 1 or days > WEEK_STEPS_UP_TO or (days > DAY_STEPS_UP_TO and days % 7):
        raise ConfigError("--days", days, EXTENSION_STEPS)
    return days


def termination_starts(end: dt.datetime) -> dt.datetime:
    """When EC2 starts terminating the instances of a block that ends at ``end``."""
    return end - TERMINATION_LEAD


def payment_deadline(purchased: dt.datetime | None, block_end: dt.datetime) -> dt.datetime:
    """The last moment an extension bought at ``purchased`` can be paid, for a block that now ends at ``block_end``."""
    cutoff = block_end - PAYMENT_CUTOFF
    return cutoff if purchased is None else min(purchased + PAYMENT_WINDOW, cutoff)
