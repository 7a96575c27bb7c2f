"""The AWS Batch backend stack: per compute group a compute environment, a job queue, a job definition.

Each compute group is a nested stack of its own (``Group-<name>``), keyed by the group's name and nothing else:
adding or removing a group never moves another group's resources between templates nor changes their logical
ids (a group's job queue has a fixed name, and CloudFormation creates a moved resource before it deletes the
old one: the move fails on the name; a moved compute environment or job definition is replaced, killing its
jobs). One template per group also keeps every template small whatever the number of groups, up to AWS Batch's
limit of 50 job queues (config validation): a trn2.48xlarge group is a few KiB (tests/app/batch/test_scale_batch.py), the
parent holds the shared roles, the images repository and one nested stack resource per group.
"""

from __future__ import annotations

import shlex

from aws_cdk import CfnOutput, Duration, NestedStack, Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_sns as sns
from constructs import Construct

from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.constructs.alerts import batch_job_failed, batch_job_failed_message, notify
from trainium_cdk.constructs.batch import SCRIPT_PARAMETER, TrainiumBatch
from trainium_cdk.constructs.batch_cpu import BatchCpuQueue
from trainium_cdk.constructs.batch_roles import BatchRoles
from trainium_cdk.constructs.batch_tasks import BatchTaskRules
from trainium_cdk.constructs.nag import acknowledge_default_policy
from trainium_cdk.constructs.network import TrainingNetwork
from trainium_cdk.constructs.observability import NeuronNodeMetrics
from trainium_cdk.constructs.prometheus import MetricsWorkspace
from trainium_cdk.constructs.secrets import grant_secret_read
from trainium_cdk.constructs.storage import LustreStorage
from trainium_cdk.constructs.training_images import TrainingImageRepository
from trainium_cdk.facts import versions
from trainium_cdk.facts.defaults.cdk import retention
from trainium_cdk.facts.names import (
    BATCH_JOB_DEFINITION_ARN,
    BATCH_JOB_DEFINITION_NAME,
    BATCH_JOB_QUEUE_ARN,
    BATCH_JOB_QUEUE_NAME,
    BATCH_LOG_GROUP_NAME,
    BATCH_SUBMIT_JOB,
    OUTPUT_BATCH_CPU,
    OUTPUT_BATCH_GROUPS,
    OUTPUT_DASHBOARD_NAME,
    OUTPUT_TRAINING_IMAGE_REPOSITORY_URI,
)

# The id of a compute group's nested stack: its name only (see the module docstring).
GROUP_STACK_ID = "Group-{name}"
# The CPU queue's nested stack: no group's id ("Group-" first).
CPU_STACK_ID = "CpuQueue"
# The logical id of the repository of the team's own training images: pinned, because a new id would make
# CloudFormation create a second repository and leave the first (retained) with every image in it.
TRAINING_IMAGES_LOGICAL_ID = "TrainingImageRepository"


class BatchStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Config,
        network: TrainingNetwork,
        storage: LustreStorage | None,
        alarm_topic: sns.ITopic,
        metrics_workspace: MetricsWorkspace | None = None,
        **kwargs,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description="trainium-cdk: AWS Batch multi-node parallel training on Trainium",
            **kwargs,
        )
        # One execution role and one job role for every group (the same kind of job): what differs by group (its
        # log group) is named in their policies. Each group's nodes have an instance role of their own (its ECS
        # cluster), in the group's nested stack.
        self.roles = BatchRoles(self, "Roles", description=f"every compute group of {construct_id}")
        if config.hugging_face.token_secret:
            # The recipes' data jobs read the Hugging Face token at run time, by the secret's name: this one only.
            grant_secret_read(self, self.roles.job_role, config.hugging_face.token_secret)
            acknowledge_default_policy(self.roles.job_role, "the Batch jobs' role (the Hugging Face token's secret)")
        # The team's own images (`trn image push --backend batch`): every group's nodes and jobs may pull them, so
        # that a job definition revision with such an image (`trn submit --backend batch --image`) runs.
        self.training_images = TrainingImageRepository(self, "TrainingImages")
        repository = self.training_images.node.default_child
        assert isinstance(repository, ecr.CfnRepository)
        repository.override_logical_id(TRAINING_IMAGES_LOGICAL_ID)
        self.training_images.grant_pull(self.roles.execution_role)
        self.group_stacks: dict[str, NestedStack] = {
            group.name: NestedStack(
                self, GROUP_STACK_ID.format(name=group.name),
                description=f"trainium-cdk: AWS Batch compute group {group.name}",
            )
            for group in config.compute_groups
        }
        self.groups = {
            group.name: _training(
                self.group_stacks[group.name], config, group, network=network, storage=storage,
                name_prefix=construct_id, roles=self.roles,
                prometheus_remote_write=metrics_workspace.remote_write_url if metrics_workspace is not None else None,
            )
            for group in config.compute_groups
        }
        # Depending on its configuration the ECS agent pulls with the execution or the instance role: both may.
        for training in self.groups.values():
            self.training_images.grant_pull(training.instance_role)
            if metrics_workspace is not None:
                # The nodes' Prometheus agents remote-write into the deployment's workspace (prometheus_node.py).
                metrics_workspace.grant_remote_write(training.instance_role)
        self.cpu = self._cpu_queue(config, network, storage, name_prefix=construct_id)
        if any(training.multi_node for training in self.groups.values()):
            self.task_rules = BatchTaskRules(self, "TaskRules", vpc=network.vpc)
        # Every group's nodes publish neuron-monitor's metrics under the stack's name (the Deployment dimension).
        self.metrics = NeuronNodeMetrics(
            self, "NeuronMetrics", deployment=construct_id,
            file_system_id=storage.file_system_id if storage is not None else None, alarm_topic=alarm_topic,
        )
        # The queues' ARNs from their fixed names: no output of the groups' nested stacks to read.
        self.job_failed = notify(
            self, "JobFailed", topic=alarm_topic, message=batch_job_failed_message(),
            pattern=batch_job_failed([
                self.format_arn(service="batch", resource="job-queue", resource_name=name)
                for name in [*(training.job_queue_name for training in self.groups.values()),
                             *([self.cpu.job_queue_name] if self.cpu else [])]
            ]),
            description="AWS Batch jobs of this deployment's queues that FAILED, to the alarm topic",
        )
        CfnOutput(self, OUTPUT_DASHBOARD_NAME, value=self.metrics.dashboard.dashboard_name)
        CfnOutput(
            self, OUTPUT_TRAINING_IMAGE_REPOSITORY_URI, value=self.training_images.repository_uri,
            description="Your training images: `trn image push --backend batch` pushes here",
        )
        # One output for every group (names.OUTPUT_BATCH_GROUPS): six per group would stop at 33 groups.
        CfnOutput(
            self, OUTPUT_BATCH_GROUPS,
            description="Each compute group's job queue, job definition, log group and submit command (JSON)",
            value=self.to_json_string(
                {name: group_entry(config.region, training) for name, training in self.groups.items()}
            ),
        )
        if self.cpu is not None:
            CfnOutput(self, OUTPUT_BATCH_CPU, description="The CPU queue's job queue, job definition and log group (JSON)",
                      value=self.to_json_string(cpu_entry(self.cpu)))

    def _cpu_queue(self, config: Config, network: TrainingNetwork, storage: LustreStorage | None, *,
                   name_prefix: str) -> BatchCpuQueue | None:
        """The CPU queue of the recipes' data jobs (``batch.cpu_instance_type``), in a nested stack of its own, on
        the file system's subnet and open to it; its nodes pull the team's images as the groups' do."""
        instance_type = config.batch.cpu_instance_type
        if instance_type is None:
            return None
        scope = NestedStack(self, CPU_STACK_ID, description="trainium-cdk: AWS Batch CPU queue (data preparation)")
        cpu = BatchCpuQueue(
            scope, "CpuQueue", vpc=network.vpc, subnets=[network.compute_subnet(config.storage_group.name)],
            image_uri=config.batch.image_uri or versions.neuron_public_training_image(config.neuron_track.name),
            instance_type=instance_type, storage=storage, roles=self.roles, name_prefix=name_prefix,
            shares=config.team_shares(),
        )
        if storage is not None:
            storage.connections.allow_default_port_from(cpu)
        self.training_images.grant_pull(cpu.instance_role)
        return cpu


