"""`trn block list/status/extend` (issue 47): the config's Capacity Blocks as EC2 tells them, and an extension bought
only once the user says yes.

moto implements no Capacity Block call: EC2 is answered at the AWS edge (tests/support/capacity_blocks.py), each
answer checked against botocore's model, and every request the verb sends is asserted whole and against the model."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest

from tests.support.capacity_blocks import (
    BLOCK,
    END,
    NOW,
    OTHER_BLOCK,
    START,
    answer,
    assert_valid_requests,
    block,
    extension,
    history,
    reservations,
)
from tests.support.cli_support import assert_one_clean_line, run_cli, write_config
from trainium_cdk.cli import jobs

CONFIG = f"""\
project: trainium
region: us-west-2
backends: [eks]
compute_groups:
  - name: train
    instance_type: trn1.32xlarge
    nodes: 2
    max_nodes: 4
    az_ids: usw2-az4
    capacity: {{type: capacity-block, reservation_id: {BLOCK}}}
  - name: eval
    instance_type: trn1.32xlarge
    nodes: 1
    az_ids: usw2-az4
"""
# A second block, for the week after.
TWO_BLOCKS = CONFIG + f"""\
  - name: big
    instance_type: trn1.32xlarge
    nodes: 4
    az_ids: usw2-az4
    capacity: {{type: capacity-block, reservation_id: {OTHER_BLOCK}}}
"""
NEXT_WEEK = dt.timedelta(days=7)
OFFERING = {
    "CapacityBlockExtensionOfferingId": "cbe-0aaaaaaaaaaaaaaa1", "InstanceType": "trn1.32xlarge", "InstanceCount": 4,
    "AvailabilityZone": "us-west-2d", "AvailabilityZoneId": "usw2-az4", "StartDate": START,
    "CapacityBlockExtensionStartDate": END, "CapacityBlockExtensionEndDate": END + dt.timedelta(days=2),
    "CapacityBlockExtensionDurationHours": 48, "UpfrontFee": "4128.00", "CurrencyCode": "USD", "Tenancy": "default",
}


def purchased(params: dict) -> dict:
    """PurchaseCapacityBlockExtension's answer: the offering's extension, payment-pending from NOW."""
    return {"CapacityBlockExtensions": [{
        **{k: v for k, v in OFFERING.items() if k not in ("StartDate", "Tenancy")},
        "CapacityReservationId": params["CapacityReservationId"], "CapacityBlockExtensionStatus": "payment-pending",
        "CapacityBlockExtensionPurchaseDate": NOW}]}


class Terminal(io.StringIO):
    """What the user types at a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def ec2(aws, monkeypatch):
    """The account at NOW: block `train` active from START to END, no extension yet."""
    monkeypatch.setattr(jobs.CLOCK, "now", lambda: NOW)
    reservations(aws, block(), block(OTHER_BLOCK, State="scheduled", StartDate=START + NEXT_WEEK,
                                     EndDate=END + NEXT_WEEK, AvailableInstanceCount=0))
    history(aws)
    answer(aws, "DescribeCapacityBlockExtensionOfferings", {"CapacityBlockExtensionOfferings": [OFFERING]})
    answer(aws, "PurchaseCapacityBlockExtension", purchased)
    yield aws
    assert_valid_requests(aws)


@pytest.fixture
def config(tmp_path) -> Path:
    return write_config(tmp_path, CONFIG)


def ops(aws) -> list[str]:
    return [op for _, op, _ in aws.calls]


# -- list ---------------------------------------------------------------------------------------------------------

def test_list_prints_every_block_with_its_hours_left(ec2, tmp_path):
    result = run_cli("block", "list", "--config", str(write_config(tmp_path, TWO_BLOCKS)))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "capacity blocks of trainium in us-west-2, at 2026-12-08 12:00 UTC:"
    assert lines[1].split() == ["GROUP", "BLOCK", "STATE", "START", "END", "INSTANCES", "HOURS", "LEFT"]
    # Active since 11:30, ends in two days at 11:30: 47.5 hours left. The scheduled one has all its 48 to come.
    assert lines[2].split() == ["train", BLOCK, "active", "2026-12-08", "11:30", "UTC", "2026-12-10", "11:30", "UTC",
                                "4", "x", "trn1.32xlarge", "47.5"]
    assert lines[3].split() == ["big", OTHER_BLOCK, "scheduled", "2026-12-15", "11:30", "UTC", "2026-12-17", "11:30",
                                "UTC", "4", "x", "trn1.32xlarge", "48.0"]
    assert len(lines) == 4  # the on-demand group `eval` has no block
    assert ec2.calls == [("ec2", "DescribeCapacityReservations", {"CapacityReservationIds": [BLOCK]}),
                         ("ec2", "DescribeCapacityReservations", {"CapacityReservationIds": [OTHER_BLOCK]})]


