"""Quality gates over every variant the project claims: cdk-nag AwsSolutions and cfn-lint, zero errors."""

from __future__ import annotations

import pytest

from tests.support.helpers import cfn_lint_errors, config_with, for_type, nag_violations, synth
from trainium_cdk.facts.catalog import SUPPORTED_TRAINING_TYPES

VARIANTS = {
    **{f"group of {t}": for_type(t) for t in SUPPORTED_TRAINING_TYPES},
    "data repository, endpoints, per-AZ NAT": {
        "storage": {"data_repository": {"s3_prefix": "data/"}},
        "network": {"az_ids": ["usw2-az4", "usw2-az3"], "interface_endpoints": True, "nat_gateways": "per-az"},
    },
    "Prometheus metrics, every backend": {
        "backends": ["eks", "batch", "parallelcluster", "instance"], "observability": {"prometheus": True},
    },
    "capacity reservation, scratch": {
        "group": {"capacity": {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}},
        "storage": {"deployment_type": "SCRATCH_2", "throughput_mb_per_tib": None, "capacity_gib": 2400},
    },
}


@pytest.fixture(scope="module", params=sorted(VARIANTS), ids=sorted(VARIANTS))
def result(request):
    # cdk-nag runs inside synth: an unacknowledged finding raises here with its report.
    return synth(config_with(**VARIANTS[request.param]))


def test_cdk_nag_reports_nothing_unacknowledged(result):
    assert nag_violations(result) == []


def test_cfn_lint_has_no_errors(result):
    paths = result.template_paths()
    # One template per stack, and Batch's nested stacks (one per compute group) besides.
    assert len([p for p in paths if ".nested." not in p.name]) == len(result.stacks.stacks)
    for path in paths:
        assert cfn_lint_errors(path, result.config.region) == []
