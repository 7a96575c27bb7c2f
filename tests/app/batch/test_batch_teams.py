"""The Batch stack with teams (issue 46), as the app builds it: every name of a group's queue is the fair-share
queue's, which is the only queue there is (the failed-job rule, the groups output, the submit command)."""

from __future__ import annotations

import json

from tests.support.apps import synthesized
from tests.support.helpers import resources, template_text
from trainium_cdk.facts.names import BATCH_JOB_QUEUE_NAME, BATCH_SUBMIT_JOB, OUTPUT_BATCH_GROUPS, output_key

TEAMS = "trn2.48xlarge+trn2u.48xlarge"  # the variant with two teams (tests/support/apps.py)


def test_every_name_of_a_group_queue_is_the_fair_share_queue_s():
    result = synthesized(TEAMS)
    template = result.template_with_nested("batch")
    stack = result.config.stack_name("batch")
    queues = {q["Properties"]["JobQueueName"] for q in resources(template, "AWS::Batch::JobQueue").values()}
    assert queues == {f"{stack}-trn2-teams", f"{stack}-ultra-teams", f"{stack}_cpu-teams"}
    (rule,) = [r["Properties"] for r in resources(template, "AWS::Events::Rule").values()
               if r["Properties"].get("Description", "").startswith("AWS Batch jobs")]
    watched = [template_text(arn) for arn in rule["EventPattern"]["detail"]["jobQueue"]]
    assert sorted(watched) == sorted(f"arn:<token>:batch:us-east-2:<token>:job-queue/{name}" for name in queues)
    # The groups output (what trn reads): a JSON object joined with the queue's ARN; the literal parts, parsed.
    value = result.template_json("batch")["Outputs"][output_key(OUTPUT_BATCH_GROUPS)]["Value"]
    groups = json.loads("".join(p if isinstance(p, str) else "token" for p in value["Fn::Join"][1]))
    assert {g[BATCH_JOB_QUEUE_NAME] for g in groups.values()} == queues - {f"{stack}_cpu-teams"}
    # The command printed for the AWS CLI names the new queue and the share identifier it requires.
    assert all("-teams --job-definition" in g[BATCH_SUBMIT_JOB] and "--share-identifier TEAM" in g[BATCH_SUBMIT_JOB]
               for g in groups.values())
