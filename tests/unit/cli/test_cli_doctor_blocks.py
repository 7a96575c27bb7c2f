"""`trn doctor` on a config with a Capacity Block (issue 47): a block that ends within a day says when EC2 starts
terminating its instances and how to extend it; an extension still to be paid says by when. The block is read as
`trn block` reads it (trainium_cdk/cli/reservations.py), EC2 answered at the edge (moto has no Capacity Block call)."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support.capacity_blocks import BLOCK, assert_valid_requests, block, extension, history, reservations
from tests.support.cli_support import client_error
from tests.unit.cli.test_cli_doctor import config_file, doctor, fix_after, line, machine, ready  # noqa: F401
from trainium_cdk.cli.reservations import when

BLOCK_GROUP = {"capacity": {"type": "capacity-block", "reservation_id": BLOCK}}


def minute(delta: dt.timedelta) -> dt.datetime:
    """Now plus ``delta``, to the minute (as EC2's dates are), so that the lines printed are known to the minute."""
    return (dt.datetime.now(dt.UTC) + delta).replace(second=0, microsecond=0)


@pytest.fixture
def blocks(ready):
    yield ready
    assert_valid_requests(ready)


def test_a_block_far_from_its_end_passes_and_its_extensions_are_read(blocks, tmp_path):
    start, end = minute(-dt.timedelta(hours=1)), minute(dt.timedelta(days=3))
    reservations(blocks, block(StartDate=start, EndDate=end))
    history(blocks, extension(CapacityBlockExtensionStartDate=end - dt.timedelta(days=2), CapacityBlockExtensionEndDate=end))
    result = doctor(config_file(tmp_path, group=BLOCK_GROUP))
    assert result.code == 0, result.out
    assert f"capacity block {BLOCK} (active, 4 x trn1.32xlarge in usw2-az4), 4 free" in line(result, "PASS", "capacity train")
    assert "extension train" not in result.out  # paid: nothing to say
    assert blocks.of("DescribeCapacityReservations") == [{"CapacityReservationIds": [BLOCK]}]
    assert blocks.of("DescribeCapacityBlockExtensionHistory") == [{"CapacityReservationIds": [BLOCK]}]


def test_a_block_ending_within_a_day_says_when_termination_starts(blocks, tmp_path):
    end = minute(dt.timedelta(hours=5))
    reservations(blocks, block(StartDate=end - dt.timedelta(days=1), EndDate=end))
    history(blocks)
    result = doctor(config_file(tmp_path, group=BLOCK_GROUP))
    assert result.code == 0
    warned = line(result, "WARN", "capacity train")
    assert f"ends {when(end)}" in warned
    assert f"EC2 starts terminating its instances at {when(end - dt.timedelta(minutes=30))}" in warned
    assert "`trn block extend --group train --days N`" in fix_after(result, "WARN", "capacity train")


def test_a_reservation_ending_within_a_day_keeps_its_own_advice(blocks, tmp_path):
    end = minute(dt.timedelta(hours=5))
    reservations(blocks, block(ReservationType="default", EndDate=end))
    result = doctor(config_file(tmp_path, group={"capacity": {"type": "reservation", "reservation_id": BLOCK}}))
    assert "instances are terminated when it ends" in fix_after(result, "WARN", "capacity train")
    assert "terminating" not in line(result, "WARN", "capacity train")
    assert blocks.of("DescribeCapacityBlockExtensionHistory") == []  # not a block: no extensions to read


def test_an_extension_waiting_for_payment_says_by_when(blocks, tmp_path):
    end = minute(dt.timedelta(days=3))
    bought = minute(-dt.timedelta(hours=2))
    reservations(blocks, block(StartDate=minute(-dt.timedelta(hours=3)), EndDate=end))
    history(blocks, extension(CapacityBlockExtensionStatus="payment-pending", CapacityBlockExtensionPurchaseDate=bought,
                              CapacityBlockExtensionStartDate=end, CapacityBlockExtensionEndDate=end + dt.timedelta(days=2)))
    result = doctor(config_file(tmp_path, group=BLOCK_GROUP))
    assert result.code == 0
    assert "4 free" in line(result, "PASS", "capacity train")
    warned = line(result, "WARN", "extension train")
    # 12 hours after its purchase: earlier than 35 minutes before the block's end.
    assert f"the extension of {BLOCK} by 48 h (4,100.00 USD) is not paid yet: payment must go through by " \
           f"{when(bought + dt.timedelta(hours=12))}" in warned
    assert f"else it fails and the block ends at {when(end)}" in fix_after(result, "WARN", "extension train")


def test_an_extension_bought_close_to_the_end_must_be_paid_35_minutes_before_it(blocks, tmp_path):
    end = minute(dt.timedelta(hours=4))
    reservations(blocks, block(StartDate=minute(-dt.timedelta(days=1)), EndDate=end))
    history(blocks, extension(CapacityBlockExtensionStatus="payment-pending",
                              CapacityBlockExtensionPurchaseDate=minute(-dt.timedelta(minutes=5))))
    result = doctor(config_file(tmp_path, group=BLOCK_GROUP))
    assert f"payment must go through by {when(end - dt.timedelta(minutes=35))}" in line(result, "WARN", "extension train")
    assert "EC2 starts terminating" in line(result, "WARN", "capacity train")  # and it ends within a day


def test_a_failed_extension_payment_says_the_block_keeps_its_end(blocks, tmp_path):
    end = minute(dt.timedelta(days=2))
    reservations(blocks, block(StartDate=minute(-dt.timedelta(hours=3)), EndDate=end))
    history(blocks, extension(CapacityBlockExtensionStatus="payment-failed"))
    result = doctor(config_file(tmp_path, group=BLOCK_GROUP))
    assert f"failed: the block still ends at {when(end)}" in line(result, "WARN", "extension train")
    assert "trn block extend --group train" in fix_after(result, "WARN", "extension train")


def test_a_denied_extension_history_is_a_warning_naming_the_action(blocks, tmp_path):
    reservations(blocks, block(StartDate=minute(-dt.timedelta(hours=3)), EndDate=minute(dt.timedelta(days=2))))
    blocks.fake("DescribeCapacityBlockExtensionHistory",
                client_error("UnauthorizedOperation", "DescribeCapacityBlockExtensionHistory"))
    result = doctor(config_file(tmp_path, group=BLOCK_GROUP))
    assert result.code == 0
    assert "4 free" in line(result, "PASS", "capacity train")
    assert "ec2:DescribeCapacityBlockExtensionHistory was denied (UnauthorizedOperation)" in line(
        result, "WARN", "extension train")
    assert "allow ec2:DescribeCapacityBlockExtensionHistory" in fix_after(result, "WARN", "extension train")


def test_an_expired_block_fails_and_its_extensions_are_not_asked_for(blocks, tmp_path):
    reservations(blocks, block(State="expired", StartDate=minute(-dt.timedelta(days=3)),
                               EndDate=minute(-dt.timedelta(days=1))))
    result = doctor(config_file(tmp_path, group=BLOCK_GROUP))
    assert result.code == 1
    assert "buy or create a new one" in fix_after(result, "FAIL", "capacity train")
    assert blocks.of("DescribeCapacityBlockExtensionHistory") == []
