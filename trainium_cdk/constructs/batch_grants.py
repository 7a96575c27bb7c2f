"""What a user grants on a TrainiumBatch: submitting jobs, and what the ``trn`` CLI reads and does with them.

A mixin of :class:`~trainium_cdk.constructs.batch.TrainiumBatch` (in a module of its own: batch.py is at the
module size limit), with the grant methods aws-cdk-lib's L2s have (``JobDefinition.grantSubmitJob``).
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_batch as batch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs

# Batch's read calls have no resource-level permissions: they take "*" only (Service Authorization Reference,
# "Actions, resources, and condition keys for AWS Batch": DescribeJobs, ListJobs, DescribeJobDefinitions and
# DescribeJobQueues list no resource type). TerminateJob takes a job ARN, which names no queue.
BATCH_READ_ACTIONS = ("batch:DescribeJobs", "batch:ListJobs", "batch:DescribeJobDefinitions", "batch:DescribeJobQueues")
BATCH_CANCEL_ACTIONS = ("batch:TerminateJob",)
# `trn` reads a stack's outputs (the queue, the job definition, the log group) before it calls Batch.
STACK_READ_ACTIONS = ("cloudformation:DescribeStacks",)
# aws-cdk-lib's EcsJobDefinition.grantSubmitJob grants this one action on the job definition and the queue; its
# MultiNodeJobDefinition has no such method, so the same grant is written here.
SUBMIT_ACTIONS = ("batch:SubmitJob",)


class BatchGrants:
    """``grant_*`` methods of a compute group's queue, job definition and job logs."""

    job_queue: batch.JobQueue
    job_definition: batch.MultiNodeJobDefinition
    log_group: logs.LogGroup

    def grant_submit_job(self, grantee: iam.IGrantable, queue: batch.IJobQueue | None = None) -> iam.Grant:
        """Let ``grantee`` submit jobs of this group's job definition: ``batch:SubmitJob`` on the job definition
        and the queue, as aws-cdk-lib's ``EcsJobDefinition.grant_submit_job`` grants it.

        :param grantee: the principal (a role, a user, a function).
        :param queue: the queue the jobs go to. Default: this group's queue.

        A revision ``trn submit --image`` registers is another job definition ARN: this grant does not cover it.
        """
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=list(SUBMIT_ACTIONS),
            resource_arns=[self.job_definition.job_definition_arn, (queue or self.job_queue).job_queue_arn],
        )

    def grant_job_control(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` do what ``trn status``, ``trn jobs``, ``trn logs`` and ``trn cancel`` do with this
        group's jobs: read the stack's outputs, describe and list jobs, job definitions and queues, terminate a
        job, and read the job log group.

        Batch's describe and list calls take no resource but "*", and TerminateJob takes any job of the account
        and region (a job ARN names no queue): an importing app under cdk-nag acknowledges AwsSolutions-IAM5 for
        ``Resource::*`` and the job ARN on the grantee's policy.
        """
        stack = Stack.of(self.job_queue)
        iam.Grant.add_to_principal(grantee=grantee, actions=list(BATCH_READ_ACTIONS), resource_arns=["*"])
        iam.Grant.add_to_principal(
            grantee=grantee, actions=list(BATCH_CANCEL_ACTIONS),
            resource_arns=[stack.format_arn(service="batch", resource="job", resource_name="*")],
        )
        iam.Grant.add_to_principal(grantee=grantee, actions=list(STACK_READ_ACTIONS), resource_arns=[stack.stack_id])
        return self.log_group.grant_read(grantee)
