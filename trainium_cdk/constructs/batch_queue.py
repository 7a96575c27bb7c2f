"""A compute group's AWS Batch job queue: first in, first out, or fair share between teams (issue 46)."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_batch as batch
from constructs import Construct

from trainium_cdk.errors import ConfigError

JOB_QUEUE_PRIORITY = 1
# A FIFO queue: a job that cannot get its instances (no capacity, a group too small for it) blocks every job behind
# it. After this long in RUNNABLE for one of those reasons Batch cancels it, and the reason is in its status
# ("Canceled by JobStateTimeLimit action due to reason: CAPACITY:..."; AWS Batch user guide, "Jobs stuck in
# RUNNABLE", whose example waits 4 hours). Batch takes 10 minutes to 1 day.
DEFAULT_RUNNABLE_TIMEOUT = Duration.hours(4)
RUNNABLE_TIMEOUT_RANGE_MINUTES = (10, 1440)
STUCK_REASONS = (
    batch.JobStateTimeLimitActionsReason.INSUFFICIENT_INSTANCE_CAPACITY,
    batch.JobStateTimeLimitActionsReason.COMPUTE_ENVIRONMENT_MAX_RESOURCE,
    batch.JobStateTimeLimitActionsReason.JOB_RESOURCE_REQUIREMENT,
)
# Fair share: the window over which Batch weighs each team's recent use (shareDecaySeconds; 0 is its 10-minute
# minimum, a week its maximum). Training jobs run for hours to days: a day's use counts.
DEFAULT_SHARE_DECAY = Duration.days(1)
# Batch's weight factors: 0.0001 to 999.9999, lower gets more ("a weight factor of 0.125 (1/8) gets 8 times the
# compute resources of 1": AWS Batch user guide, "Fair-share scheduling policies").
MAX_WEIGHT_FACTOR = 999.9999


def weight_factors(shares: Mapping[str, int]) -> dict[str, float]:
    """Batch's weight factor of each share identifier, from shares where more is more: the largest share gets 1,
    a share half as large 2 (half the nodes when both want them)."""
    if not shares or any(not isinstance(v, int) or v < 1 for v in shares.values()):
        raise ConfigError("shares", dict(shares), "share identifiers with a whole share of 1 or more each")
    top = max(shares.values())
    factors = {identifier: round(top / share, 4) for identifier, share in shares.items()}
    if max(factors.values()) > MAX_WEIGHT_FACTOR:
        raise ConfigError("shares", dict(shares), "shares within 1 to 999 times each other (Batch's weight factors "
                          f"run 0.0001 to {MAX_WEIGHT_FACTOR})")
    return factors


def job_queue(
    scope: Construct,
    *,
    name: str | None,
    compute_environment: batch.IComputeEnvironment,
    runnable_timeout: Duration | None,
    shares: Mapping[str, int] | None,
    share_decay: Duration = DEFAULT_SHARE_DECAY,
) -> batch.JobQueue:
    """The queue of ``compute_environment``: FIFO (construct id ``JobQueue``), or with ``shares`` a fair-share queue
    (``FairShareJobQueue``; name it apart from a FIFO queue it replaces: facts.teams.queue_name) whose scheduling policy weighs
    each share identifier by its share. A FIFO queue cancels a job stuck in RUNNABLE after ``runnable_timeout``; a fair-share
    queue too (Batch's job state time limit actions work on both)."""
    environments = [batch.OrderedComputeEnvironment(compute_environment=compute_environment, order=1)]
    actions = _stuck_job_actions(runnable_timeout)
    if not shares:
        return batch.JobQueue(scope, "JobQueue", job_queue_name=name, priority=JOB_QUEUE_PRIORITY,
                              compute_environments=environments, job_state_time_limit_actions=actions)
    policy = batch.FairshareSchedulingPolicy(
        scope, "SchedulingPolicy", share_decay=share_decay,
        shares=[batch.Share(share_identifier=k, weight_factor=v) for k, v in sorted(weight_factors(shares).items())],
    )
    return batch.JobQueue(scope, "FairShareJobQueue", job_queue_name=name,
                          priority=JOB_QUEUE_PRIORITY, compute_environments=environments,
                          job_state_time_limit_actions=actions, scheduling_policy=policy)


def _stuck_job_actions(timeout: Duration | None) -> list[batch.JobStateTimeLimitAction] | None:
    """Cancel a job stuck in RUNNABLE for ``timeout`` for want of instances (one action per reason)."""
    if timeout is None:
        return None
    low, high = RUNNABLE_TIMEOUT_RANGE_MINUTES
    if not low <= timeout.to_minutes() <= high:
        raise ConfigError("runnable_timeout", f"{timeout.to_minutes()} minutes", f"{low} to {high} minutes "
                          "(AWS Batch jobStateTimeLimitActions maxTimeSeconds), or None to wait")
    return [
        batch.JobStateTimeLimitAction(
            action=batch.JobStateTimeLimitActionsAction.CANCEL, max_time=timeout, reason=reason,
            state=batch.JobStateTimeLimitActionsState.RUNNABLE,
        )
        for reason in STUCK_REASONS
    ]
