"""Quality gates over every variant the project claims: cdk-nag AwsSolutions and cfn-lint, zero errors.

The shared apps (tests/support/apps.py: every supported instance type once, every backend, both EKS capacity
paths, a data repository, Prometheus metrics everywhere) here, and the variants that take every value of every
config Literal (a capacity reservation and a block, scratch storage, a NAT gateway per AZ with interface endpoints,
the native track...) in tests/unit/config/test_config_literals.py."""

from __future__ import annotations

import pytest
from aws_cdk import aws_s3

from tests.support import apps, helpers
from tests.support.helpers import cfn_lint_errors, config_with, nag_violations, quality_synth, synth
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


def test_the_gates_apps_run_the_cdks_own_validation_and_the_suites_other_synths_skip_it(monkeypatch):
    """aws-cdk-lib checks every template it synthesizes against its own rules (CloudFormationValidatePlugin; cdk.json's
    @aws-cdk/core:validateAgainstDefaultRules makes a finding fail `make synth`). The apps the quality gates read
    (quality_synth: these, the config-literal variants, each linted app) keep it; the suite's other synths, which read
    templates, skip it (0.15 s of each 0.7 s). A bucket name it refuses shows which is which."""
    compose = helpers.compose

    def with_a_bad_bucket(app, config):
        composed = compose(app, config)
        aws_s3.CfnBucket(composed.network, "BadName", bucket_name="Not_A_Bucket_Name")
        return composed

    monkeypatch.setattr(helpers, "compose", with_a_bad_bucket)
    config = config_with(backends=["instance"])
    # cdk-nag aside (it refuses the bucket too), a plain synth writes it: the CDK's own rules did not run.
    assert synth(config, nag=False).template_json("network")["Resources"]["BadName"]
    with pytest.raises(Exception, match="F3031"):  # BucketName does not match its pattern: the CDK's own rule
        quality_synth(config)
