"""Quality gates over every variant the project claims: cdk-nag AwsSolutions and cfn-lint, zero errors.

The shared apps (tests/support/apps.py: every supported instance type once, every backend, both EKS capacity
paths, a data repository, Prometheus metrics everywhere) here, and the variants that take every value of every
config Literal (a capacity reservation and a block, scratch storage, a NAT gateway per AZ with interface endpoints,
the native track...) in tests/unit/config/test_config_literals.py."""

from __future__ import annotations

import pytest

from tests.support import apps
from tests.support.helpers import cfn_lint_errors, nag_violations
from trainium_cdk.facts.catalog import SUPPORTED_TRAINING_TYPES

APPS = sorted(apps.VARIANTS)


def test_the_shared_apps_hold_every_type_and_backend():
    groups = [g for name in apps.VARIANTS for g in apps.VARIANTS[name]["compute_groups"]]
    assert sorted({g["instance_type"] for g in groups}) == sorted(SUPPORTED_TRAINING_TYPES)
    assert {b for v in apps.VARIANTS.values() for b in v["backends"]} == set(apps.ALL_BACKENDS)


@pytest.fixture(scope="module", params=APPS, ids=APPS)
def result(request):
    # cdk-nag runs inside synth: an unacknowledged finding raises here with its report.
    return apps.synthesized(request.param)


def test_cdk_nag_reports_nothing_unacknowledged(result):
    assert nag_violations(result) == []


def test_cfn_lint_has_no_errors(result):
    paths = result.template_paths()
    # One template per stack, and Batch's nested stacks (one per compute group) besides.
    assert len([p for p in paths if ".nested." not in p.name]) == len(result.stacks.stacks)
    for path in paths:
        assert cfn_lint_errors(path, result.config.region) == []
