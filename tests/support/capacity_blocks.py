"""EC2's Capacity Block answers for the CLI tests (no tests here): moto 5.2.5 implements neither
DescribeCapacityReservations nor any Capacity Block call, so the tests answer them at the AWS edge (the ``aws``
fixture's fakes). Each answer is checked against botocore's own model of the operation's output, and
:func:`assert_valid_requests` checks every request sent against the model's input (the fakes answer before botocore
would have validated it): a misspelt field or a wrong type fails the test, as EC2 would fail the call."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import botocore.session
from botocore.validate import validate_parameters

from tests.support.cli_support import AwsCalls

BLOCK = "cr-0123456789abcdef0"
OTHER_BLOCK = "cr-0fedcba9876543210"
NOW = dt.datetime(2026, 12, 8, 12, 0, tzinfo=dt.UTC)
# Capacity Blocks start and end at 11:30 UTC (EC2 User Guide, "Find and purchase Capacity Blocks").
START = dt.datetime(2026, 12, 8, 11, 30, tzinfo=dt.UTC)
END = dt.datetime(2026, 12, 10, 11, 30, tzinfo=dt.UTC)

_EC2 = botocore.session.get_session().get_service_model("ec2")


def block(reservation_id: str = BLOCK, **changes: Any) -> dict[str, Any]:
    """One CapacityReservation of a capacity block as DescribeCapacityReservations writes it: 4 x trn1.32xlarge in
    usw2-az4, active from START to END."""
    r = {
        "CapacityReservationId": reservation_id, "InstanceType": "trn1.32xlarge", "AvailabilityZone": "us-west-2d",
        "AvailabilityZoneId": "usw2-az4", "State": "active", "TotalInstanceCount": 4, "AvailableInstanceCount": 4,
        "ReservationType": "capacity-block", "InstanceMatchCriteria": "targeted", "StartDate": START, "EndDate": END,
        "EndDateType": "limited", "Tenancy": "default", "InstancePlatform": "Linux/UNIX",
    }
    r.update(changes)
    return r


def extension(**changes: Any) -> dict[str, Any]:
    """One CapacityBlockExtension of BLOCK: 2 days after END, 4 instances, 4,100.00 USD, paid."""
    e = {
        "CapacityReservationId": BLOCK, "InstanceType": "trn1.32xlarge", "InstanceCount": 4,
        "AvailabilityZone": "us-west-2d", "AvailabilityZoneId": "usw2-az4",
        "CapacityBlockExtensionOfferingId": "cbe-0123456789abcdef0", "CapacityBlockExtensionDurationHours": 48,
        "CapacityBlockExtensionStatus": "payment-succeeded",
        "CapacityBlockExtensionPurchaseDate": NOW - dt.timedelta(hours=1),
        "CapacityBlockExtensionStartDate": END, "CapacityBlockExtensionEndDate": END + dt.timedelta(days=2),
        "UpfrontFee": "4100.00", "CurrencyCode": "USD",
    }
    e.update(changes)
    return e


def answer(aws: AwsCalls, operation: str, value: dict[str, Any] | Callable[[dict[str, Any]], Any]) -> None:
    """``aws.fake(operation, value)``, each answer first checked against the operation's output shape."""

    def checked(params: dict[str, Any]) -> Any:
        result = value(params) if callable(value) else value
        if isinstance(result, dict):
            validate_parameters(result, _EC2.operation_model(operation).output_shape)
        return result

    aws.fake(operation, checked)


def reservations(aws: AwsCalls, *found: dict[str, Any]) -> None:
    """DescribeCapacityReservations answers each id it is asked for with the reservation of that id in ``found``
    (and InvalidCapacityReservationId.NotFound for another id, as EC2 does)."""
    from tests.support.cli_support import client_error

    by_id = {r["CapacityReservationId"]: r for r in found}

    def describe(params: dict[str, Any]) -> Any:
        missing = [i for i in params["CapacityReservationIds"] if i not in by_id]
        if missing:
            return client_error("InvalidCapacityReservationId.NotFound", "DescribeCapacityReservations",
                                f"The capacity reservation ID '{missing[0]}' does not exist")
        return {"CapacityReservations": [by_id[i] for i in params["CapacityReservationIds"]]}

    answer(aws, "DescribeCapacityReservations", describe)


def history(aws: AwsCalls, *extensions: dict[str, Any]) -> None:
    """DescribeCapacityBlockExtensionHistory of the ids asked for: their extensions among ``extensions``."""
    answer(aws, "DescribeCapacityBlockExtensionHistory", lambda params: {"CapacityBlockExtensions": [
        e for e in extensions if e["CapacityReservationId"] in params.get("CapacityReservationIds", [])]})


def assert_valid_requests(aws: AwsCalls) -> None:
    """Every EC2 request the command sent is one EC2's model accepts."""
    for service, operation, params in aws.calls:
        if service == "ec2":
            validate_parameters(params, _EC2.operation_model(operation).input_shape)