def test_list_one_group_and_a_block_ec2_does_not_know(ec2, tmp_path):
    path = write_config(tmp_path, TWO_BLOCKS.replace(OTHER_BLOCK, "cr-0000000000000000d"))
    result = run_cli("block", "list", "--config", str(path), "--group", "big")
    assert result.code == 1
    assert result.out.splitlines()[2].split() == ["big", "cr-0000000000000000d", "not", "found", "-", "-", "-", "-"]
    assert "not found in us-west-2 for this account: cr-0000000000000000d" in result.out
    assert ec2.of("DescribeCapacityReservations") == [{"CapacityReservationIds": ["cr-0000000000000000d"]}]


@pytest.mark.parametrize(("argv", "words"), [
    (("list", "--group", "eval"), ["--group", "'eval'", "a capacity-block group", "allowed: train"]),
    (("list", "--group", "nope"), ["--group", "'nope'", "allowed: train"]),
    (("status", "--group", "eval"), ["--group", "'eval'", "allowed: train"]),
    (("extend", "--group", "eval", "--days", "1"), ["--group", "'eval'", "allowed: train"]),
])
def test_a_group_without_a_block_is_one_clean_line(ec2, config, argv, words):
    assert_one_clean_line(run_cli("block", *argv, "--config", str(config)), *words)
    assert ec2.calls == []


def test_a_config_without_blocks_says_how_to_name_one(ec2, tmp_path):
    path = write_config(tmp_path, CONFIG.replace(f"    capacity: {{type: capacity-block, reservation_id: {BLOCK}}}\n",
                                                 ""))
    assert_one_clean_line(run_cli("block", "list", "--config", str(path)), "no capacity-block group",
                          "capacity: {type: capacity-block, reservation_id: cr-...}")


# -- status -------------------------------------------------------------------------------------------------------

def test_status_of_an_active_block_says_when_ec2_starts_terminating(ec2, config):
    result = run_cli("block", "status", "--config", str(config))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == f"capacity block {BLOCK} (active, 4 x trn1.32xlarge in usw2-az4), group train, 4 free"
    assert lines[1].split() == ["start", "2026-12-08", "11:30", "UTC", "(30", "min", "ago)"]
    assert lines[2].split() == ["end", "2026-12-10", "11:30", "UTC", "(in", "47", "h", "30", "min)"]
    # 30 minutes before the end.
    assert lines[3].startswith("  terminating  2026-12-10 11:00 UTC (in 47 h 0 min): EC2 starts terminating")
    assert lines[4].split() == ["hours", "left", "47.5", "(190.0", "instance-hours)"]
    assert lines[5] == ("next: nodes can launch now; EC2 starts terminating them in 47 h 0 min: checkpoint before "
                        "then, or extend the block (`trn block extend --group train --days N`, until 2026-12-10 "
                        "10:30 UTC)")
    assert ec2.calls == [("ec2", "DescribeCapacityReservations", {"CapacityReservationIds": [BLOCK]}),
                         ("ec2", "DescribeCapacityBlockExtensionHistory", {"CapacityReservationIds": [BLOCK]})]


def test_status_shows_an_extension_waiting_for_payment_and_its_deadline(ec2, config):
    # Bought an hour ago: EC2 gives it 12 hours to be paid (the block ends later than that).
    history(ec2, extension(CapacityBlockExtensionStatus="payment-pending"))
    result = run_cli("block", "status", "--config", str(config))
    assert result.code == 0, result.err
    ext = next(line for line in result.out.splitlines() if line.strip().startswith("extension"))
    assert ext.split(None, 1)[1] == (
        "+48 h, 2026-12-10 11:30 UTC to 2026-12-12 11:30 UTC: payment-pending, 4,100.00 USD (bought 2026-12-08 11:00 "
        "UTC); to be paid by 2026-12-08 23:00 UTC (in 11 h 0 min), else the block ends at 2026-12-10 11:30 UTC")
    assert "next: an extension waits for its payment until 2026-12-08 23:00 UTC" in result.out


