"""`trn cost --blocks` and `trn usage` on a capacity-block group (issue 47, part 5): the block's fee where EC2 tells
one (its paid extensions', DescribeCapacityBlockExtensionHistory: EC2 tells no fee of a block as first bought), else
the on-demand rate, said in one line. `trn cost` without --blocks stays offline. EC2 is answered at the edge (moto has
no Capacity Block call), answers and requests checked against botocore's model."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from tests.support.capacity_blocks import BLOCK, assert_valid_requests, extension, history
from tests.support.cli_support import client_error, run_cli
from tests.unit.cli.test_cli_usage import HOUR, START, records, teams_config  # noqa: F401

BLOCK_CAPACITY = {"type": "capacity-block", "reservation_id": BLOCK}
# 4,100 USD for 48 h x 4 instances: 21.354 USD a node-hour (on demand, trn1.32xlarge is 21.50).
PAID = extension()


@pytest.fixture
def block_config(default_config):
    def write(*backends: str):
        path = default_config(*backends, name="blocks.yaml")
        raw = yaml.safe_load(path.read_text())
        raw["compute_groups"][0]["capacity"] = BLOCK_CAPACITY
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path

    return write


@pytest.fixture
def ec2(aws):
    yield aws
    assert_valid_requests(aws)


def group_row(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("  compute group train"))


def notes(out: str) -> list[str]:
    return [line for line in out.split("Notes:\n", 1)[1].splitlines() if line.startswith("  compute group train")]


def test_cost_without_blocks_stays_offline_and_says_how_to_read_the_fee(ec2, block_config):
    result = run_cli("cost", "--config", str(block_config("eks")))
    assert result.code == 0, result.err
    assert ec2.calls == []
    assert "$    86.000/h  ($21.500 per node-hour)" in group_row(result.out)
    assert notes(result.out) == ["  compute group train: 4 x trn1.32xlarge: capacity-block: paid up front for the block, "
                                 "shown at the on-demand rate (`trn cost --blocks` reads what EC2 tells of its fee)"]


def test_cost_with_blocks_prices_the_group_at_its_latest_paid_extension_s_fee(ec2, block_config):
    earlier = extension(CapacityBlockExtensionOfferingId="cbe-0000000000000000e", UpfrontFee="1000.00",
                        CapacityBlockExtensionPurchaseDate=PAID["CapacityBlockExtensionPurchaseDate"] - dt.timedelta(days=1),
                        CapacityBlockExtensionStartDate=PAID["CapacityBlockExtensionStartDate"] - dt.timedelta(days=2),
                        CapacityBlockExtensionEndDate=PAID["CapacityBlockExtensionStartDate"])
    unpaid = extension(CapacityBlockExtensionStatus="payment-failed", UpfrontFee="9999.00",
                       CapacityBlockExtensionPurchaseDate=PAID["CapacityBlockExtensionPurchaseDate"] + dt.timedelta(hours=1))
    history(ec2, unpaid, PAID, earlier)
    result = run_cli("cost", "--config", str(block_config("eks")), "--blocks")
    assert result.code == 0, result.err
    assert group_row(result.out).split() == ["compute", "group", "train:", "4", "x", "trn1.32xlarge", "$", "85.417/h",
                                             "($21.354", "per", "node-hour)", "(block", "fee)"]
    assert notes(result.out) == [
        f"  compute group train: 4 x trn1.32xlarge: capacity block {BLOCK}: 21.35 USD per node-hour, the fee of its "
        "latest paid extension (4,100.00 USD for 48 h x 4 instances from 2026-12-10 11:30 UTC); 1 earlier "
        "extension(s) at their own fees; EC2 does not tell the fee of the block as first bought"]
    assert ec2.calls == [("ec2", "DescribeCapacityBlockExtensionHistory", {"CapacityReservationIds": [BLOCK]})]


@pytest.mark.parametrize(("found", "why"), [
    ((), "and it has no extension"),
    ((extension(CapacityBlockExtensionStatus="payment-pending"),), "and it has no paid extension with a fee"),
    ((extension(CurrencyCode="EUR"),), "and it has none paid in USD (fees in EUR are not converted)"),
])
def test_cost_with_blocks_keeps_the_on_demand_rate_where_ec2_tells_no_fee(ec2, block_config, found, why):
    history(ec2, *found)
    result = run_cli("cost", "--config", str(block_config("eks")), "--blocks")
    assert result.code == 0, result.err
    assert "$    86.000/h  ($21.500 per node-hour)" in group_row(result.out)
    assert notes(result.out) == [
        f"  compute group train: 4 x trn1.32xlarge: capacity block {BLOCK}: its fee cannot be read (EC2 tells the fees "
        f"of a block's paid extensions only, {why}): at the on-demand rate"]


def test_cost_with_blocks_denied_says_so_and_keeps_the_on_demand_rate(ec2, block_config):
    ec2.fake("DescribeCapacityBlockExtensionHistory",
             client_error("UnauthorizedOperation", "DescribeCapacityBlockExtensionHistory"))
    result = run_cli("cost", "--config", str(block_config("eks")), "--blocks")
    assert result.code == 0, result.err
    assert "(ec2:DescribeCapacityBlockExtensionHistory was denied (UnauthorizedOperation)): at the on-demand rate" in \
        notes(result.out)[0]
    assert "$    86.000/h" in group_row(result.out)


def test_cost_with_blocks_and_no_block_group_calls_nothing(ec2, default_config):
    result = run_cli("cost", "--config", str(default_config("eks")), "--blocks")
    assert result.code == 0
    assert ec2.calls == []
    assert result.err == "trn cost --blocks: the config has no capacity-block group; every group is at the table's rate\n"


# -- trn usage --------------------------------------------------------------------------------------------------

@pytest.fixture
def block_teams(teams_config):
    raw = yaml.safe_load(teams_config.read_text())
    raw["compute_groups"][0]["capacity"] = BLOCK_CAPACITY
    teams_config.write_text(yaml.safe_dump(raw, sort_keys=False))
    return teams_config


def test_usage_prices_the_hours_inside_a_paid_extension_at_its_fee(records, block_teams):
    opens = dt.datetime.fromtimestamp((START + HOUR) / 1000, dt.UTC)  # an hour after pretrain-1 started
    history(records, extension(CapacityBlockExtensionStartDate=opens,
                               CapacityBlockExtensionEndDate=opens + dt.timedelta(hours=48)))
    result = run_cli("usage", "--config", str(block_teams))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].endswith("(capacity-block groups: below):")
    assert lines[1] == (f"  group train: capacity block {BLOCK}: 21.35 USD per node-hour, the fee of its latest paid "
                        "extension (4,100.00 USD for 48 h x 4 instances from 2026-11-30 01:53 UTC); EC2 does not tell "
                        "the fee of the block as first bought; a job's hours inside its paid extensions at their fees, "
                        "its other hours at the on-demand price")
    # pretrain-1: 2 nodes x (1 h on demand at 21.50 + 2 h at 4100/192): 128.42; eval-1, all inside: 1.5 h x 21.354.
    assert lines[3].split() == ["platform-eng", "1", "1.50", "48.0", "32.03"]
    assert lines[4].split() == ["research", "1", "6.00", "192.0", "128.42"]
    assert records.of("DescribeCapacityBlockExtensionHistory") == [{"CapacityReservationIds": [BLOCK]}]
    assert_valid_requests(records)


def test_usage_says_when_a_block_s_fee_cannot_be_read(records, block_teams):
    history(records)
    result = run_cli("usage", "--config", str(block_teams))
    assert result.code == 0, result.err
    assert result.out.splitlines()[1] == (
        f"  group train: capacity block {BLOCK}: its fee cannot be read (EC2 tells the fees of a block's paid extensions "
        "only, and it has no extension): at the on-demand rate")
    assert result.out.splitlines()[4].split() == ["research", "1", "6.00", "192.0", "129.00"]