def _training(
    scope: Construct,
    config: Config,
    group: ComputeGroup,
    *,
    network: TrainingNetwork,
    storage: LustreStorage | None,
    name_prefix: str,
    roles: BatchRoles,
    prometheus_remote_write: str | None = None,
) -> TrainiumBatch:
    """One compute group's TrainiumBatch, on the network and file system, its props mapped from the config."""
    settings = config.batch
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
        prometheus_remote_write=prometheus_remote_write,
        roles=roles,
        shares=config.team_shares(),
        group=config.group_nodes(group),
        nodes=group.nodes,
        image_uri=settings.image_uri,
        command=settings.command,
        job_timeout=Duration.minutes(settings.job_timeout_minutes),
        update_timeout=_minutes(settings.update_timeout_minutes),
        runnable_timeout=_minutes(settings.runnable_timeout_minutes),
        retry_attempts=settings.retry_attempts,
        log_retention=retention(settings.log_retention_days),
        track=config.neuron_track,
        precompile_steps=config.neuron.precompile_steps,
        ami_id=settings.ami_id,
    )


def _minutes(minutes: int | None) -> Duration | None:
    return Duration.minutes(minutes) if minutes is not None else None


def cpu_entry(cpu: BatchCpuQueue) -> dict[str, str]:
    """The CPU queue's OUTPUT_BATCH_CPU output (tokens until deploy)."""
    return {
        BATCH_JOB_QUEUE_NAME: cpu.job_queue_name, BATCH_JOB_QUEUE_ARN: cpu.job_queue.job_queue_arn,
        BATCH_JOB_DEFINITION_NAME: cpu.job_definition_name, BATCH_JOB_DEFINITION_ARN: cpu.job_definition.job_definition_arn,
        BATCH_LOG_GROUP_NAME: cpu.log_group.log_group_name,
    }


def group_entry(region: str, training: TrainiumBatch) -> dict[str, str]:
    """One compute group's entry in the OUTPUT_BATCH_GROUPS output (tokens until deploy)."""
    return {
        BATCH_JOB_QUEUE_NAME: training.job_queue_name,
        BATCH_JOB_QUEUE_ARN: training.job_queue.job_queue_arn,
        BATCH_JOB_DEFINITION_NAME: training.job_definition_name,
        BATCH_JOB_DEFINITION_ARN: training.job_definition.job_definition_arn,
        BATCH_LOG_GROUP_NAME: training.log_group.log_group_name,
        BATCH_SUBMIT_JOB: submit_job_command(region, training),
    }


def submit_job_command(region: str, training: TrainiumBatch) -> str:
    """The `aws batch submit-job` command of one compute group (its default script, or the configured one). A
    fair-share queue takes no job without a share identifier: TEAM stands for the submitter's (`trn submit --team`
    fills it in)."""
    parts = [
        "aws batch submit-job",
        f"--region {region}",
        f"--job-name {training.group_name}-training",
        f"--job-queue {training.job_queue_name}",
        f"--job-definition {training.job_definition_name}",
        *(["--share-identifier TEAM --scheduling-priority-override 0"] if training.shares else []),
    ]
    parameters = training.job_definition.parameters
    if parameters and SCRIPT_PARAMETER in parameters:
        parts.append(f"--parameters {SCRIPT_PARAMETER}={shlex.quote(str(parameters[SCRIPT_PARAMETER]))}")
    return " ".join(parts)