def test_an_extension_bought_late_must_be_paid_35_minutes_before_the_end(ec2, config, monkeypatch):
    """12 hours after the purchase, or 35 minutes before the block's end, whichever comes first."""
    late = END - dt.timedelta(hours=3)
    monkeypatch.setattr(jobs.CLOCK, "now", lambda: late)
    history(ec2, extension(CapacityBlockExtensionStatus="payment-pending", CapacityBlockExtensionPurchaseDate=late))
    result = run_cli("block", "status", "--config", str(config))
    assert "to be paid by 2026-12-10 10:55 UTC (in 2 h 25 min)" in result.out


def test_status_of_a_scheduled_block_says_when_it_starts(ec2, tmp_path):
    result = run_cli("block", "status", "--group", "big", "--config", str(write_config(tmp_path, TWO_BLOCKS)))
    assert result.code == 0, result.err
    assert "next: it starts in 6 d 23 h: the group's nodes can launch from then, not before" in result.out
    assert ec2.of("DescribeCapacityReservations") == [{"CapacityReservationIds": [OTHER_BLOCK]}]


def test_status_with_two_blocks_asks_which(ec2, tmp_path):
    result = run_cli("block", "status", "--config", str(write_config(tmp_path, TWO_BLOCKS)))
    assert_one_clean_line(result, "pass --group NAME", "train, big")
    assert ec2.calls == []


def test_status_of_a_block_ec2_does_not_know(ec2, tmp_path):
    path = write_config(tmp_path, CONFIG.replace(BLOCK, "cr-0000000000000000d"))
    assert_one_clean_line(run_cli("block", "status", "--config", str(path)), "cr-0000000000000000d",
                          "does not exist in us-west-2", "capacity.reservation_id")


# -- extend -------------------------------------------------------------------------------------------------------

def bought(aws) -> list[dict]:
    return aws.of("PurchaseCapacityBlockExtension")


def test_extend_with_yes_prints_the_offering_and_buys_it(ec2, config):
    result = run_cli("block", "extend", "--group", "train", "--days", "2", "--yes", "--config", str(config))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == f"extension of capacity block {BLOCK} (group train) by 2 day(s), 48 h, 4 x trn1.32xlarge:"
    assert lines[1].split() == ["end", "2026-12-10", "11:30", "UTC", "->", "2026-12-12", "11:30", "UTC"]
    # 4,128 USD for 48 h x 4 instances: 21.50 an instance-hour.
    assert lines[2].strip() == "upfront fee  4,128.00 USD (21.50 USD per instance-hour), charged when bought"
    assert "by 2026-12-09 00:00 UTC at the latest" in lines[3]
    assert lines[4].startswith(f"bought: the extension of {BLOCK} to 2026-12-12 11:30 UTC is payment-pending: EC2 "
                               "must take 4,128.00 USD by 2026-12-09 00:00 UTC")
    assert ec2.calls == [
        ("ec2", "DescribeCapacityReservations", {"CapacityReservationIds": [BLOCK]}),
        ("ec2", "DescribeCapacityBlockExtensionHistory", {"CapacityReservationIds": [BLOCK]}),
        ("ec2", "DescribeCapacityBlockExtensionOfferings",
         {"CapacityBlockExtensionDurationHours": 48, "CapacityReservationId": BLOCK}),
        ("ec2", "PurchaseCapacityBlockExtension",
         {"CapacityBlockExtensionOfferingId": "cbe-0aaaaaaaaaaaaaaa1", "CapacityReservationId": BLOCK}),
    ]


