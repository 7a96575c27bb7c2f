"""TrainiumBatch with teams (issue 46): a fair-share job queue whose scheduling policy weighs each team's share
identifier by its share; without shares, today's FIFO queue under its old id and name."""

from __future__ import annotations

import pytest

from tests.unit.constructs.test_constructs_alone import TRN1, synth_alone
from trainium_cdk import ConfigError, GroupNodes, TrainiumBatch
from trainium_cdk.constructs.batch_queue import weight_factors


def _queue(shares=None, keep=None):
    def build(stack, imported):
        return TrainiumBatch(stack, "Queue", group=GroupNodes("pretrain", TRN1, max_nodes=2), vpc=imported.vpc,
                             subnets=[imported.subnet], security_groups=[imported.efa_group], name_prefix="ml",
                             shares=shares)
    return synth_alone(build)


def _of(template, kind):
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def test_shares_make_a_fair_share_queue_weighing_each_team():
    built, template = _queue({"research": 3, "platform_eng": 1})
    # What the stack's outputs, its failed-job rule and its submit command name: the new queue's name (they named
    # the FIFO queue's before, which no longer exists).
    assert built.job_queue_name == "ml-pretrain-teams"
    ((policy_id, policy),) = _of(template, "AWS::Batch::SchedulingPolicy").items()
    # Batch's weight factor: lower gets more. Share 3 against 1: research 1.0, platform 3.0 (a third of the nodes).
    assert policy["Properties"]["FairsharePolicy"] == {
        "ShareDecaySeconds": 86400,
        "ShareDistribution": [{"ShareIdentifier": "platform_eng", "WeightFactor": 3},
                              {"ShareIdentifier": "research", "WeightFactor": 1}],
    }
    ((queue_id, queue),) = _of(template, "AWS::Batch::JobQueue").items()
    assert queue["Properties"]["SchedulingPolicyArn"] == {"Fn::GetAtt": [policy_id, "Arn"]}
    # A new queue (a FIFO queue takes no policy later), under a name the old one does not hold.
    assert queue_id.startswith("QueueFairShareJobQueue") and queue["Properties"]["JobQueueName"] == "ml-pretrain-teams"
    # A job that cannot get its instances is still cancelled after the runnable timeout (one action per reason).
    assert len(queue["Properties"]["JobStateTimeLimitActions"]) == 3


def test_without_shares_the_queue_stays_fifo_under_its_old_id_and_name():
    _, template = _queue()
    assert not _of(template, "AWS::Batch::SchedulingPolicy")
    ((queue_id, queue),) = _of(template, "AWS::Batch::JobQueue").items()
    assert queue_id.startswith("QueueJobQueue") and queue["Properties"]["JobQueueName"] == "ml-pretrain"
    assert "SchedulingPolicyArn" not in queue["Properties"]


@pytest.mark.parametrize(("shares", "factors"), [
    ({"a": 1, "b": 1}, {"a": 1.0, "b": 1.0}),
    ({"a": 4, "b": 1, "c": 2}, {"a": 1.0, "b": 4.0, "c": 2.0}),
    ({"a": 3, "b": 2}, {"a": 1.0, "b": 1.5}),
    ({"a": 999, "b": 1}, {"a": 1.0, "b": 999.0}),
])
def test_weight_factors_give_more_to_a_larger_share(shares, factors):
    assert weight_factors(shares) == factors


@pytest.mark.parametrize("shares", [{}, {"a": 0}, {"a": 1000, "b": 1}])
def test_weight_factors_refuse_what_batch_cannot_take(shares):
    with pytest.raises(ConfigError) as err:
        weight_factors(shares)
    assert err.value.field == "shares"
