"""Jobs on the AWS Batch backend: multi-node parallel jobs on the deployed ``<project>-batch`` stack.

The job queue and job definition of a compute group come from the stack's one JSON output of every
group (names.OUTPUT_BATCH_GROUPS: group name -> names.BATCH_* fields).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.app.config.fields import image_reference
from trainium_cdk.cli._common import CliError, client, error_code, session, stack_outputs
from trainium_cdk.cli.jobs import (
    CLOCK,
    FAILED,
    POLL_FACTOR,
    POLL_FIRST_S,
    POLL_MAX_S,
    SUCCEEDED,
    TERMINAL,
    Clock,
    JobState,
    UserJob,
    announce,
    chatter,
    default_name,
    on_batch_cpu_queue,
    same_job_flags,
    user_job,
    watch,
)
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import (
    BATCH_JOB_DEFINITION_ARN,
    BATCH_JOB_QUEUE_ARN,
    BATCH_LOG_GROUP_NAME,
    OUTPUT_BATCH_CPU,
    OUTPUT_BATCH_GROUPS,
    output_key,
)
from trainium_cdk.facts.teams import queue_name
from trainium_cdk.runtime.batch_job import (
    BASED_ON_TAG,
    BatchSubmission,
    cpu_resource_name,
    images_of,
    register_request,
    resource_name,
    same_but_image,
)

STACK_PART = "batch"
DEFAULT_LOG_GROUP = "/aws/batch/job"
_BATCH_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_DESCRIBE_MAX = 100


# -- stack outputs -----------------------------------------------------------------------------------


def batch_groups(outputs: Mapping[str, str], *, stack: str) -> dict[str, dict[str, str]]:
    """Every compute group's entry of the batch stack's names.OUTPUT_BATCH_GROUPS output."""
    key = output_key(OUTPUT_BATCH_GROUPS)
    if key not in outputs:
        listed = ", ".join(sorted(outputs)) or "none"
        raise CliError(
            f"stack {stack} has no output {key} (outputs: {listed}): redeploy it with backends: [batch]"
        )
    try:
        groups = json.loads(outputs[key])
    except json.JSONDecodeError as err:
        raise CliError(f"output {key} of stack {stack} is not the JSON the batch stack writes ({err})") from None
    if not isinstance(groups, dict):
        raise CliError(f"output {key} of stack {stack} is not a JSON object of compute groups")
    return groups


def cpu_output_value(outputs: Mapping[str, str], field: str, *, stack: str) -> str:
    """The ``field`` of the CPU queue in the batch stack's names.OUTPUT_BATCH_CPU output."""
    key = output_key(OUTPUT_BATCH_CPU)
    try:
        return str(json.loads(outputs[key])[field])
    except KeyError:
        raise CliError(f"stack {stack} has no CPU queue ({key}: {field}): redeploy it (make deploy), or set "
                       "batch.cpu_instance_type: null to run CPU work on a node of its group") from None
    except (json.JSONDecodeError, TypeError):
        raise CliError(f"output {key} of stack {stack} is not the JSON the batch stack writes") from None


def group_output_value(outputs: Mapping[str, str], field: str, *, group: str, stack: str) -> str:
    """The ``field`` (names.BATCH_JOB_QUEUE_ARN, ...) of compute group ``group`` in the batch stack's
    outputs."""
    groups = batch_groups(outputs, stack=stack)
    key = output_key(OUTPUT_BATCH_GROUPS)
    if group not in groups:
        listed = ", ".join(sorted(groups)) or "none"
        raise CliError(
            f"stack {stack} has no compute group {group} in its output {key} (groups: {listed}): redeploy it "
            "with this group, or pass --group"
        )
    try:
        return str(groups[group][field])
    except (KeyError, TypeError):
        raise CliError(
            f"compute group {group} in output {key} of stack {stack} has no {field}: redeploy {stack}"
        ) from None


# -- submit ------------------------------------------------------------------------------------------


