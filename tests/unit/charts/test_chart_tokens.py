"""Charts recognise CDK tokens by their encoding, without the CDK: the same answers as Token.is_unresolved."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from trainium_cdk.charts._k8s import check_not_number_token, is_number_token, is_token, placeholder
from trainium_cdk.errors import ConfigError


def _values() -> list[object]:
    stack = cdk.Stack(cdk.App(), "Tokens")
    imported = cdk.Fn.import_value("Value")
    return [
        stack.region,
        imported,
        f"fs-{imported}.fsx",
        [imported],
        [imported, "sg-1"],
        cdk.Fn.split(",", imported),
        cdk.Token.as_list(imported),
        cdk.Token.as_number(imported),
        cdk.Token.as_string(cdk.Token.as_number(imported)),
        cdk.Fn.get_att("Resource", "Attribute"),  # an IResolvable, not a string
        "us-west-2",
        "${Token[",
        "#{Token[x]}",
        ["#{Token[x]}", "b"],
        [],
        ["a"],
        ("a", "b"),
        1200,
        1200.0,
        -1.0e289,
        None,
        True,
    ]


VALUES = _values()


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_is_token_agrees_with_the_cdk(value):
    expected = cdk.Token.is_unresolved(list(value) if isinstance(value, tuple) else value)
    assert is_token(value) is expected, value


def test_dist_placeholders_count_as_tokens():
    assert is_token(placeholder("FSX_FILE_SYSTEM_ID"))
    assert not is_token("${lower}") and not is_token("prefix ${FSX_FILE_SYSTEM_ID}")


def test_number_tokens_are_refused_by_name():
    number = cdk.Token.as_number(cdk.Fn.import_value("Capacity"))
    assert is_number_token(number) and not is_number_token(1200.0) and not is_number_token(1200)
    check_not_number_token("Chart.size", 1200)
    with pytest.raises(ConfigError) as err:
        check_not_number_token("Chart.size", number)
    assert err.value.field == "Chart.size"