def test_extend_buys_after_yes_at_the_terminal(ec2, config, monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr("sys.stdin", Terminal("yes\n"))
    result = run_cli("block", "extend", "--group", "train", "--days", "2", "--config", str(config))
    assert result.code == 0, result.err
    assert "Buy it for 4,128.00 USD? Type yes to buy: bought:" in result.out
    assert len(bought(ec2)) == 1


@pytest.mark.parametrize("typed", ["no\n", "\n", "yes please\n", ""])
def test_extend_buys_nothing_without_a_yes(ec2, config, monkeypatch, typed):
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr("sys.stdin", Terminal(typed))
    result = run_cli("block", "extend", "--group", "train", "--days", "2", "--config", str(config))
    assert result.code == 1
    assert result.out.endswith("not bought\n")
    assert bought(ec2) == []


def test_extend_from_a_script_without_yes_refuses_even_a_piped_yes(ec2, config, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    result = run_cli("block", "extend", "--group", "train", "--days", "2", "--config", str(config))
    assert_one_clean_line(result, "not bought", "--yes")
    assert "upfront fee  4,128.00 USD" in result.out  # the offering was shown
    assert bought(ec2) == []


@pytest.mark.parametrize(("days", "hours"), [("1", 24), ("14", 336), ("21", 504), ("182", 4368)])
def test_extend_asks_for_the_days_in_hours(ec2, config, days, hours):
    run_cli("block", "extend", "--group", "train", "--days", days, "--config", str(config))
    assert ec2.of("DescribeCapacityBlockExtensionOfferings") == [
        {"CapacityBlockExtensionDurationHours": hours, "CapacityReservationId": BLOCK}]


@pytest.mark.parametrize("days", ["0", "15", "20", "183", "189", "-7", "2.5", "two"])
def test_days_off_ec2_s_steps_are_one_line_before_any_call(ec2, config, days):
    result = run_cli("block", "extend", "--group", "train", "--days", days, "--yes", "--config", str(config))
    assert_one_clean_line(result, "--days", days, "1 to 14 days, or a multiple of 7 up to 182")
    assert ec2.calls == []


@pytest.mark.parametrize(("argv", "flag"), [(("--days", "2"), "--group"), (("--group", "train"), "--days")])
def test_extend_needs_the_group_and_the_days(ec2, config, argv, flag):
    assert_one_clean_line(run_cli("block", "extend", *argv, "--config", str(config)), f"pass {flag}")
    assert ec2.calls == []


def test_no_offering_is_one_line_and_nothing_bought(ec2, config):
    answer(ec2, "DescribeCapacityBlockExtensionOfferings", {"CapacityBlockExtensionOfferings": []})
    result = run_cli("block", "extend", "--group", "train", "--days", "7", "--yes", "--config", str(config))
    assert result.code == 1
    assert result.err.strip().splitlines() == [
        f"trn block: EC2 offers no extension of 7 day(s) for {BLOCK} now (no capacity to add): try fewer days or "
        "later; nothing was bought"]
    assert bought(ec2) == []


@pytest.mark.parametrize(("changes", "words"), [
    ({"State": "expired"}, "EC2 extends an active or scheduled block"),
    ({"State": "payment-pending"}, "EC2 extends an active or scheduled block"),
    ({"EndDate": NOW + dt.timedelta(minutes=50)}, "until 1 hour before its end"),
    ({"StartDate": NOW + dt.timedelta(days=60), "EndDate": NOW + dt.timedelta(days=62), "State": "scheduled"},
     "from 56 days before its end"),
    ({"ReservationType": "default"}, "not a capacity block"),
])
def test_a_block_ec2_would_not_extend_is_refused_before_asking_for_offerings(ec2, config, changes, words):
    reservations(ec2, block(**changes))
    assert_one_clean_line(run_cli("block", "extend", "--group", "train", "--days", "1", "--yes", "--config",
                                  str(config)), BLOCK, words)
    assert ops(ec2) == ["DescribeCapacityReservations"]


def test_an_extension_still_unpaid_is_refused(ec2, config):
    history(ec2, extension(CapacityBlockExtensionStatus="payment-pending"))
    result = run_cli("block", "extend", "--group", "train", "--days", "1", "--yes", "--config", str(config))
    assert_one_clean_line(result, "still payment-pending", "to be paid by 2026-12-08 23:00 UTC")
    assert ops(ec2) == ["DescribeCapacityReservations", "DescribeCapacityBlockExtensionHistory"]


# -- the docs ------------------------------------------------------------------------------------------------------

def test_the_docs_transcript_is_what_trn_block_prints(ec2, config, monkeypatch):
    """docs/concepts/backends/eks.md, 'Following a block': each command as typed, what it prints, the user's yes."""
    from tests.support.cli_support import readme_transcript, run_transcript

    extensions: list[dict] = []  # the block's history: what the transcript buys

    def purchase(params: dict) -> dict:
        answered = purchased(params)
        extensions.extend(answered["CapacityBlockExtensions"])
        return answered

    answer(ec2, "DescribeCapacityBlockExtensionHistory", lambda params: {"CapacityBlockExtensions": extensions})
    answer(ec2, "PurchaseCapacityBlockExtension", purchase)
    monkeypatch.setenv("TRN_CONFIG", str(config))
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr("sys.stdin", Terminal("yes\n"))
    steps = readme_transcript("$ trn block list")
    assert [command for command, _ in steps] == [
        "trn block list", "trn block status", "trn block extend --group train --days 2", "trn block status"]
    # The terminal shows the typed yes after the question, and its newline.
    run_transcript(steps, lambda result: result.out.replace("Type yes to buy: ", "Type yes to buy: yes\n").splitlines())
    assert len(bought(ec2)) == 1