def recipe_job(config: Config, job: UserJob, *, cpu: bool = False) -> UserJob:
    """A job of a recipe (``--job NAME``) as Batch runs it: the recipe's command, and the environment in which
    the recipe's job differs from the group's job definition (its compile cache set, its precompile steps, its own
    variables), the user's --env last. ``cpu``: for the CPU queue, whose job definition sets none: all of it, on
    one node."""
    from trainium_cdk import recipes
    from trainium_cdk.runtime.batch_job import definition_container
    from trainium_cdk.runtime.jobs import JOB_NAME_VARIABLE

    assert job.job is not None
    settings = recipes.job(config, job.job, group=job.group, backend="batch", nodes=job.nodes)
    nodes = 1 if cpu else job.nodes or settings.nodes or job.group.nodes
    wanted = config.job_spec(settings.model_copy(update={"nodes": nodes}), image="recipe").environment()
    deployed = definition_container(config, job.group, cpu=cpu).environment
    env = {k: v for k, v in wanted.items() if deployed.get(k) != v and k != JOB_NAME_VARIABLE}
    return UserJob(group=job.group, nodes=nodes, program=tuple(settings.command), job=job.job, env={**env, **job.env})


def submit(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    job = user_job(args, config)
    image = args.image
    cpu = on_batch_cpu_queue(config, job.job)
    if job.job is not None:
        from trainium_cdk import recipes
        from trainium_cdk.cli.recipe_images import recipe_image

        recipe = recipes.recipe_for(config, job.job, STACK_PART)
        job = recipe_job(config, job, cpu=cpu)
        image = recipe_image(config, recipe, STACK_PART, given=args.image, dry_run=args.dry_run)
    group = job.group
    nodes = job.nodes or group.nodes
    name = args.name or f"{config.project}-{default_name(group)}"
    if not _BATCH_JOB_NAME.fullmatch(name):
        raise ConfigError(
            "--name", name, "a Batch job name: up to 128 letters, digits, '-' and '_', starting alphanumeric"
        )
    if args.image is not None and not image_reference(args.image):
        raise ConfigError("--image", args.image, "an image URI such as 123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1")
    if args.dry_run:
        return _dry_run(config, group, job, name=name, nodes=nodes, image=image, out=out, team=args.team,
                        priority=args.priority or 0, cpu=cpu)
    sess = session(config.region)
    stack = config.stack_name(STACK_PART)
    outputs = stack_outputs(client(sess, "cloudformation"), stack, config.region, backend="batch")
    if cpu:
        queue, definition = (cpu_output_value(outputs, field, stack=stack)
                             for field in (BATCH_JOB_QUEUE_ARN, BATCH_JOB_DEFINITION_ARN))
    else:
        queue = group_output_value(outputs, BATCH_JOB_QUEUE_ARN, group=group.name, stack=stack)
        definition = group_output_value(outputs, BATCH_JOB_DEFINITION_ARN, group=group.name, stack=stack)
    batch = client(sess, "batch")
    described = describe_definition(batch, definition)
    if described is None:
        raise CliError(f"job definition {definition} (output of {stack}) does not exist: redeploy it (make deploy)")
    multinode = described.get("type") != "container"
    if not multinode and nodes > 1:
        raise ConfigError("--nodes", nodes, f"1: job definition {definition} is a single-node (container) job")
    if image is not None and image not in images_of(described):
        definition = revision_for_image(batch, described, image, chatter(args, out, err))
    submission = BatchSubmission(name=name, nodes=nodes, multinode=multinode, program=job.program, env=job.env,
                                 team=args.team, priority=args.priority or 0)
    response = batch.submit_job(**submission.request(queue=queue, definition=definition))
    job_id = response["jobId"]
    where = (f"1 x {config.batch.cpu_instance_type}, the CPU queue" if cpu
             else f"{nodes} x {group.instance_type}, group {group.name}")
    summary = f"submitted {response.get('jobName', name)}: job id {job_id} ({where}{f', team {args.team}' if args.team else ''})"
    announce(args, out, err, job=job_id, summary=summary, backend="batch")
    return 0


def _dry_run(config: Config, group: ComputeGroup, job: UserJob, *, name: str, nodes: int, image: str | None,
             out: TextIO, team: str | None = None, priority: int = 0, cpu: bool = False) -> int:
    """What submit would send, from the config alone (no AWS call): the queue and job definition by name (at
    submit time, the ARNs of the stack's output), and, for a new image, the revision it would register."""
    resource = cpu_resource_name(config) if cpu else resource_name(config, group)
    multinode = True  # the stack's job definitions: multi-node parallel for every type (constructs/batch.py)
    submission = BatchSubmission(name=name, nodes=nodes, multinode=multinode, program=job.program, env=job.env,
                                 team=team, priority=priority)
    out.write(f"dry run: would send to AWS Batch in {config.region} (no AWS call made):\n")
    if image is not None:
        out.write(
            f"RegisterJobDefinition, unless an ACTIVE revision of {resource} already runs this image: the deployed "
            f"revision's properties, with image {image} on every container, tagged {BASED_ON_TAG}=<that revision's "
            f"ARN>; the job then runs on the new revision\n"
        )
    request = submission.request(queue=queue_name(resource, fair_share=bool(config.teams)), definition=resource)
    out.write(f"SubmitJob:\n{json.dumps(request, indent=2)}\n")
    return 0


def describe_definition(batch: Any, definition: str) -> dict[str, Any] | None:
    """The job definition an output names (ARN, name:revision, or a name: its newest ACTIVE revision)."""
    if definition.startswith("arn:") or ":" in definition:
        found = batch.describe_job_definitions(jobDefinitions=[definition]).get("jobDefinitions", [])
    else:
        found = batch.describe_job_definitions(jobDefinitionName=definition, status="ACTIVE").get("jobDefinitions", [])
    return max(found, key=lambda d: d.get("revision", 0)) if found else None


def revision_for_image(batch: Any, deployed: dict[str, Any], image: str, out: TextIO) -> str:
    """The ARN of a revision of the deployed job definition that runs ``image``: one registered before for the
    same deployed revision and image, else a new one (multi-node node overrides cannot change the image)."""
    revisions = batch.describe_job_definitions(
        jobDefinitionName=deployed["jobDefinitionName"], status="ACTIVE"
    ).get("jobDefinitions", [])
    for revision in sorted(revisions, key=lambda d: d.get("revision", 0), reverse=True):
        if ((revision.get("tags") or {}).get(BASED_ON_TAG) == deployed["jobDefinitionArn"]
                and images_of(revision) == {image} and same_but_image(revision, deployed)):
            out.write(f"job definition {revision['jobDefinitionName']}:{revision['revision']} runs {image}: reused\n")
            return str(revision["jobDefinitionArn"])
    registered = batch.register_job_definition(**register_request(deployed, image=image))
    out.write(f"registered job definition {registered['jobDefinitionName']}:{registered['revision']} with image {image}\n")
    return str(registered["jobDefinitionArn"])


# -- status ------------------------------------------------------------------------------------------


def describe(batch: Any, job_ids: Sequence[str]) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    for i in range(0, len(job_ids), _DESCRIBE_MAX):
        jobs += batch.describe_jobs(jobs=list(job_ids[i : i + _DESCRIBE_MAX])).get("jobs", [])
    return jobs


def describe_one(batch: Any, job_id: str, region: str) -> dict[str, Any]:
    jobs = describe(batch, [job_id])
    if not jobs:
        raise CliError(
            f"no AWS Batch job {job_id} in {region}: check the id (Batch forgets jobs about 7 days after they end)"
        )
    return jobs[0]


def job_state(batch: Any, job_id: str, region: str) -> JobState:
    job = describe_one(batch, job_id, region)
    parts = [job.get("jobName", "")]
    node_props = job.get("nodeProperties") or {}
    num_nodes = node_props.get("numNodes")
    if num_nodes:
        parts.append(f"{num_nodes} nodes")
    if job.get("statusReason"):
        parts.append(job["statusReason"])
    exit_code = (job.get("container") or {}).get("exitCode")
    if exit_code is not None and job.get("status") in (SUCCEEDED, FAILED):
        parts.append(f"exit code {exit_code}")
    lines = []
    if num_nodes:
        node_ids = [f"{job_id}#{i}" for i in range(int(num_nodes))]
        for node in sorted(describe(batch, node_ids), key=lambda n: (n.get("nodeDetails") or {}).get("nodeIndex", 0)):
            details = node.get("nodeDetails") or {}
            interfaces = (node.get("container") or {}).get("networkInterfaces") or [{}]
            ip = interfaces[0].get("privateIpv4Address", "")
            main = " main" if details.get("isMainNode") else ""
            lines.append(f"node {details.get('nodeIndex', '?')}{main}: {node.get('status')} {ip}".rstrip())
    return JobState(job.get("status", "UNKNOWN"), ", ".join(p for p in parts if p), lines)


def status(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO, clock: Clock = CLOCK) -> int:
    batch = client(session(config.region), "batch")
    final = watch(
        lambda: job_state(batch, args.job, config.region), out=out, wait=args.wait, label=f"job {args.job}",
        timeout=args.timeout, clock=clock,
    )
    return 1 if final.state == FAILED else 0


def cancel(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    """TerminateJob, which also cancels a job that has not started (CancelJob does only that)."""
    batch = client(session(config.region), "batch")
    job = describe_one(batch, args.job, config.region)
    name, state = job.get("jobName", ""), job.get("status", "UNKNOWN")
    if state in TERMINAL:
        out.write(f"job {args.job} ({name}) is already {state}: nothing to cancel\n")
        return 0
    batch.terminate_job(jobId=args.job, reason=args.reason)
    out.write(f"terminating job {args.job} ({name}, was {state})\n")
    out.write(f"  trn status {args.job} {same_job_flags(args, 'batch')} --wait\n")
    return 0


# -- logs --------------------------------------------------------------------------------------------


def log_target(
    batch: Any, job: dict[str, Any], outputs: Callable[[], Mapping[str, str]], rank: int = 0
) -> tuple[str, str | None]:
    """(log group, log stream of node ``rank`` or None before it starts) of a job."""
    job_id = job["jobId"]
    node_props = job.get("nodeProperties") or {}
    sources = []
    if node_props:
        nodes = int(node_props.get("numNodes") or 1)
        if not 0 <= rank < nodes:
            raise ConfigError("--rank", rank, f"a node of job {job_id}: 0 to {nodes - 1}")
        sources += describe(batch, [f"{job_id}#{rank}"])
    elif rank != 0:
        raise ConfigError("--rank", rank, f"0: job {job_id} is a single-node job")
    if not node_props or rank == int(node_props.get("mainNode", 0)):
        sources.append(job)
    stream = group = None
    for source in sources:
        attempts = reversed(source.get("attempts") or [])
        containers = [source.get("container") or {}] + [a.get("container") or {} for a in attempts]
        for container in containers:
            stream = stream or container.get("logStreamName")
            options = (container.get("logConfiguration") or {}).get("options") or {}
            group = group or options.get("awslogs-group")
    if stream is None:
        return DEFAULT_LOG_GROUP, None
    group = group or _definition_log_group(batch, job.get("jobDefinition")) or _output_log_group(outputs)
    return group or DEFAULT_LOG_GROUP, stream


def _definition_log_group(batch: Any, definition: str | None) -> str | None:
    if not definition:
        return None
    found = batch.describe_job_definitions(jobDefinitions=[definition]).get("jobDefinitions", [])
    for d in found:
        containers = [(d.get("containerProperties") or {})] + [
            r.get("container") or {} for r in (d.get("nodeProperties") or {}).get("nodeRangeProperties", [])
        ]
        for container in containers:
            group = ((container.get("logConfiguration") or {}).get("options") or {}).get("awslogs-group")
            if group:
                return group
    return None


def _output_log_group(outputs: Callable[[], Mapping[str, str]]) -> str | None:
    """The job log group the batch stack names when every group names the same one, or None."""
    try:
        groups = batch_groups(outputs(), stack="")
    except CliError:
        return None
    found = {str(entry.get(BATCH_LOG_GROUP_NAME)) for entry in groups.values() if isinstance(entry, dict)}
    return found.pop() if len(found) == 1 else None


def logs(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO, clock: Clock = CLOCK) -> int:
    from botocore.exceptions import ClientError

    sess = session(config.region)
    batch, cwl = client(sess, "batch"), client(sess, "logs")
    stack = config.stack_name(STACK_PART)
    outputs = lambda: stack_outputs(client(sess, "cloudformation"), stack, config.region, backend="batch")  # noqa: E731
    delay = POLL_FIRST_S
    announced = False
    while True:
        job = describe_one(batch, args.job, config.region)
        group, stream = log_target(batch, job, outputs, args.rank)
        if stream:
            break
        if job.get("status") in (SUCCEEDED, FAILED):
            raise CliError(
                f"job {args.job} is {job['status']} and has no log stream (it never started a container)", code=1
            )
        if not args.follow:
            raise CliError(
                f"job {args.job} is {job.get('status')}: no log stream yet; "
                f"`trn logs {args.job} {same_job_flags(args, 'batch')} --follow` waits for it",
                code=1,
            )
        if not announced:
            err.write(f"waiting for job {args.job} to start ({job.get('status')})...\n")
            announced = True
        clock.sleep(delay)
        delay = min(POLL_MAX_S, delay * POLL_FACTOR)

    token: str | None = None
    ended: str | None = None
    delay = POLL_FIRST_S
    while True:
        request = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
        if token:
            request["nextToken"] = token
        try:
            page = cwl.get_log_events(**request)
        except ClientError as error:
            if error_code(error) != "ResourceNotFoundException":
                raise
            if not args.follow:
                raise CliError(f"log stream {group} {stream} does not exist (yet): try --follow", code=1) from None
            page = {"events": [], "nextForwardToken": token}
        for event in page.get("events", []):
            out.write(event.get("message", "").rstrip("\n") + "\n")
        out.flush()
        new_token = page.get("nextForwardToken")
        if new_token and new_token != token:
            token = new_token
            if page.get("events"):
                delay = POLL_FIRST_S
            continue
        # At the end of the stream.
        if not args.follow:
            return 0
        if ended:
            err.write(f"job {args.job} {ended}\n")
            return 1 if ended == FAILED else 0
        state = describe_one(batch, args.job, config.region).get("status")
        if state in (SUCCEEDED, FAILED):
            ended = state  # read the stream once more: the last lines may land after the job ends
            continue
        clock.sleep(delay)
        delay = min(POLL_MAX_S, delay * POLL_FACTOR)


# -- jobs --------------------------------------------------------------------------------------------

# Every state a Batch job can be in; ListJobs without a filter lists only RUNNING ones.
JOB_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", SUCCEEDED, FAILED)


def queue_jobs(batch: Any, queue: str) -> list[dict[str, Any]]:
    """Every job of ``queue`` Batch still knows, in every state (ListJobs, page by page), newest first."""
    summaries: list[dict[str, Any]] = []
    for status_ in JOB_STATUSES:
        request: dict[str, Any] = {"jobQueue": queue, "jobStatus": status_}
        while True:
            page = batch.list_jobs(**request)
            summaries += page.get("jobSummaryList", [])
            if not page.get("nextToken"):
                break
            request["nextToken"] = page["nextToken"]
    return sorted(summaries, key=lambda s: s.get("createdAt", 0), reverse=True)


def list_jobs(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    """The jobs of the group's queue Batch still knows (about 7 days after they end), newest first."""
    import datetime as dt

    from trainium_cdk.cli._common import table
    from trainium_cdk.cli.jobs import group_of

    group = group_of(config, args.group)
    sess = session(config.region)
    stack = config.stack_name(STACK_PART)
    outputs = stack_outputs(client(sess, "cloudformation"), stack, config.region, backend="batch")
    queue = group_output_value(outputs, BATCH_JOB_QUEUE_ARN, group=group.name, stack=stack)
    summaries = queue_jobs(client(sess, "batch"), queue)
    if not summaries:
        out.write(f"no jobs in queue {queue.rsplit('/', 1)[-1]} (group {group.name})\n")
        return 0
    rows = []
    for s in summaries[: args.limit]:
        created = dt.datetime.fromtimestamp(s["createdAt"] / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S") if s.get(
            "createdAt") else ""
        nodes = str((s.get("nodeProperties") or {}).get("numNodes") or 1)
        rows.append((s["jobId"], s.get("jobName", ""), s.get("status", ""), nodes, created))
    table(rows, ["JOB ID", "NAME", "STATE", "NODES", "SUBMITTED (UTC)"], out)
    return 0
