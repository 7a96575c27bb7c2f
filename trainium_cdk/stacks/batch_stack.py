"""The AWS Batch backend stack: per compute group a compute environment, a job queue, a job definition."""

from __future__ import annotations

import shlex

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from trainium_cdk.config import ComputeGroup, Config
from trainium_cdk.constructs.batch import SCRIPT_PARAMETER, TrainiumBatch
from trainium_cdk.constructs.batch_tasks import BatchTaskRules
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.observability import NeuronNodeMetrics
from trainium_cdk.constructs.storage import LustreStorage
from trainium_cdk.stacks._props import batch_props
from trainium_cdk.names import (
    OUTPUT_JOB_DEFINITION_ARN, OUTPUT_JOB_DEFINITION_NAME, OUTPUT_JOB_QUEUE_ARN, OUTPUT_JOB_QUEUE_NAME,
    OUTPUT_DASHBOARD_NAME, OUTPUT_LOG_GROUP_NAME, OUTPUT_SUBMIT_JOB, group_output,
)


class BatchStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        network: TrainingNetwork,
        storage: LustreStorage | None,
        **kwargs,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="trainium-cdk: AWS Batch multi-node parallel training on Trainium",
            **kwargs,
        )
        self.groups = {
            group.name: _training(self, config, group, network=network, storage=storage, name_prefix=construct_id)
            for group in config.compute_groups
        }
        if any(training.multi_node for training in self.groups.values()):
            self.task_rules = BatchTaskRules(self, "TaskRules", vpc=network.vpc)
        # Every group's nodes publish neuron-monitor's metrics under the stack's name (the Deployment dimension).
        self.metrics = NeuronNodeMetrics(
            self, "NeuronMetrics", deployment=construct_id,
            file_system_id=storage.file_system_id if storage is not None else None,
        )
        CfnOutput(self, OUTPUT_DASHBOARD_NAME, value=self.metrics.dashboard.dashboard_name)
        for name, training in self.groups.items():
            CfnOutput(self, group_output(OUTPUT_JOB_QUEUE_NAME, name), value=training.job_queue_name)
            CfnOutput(self, group_output(OUTPUT_JOB_QUEUE_ARN, name), value=training.job_queue.job_queue_arn)
            CfnOutput(self, group_output(OUTPUT_JOB_DEFINITION_NAME, name), value=training.job_definition_name)
            CfnOutput(self, group_output(OUTPUT_JOB_DEFINITION_ARN, name), value=training.job_definition.job_definition_arn)
            CfnOutput(self, group_output(OUTPUT_LOG_GROUP_NAME, name), value=training.log_group.log_group_name)
            CfnOutput(self, group_output(OUTPUT_SUBMIT_JOB, name), value=submit_job_command(config.region, training))


def _training(
    scope: Construct,
    config: Config,
    group: ComputeGroup,
    *,
    network: TrainingNetwork,
    storage: LustreStorage | None,
    name_prefix: str,
) -> TrainiumBatch:
    """One compute group's TrainiumBatch, on the network and file system, its props mapped from the config."""
    return TrainiumBatch(
        scope,
        f"Batch-{group.name}",
        vpc=network.vpc,
        subnets=network.compute_subnets(group.name),
        security_groups=[network.efa_security_group],
        placement_group=network.placement_group(group.name),
        storage=storage,
        name_prefix=name_prefix,
        metrics_deployment=name_prefix,
        **batch_props(config, group),
    )


def submit_job_command(region: str, training: TrainiumBatch) -> str:
    """The `aws batch submit-job` command of one compute group (its default script, or the configured one)."""
    parts = [
        "aws batch submit-job",
        f"--region {region}",
        f"--job-name {training.group_name}-training",
        f"--job-queue {training.job_queue_name}",
        f"--job-definition {training.job_definition_name}",
    ]
    parameters = training.job_definition.parameters
    if parameters and SCRIPT_PARAMETER in parameters:
        parts.append(f"--parameters {SCRIPT_PARAMETER}={shlex.quote(str(parameters[SCRIPT_PARAMETER]))}")
    return " ".join(parts)
