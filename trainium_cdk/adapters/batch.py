"""The Batch backend's adapter: the config mapped to each compute group's TrainiumBatch props."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_logs as logs

from trainium_cdk.adapters.groups import GroupNodes, group_nodes
from trainium_cdk.config import ComputeGroup, Config
from trainium_cdk.constructs.batch import DEFAULT_LOG_REMOVAL_POLICY
from trainium_cdk.constructs.defaults import retention
from trainium_cdk.versions import NeuronTrack


@dataclass(frozen=True)
class BatchGroupProps:
    """One compute group's TrainiumBatch props (see TrainiumBatch for each)."""

    nodes: GroupNodes
    job_nodes: int
    image_uri: str | None
    command: Sequence[str] | None
    job_timeout: Duration
    update_timeout: Duration | None
    runnable_timeout: Duration | None
    retry_attempts: int
    log_retention: logs.RetentionDays
    log_removal_policy: RemovalPolicy
    track: NeuronTrack
    precompile_steps: int
    ami_id: str | None


def batch_props(config: Config, group: ComputeGroup) -> BatchGroupProps:
    settings = config.batch
    return BatchGroupProps(
        nodes=group_nodes(config, group),
        job_nodes=group.nodes,
        image_uri=settings.image_uri,
        command=settings.command,
        job_timeout=Duration.minutes(settings.job_timeout_minutes),
        update_timeout=(Duration.minutes(settings.update_timeout_minutes)
                        if settings.update_timeout_minutes is not None else None),
        runnable_timeout=(Duration.minutes(settings.runnable_timeout_minutes)
                          if settings.runnable_timeout_minutes is not None else None),
        retry_attempts=settings.retry_attempts,
        log_retention=retention(settings.log_retention_days),
        log_removal_policy=DEFAULT_LOG_REMOVAL_POLICY,
        track=config.neuron_track,
        precompile_steps=config.neuron.precompile_steps,
        ami_id=settings.ami_id,
    )
