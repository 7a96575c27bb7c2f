"""Jobs on the ParallelCluster backend: `sbatch`, `scontrol`, `scancel` on the head node through SSM Run Command.

The head node is the ``<project>-parallelcluster`` stack's output; the scripts are
:mod:`trainium_cdk.app.parallelcluster.submit`'s, run as the cluster's OS user.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import replace
from typing import TextIO

from trainium_cdk.app.config import Config
from trainium_cdk.app.parallelcluster.cluster_config import EXAMPLE_SCRIPT_NAME, batch_script_name, queue_name
from trainium_cdk.app.parallelcluster.submit import (
    PARSABLE_SEPARATOR,
    SCRIPTS_DIR,
    SlurmSubmission,
    cancel_script,
    jobs_script,
    log_script,
    status_script,
)
from trainium_cdk.cli._common import CliError, client, deployed_output, session, table
from trainium_cdk.cli.jobs import (
    CLOCK,
    FAILED,
    SUCCEEDED,
    Clock,
    JobState,
    announce,
    default_name,
    group_of,
    same_job_flags,
    user_job,
    watch,
)
from trainium_cdk.cli.ssm_run import LineFilter, checked, parse_chunk, print_log, run, send_request
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import OUTPUT_HEAD_NODE_INSTANCE_ID, output_key

STACK_PART = "parallelcluster"
BACKEND = "parallelcluster"
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")
# Slurm's job states (squeue/scontrol) -> the states `trn status` prints (Batch's words).
SLURM_STATES = {
    "PENDING": "PENDING", "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING",
    "RESV_DEL_HOLD": "PENDING", "CONFIGURING": "STARTING", "RUNNING": "RUNNING", "COMPLETING": "RUNNING",
    "STAGE_OUT": "RUNNING", "SUSPENDED": "SUSPENDED", "STOPPED": "SUSPENDED", "SIGNALING": "RUNNING",
    "COMPLETED": SUCCEEDED, "FAILED": FAILED, "CANCELLED": FAILED, "TIMEOUT": FAILED, "NODE_FAIL": FAILED,
    "OUT_OF_MEMORY": FAILED, "BOOT_FAIL": FAILED, "DEADLINE": FAILED, "PREEMPTED": FAILED,
}


def head_node(config: Config) -> str:
    return deployed_output(config, STACK_PART, OUTPUT_HEAD_NODE_INSTANCE_ID)


def run_on_head_node(config: Config, script: str, *, comment: str, doing: str, clock: Clock = CLOCK) -> str:
    """``script`` on the head node through SSM Run Command; its output (``doing`` names it in an error)."""
    instance = head_node(config)
    ssm = client(session(config.region), "ssm")
    what = f"head node {instance}"
    return checked(run(ssm, instance, script, comment=comment, what=what, clock=clock), what=what, doing=doing)


def _check_job_id(job_id: str) -> str:
    if not _JOB_ID.fullmatch(job_id):
        raise ConfigError("JOB", job_id, "a Slurm job id, such as 101 (as `trn submit` printed it)")
    return job_id


# -- submit ------------------------------------------------------------------------------------------


def submission(args: argparse.Namespace, config: Config) -> SlurmSubmission:
    """The sbatch `trn submit` (and `trn rehearse`) runs for these arguments."""
    job = user_job(args, config)
    if getattr(args, "image", None):
        raise ConfigError(
            "--image", args.image, "left out for ParallelCluster: Slurm jobs run in the nodes' Neuron venv, not in "
            "a container; put your code on /fsx (trn sync) and point --workdir or the script's path at it",
        )
    if job.job is not None:  # a recipe that runs on Slurm: its command from ~/trainium/recipes, its environment
        from trainium_cdk import recipes

        settings = recipes.job(config, job.job, group=job.group, backend=BACKEND, nodes=job.nodes)
        job = replace(job, nodes=job.nodes or settings.nodes, program=tuple(settings.command),
                      env={**settings.env, **job.env})
    group = job.group
    name = getattr(args, "name", None) or default_name(group)
    if not _JOB_NAME.fullmatch(name):
        raise ConfigError("--name", name, "a Slurm job name: up to 128 letters, digits, '.', '-' and '_'")
    program = job.program or (f"~/{SCRIPTS_DIR}/{EXAMPLE_SCRIPT_NAME}",)
    return SlurmSubmission(
        script=batch_script_name(group), name=name, nodes=job.nodes or group.nodes, program=program, env=job.env,
        account=getattr(args, "team", None),
    )


def submit(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    sub = submission(args, config)
    script = sub.head_node_script()
    group = group_of(config, args.group)
    if args.dry_run:
        stack = config.stack_name(STACK_PART)
        request = send_request(f"<{output_key(OUTPUT_HEAD_NODE_INSTANCE_ID)} of {stack}>", script,
                               comment=f"trn submit {sub.name}")
        out.write(f"dry run: would run on the head node through SSM Run Command in {config.region} (no AWS call "
                  f"made):\n{script}SendCommand:\n{json.dumps(request, indent=2)}\n")
        return 0
    said = run_on_head_node(config, script, comment=f"trn submit {sub.name}", doing="sbatch")
    lines = said.strip().splitlines()
    job_id = lines[-1].split(PARSABLE_SEPARATOR)[0].strip() if lines else ""
    if not _JOB_ID.fullmatch(job_id):
        raise CliError(f"sbatch printed no job id: {said.strip()[-300:] or 'nothing'}", code=1)
    team = f", account {sub.account}" if sub.account else ""
    summary = (f"submitted {sub.name}: Slurm job {job_id} ({sub.nodes} x {group.instance_type}, queue "
               f"{queue_name(group)}{team})")
    announce(args, out, err, job=job_id, summary=summary, backend=BACKEND)
    return 0


# -- status ------------------------------------------------------------------------------------------


def parse_status(text: str, job_id: str) -> JobState:
    """The JobState of `status_script`'s output: scontrol's key=value line, else the exit record."""
    fields: dict[str, str] = {}
    record: str | None = None
    for line in text.splitlines():
        if line.startswith("exit="):
            record = (line.split("=", 1)[1].split() or ["?"])[0]
        elif "JobState=" in line:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    if fields:
        raw = fields.get("JobState", "UNKNOWN")
        state = SLURM_STATES.get(raw, raw)
        parts = [fields.get("JobName", ""), f"{fields.get('NumNodes', '?')} nodes", raw.lower()]
        if fields.get("Reason") not in (None, "None"):
            parts.append(fields["Reason"])
        if state in (SUCCEEDED, FAILED):
            parts.append(f"exit code {fields.get('ExitCode', '?')}")
        lines = [f"nodes {fields['NodeList']}"] if fields.get("NodeList") not in (None, "(null)") else []
        return JobState(state, ", ".join(p for p in parts if p), lines)
    if record is not None:
        ended = SUCCEEDED if record == "0" else FAILED
        return JobState(ended, f"ended (exit code {record}; Slurm no longer lists it)")
    raise CliError(
        f"no Slurm job {job_id} on the head node, and no record of it in the home directory: check the id "
        "(`trn jobs`)"
    )


def status(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO, clock: Clock = CLOCK) -> int:
    job_id = _check_job_id(args.job)

    def fetch() -> JobState:
        return parse_status(run_on_head_node(config, status_script(job_id), comment=f"trn status {job_id}", doing="scontrol",
                                 clock=clock), job_id)

    final = watch(fetch, out=out, wait=args.wait, label=f"job {job_id}", timeout=args.timeout, clock=clock)
    return 1 if final.state == FAILED else 0


def cancel(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    job_id = _check_job_id(args.job)
    state = parse_status(run_on_head_node(config, status_script(job_id), comment=f"trn status {job_id}", doing="scontrol"), job_id)
    if state.done:
        out.write(f"job {job_id} is already {state.state}: nothing to cancel\n")
        return 0
    run_on_head_node(config, cancel_script(job_id), comment=f"trn cancel {job_id}", doing="scancel")
    out.write(f"cancelled Slurm job {job_id} (was {state.state})\n")
    out.write(f"  trn status {job_id} {same_job_flags(args, BACKEND)} --wait\n")
    return 0


# -- logs --------------------------------------------------------------------------------------------


def logs(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO, clock: Clock = CLOCK) -> int:
    job_id = _check_job_id(args.job)
    if args.rank < 0:
        raise ConfigError("--rank", args.rank, "a node rank, 0 or more")

    def read(offset: int, size: int) -> tuple[str, int, str]:
        return parse_chunk(run_on_head_node(config, log_script(job_id, offset=offset, size=size), comment=f"trn logs {job_id}",
                                doing="reading the output file", clock=clock))

    def ended() -> str | None:
        state = parse_status(run_on_head_node(config, status_script(job_id), comment=f"trn status {job_id}", doing="scontrol",
                                  clock=clock), job_id)
        return state.state if state.done else None

    return print_log(read, ended, follow=args.follow, lines=LineFilter(f"{args.rank}: "), what=f"job {job_id}",
                     out=out, err=err, clock=clock)


# -- jobs --------------------------------------------------------------------------------------------


def list_jobs(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    group = group_of(config, args.group)
    said = run_on_head_node(config, jobs_script(queue_name(group), limit=args.limit), comment="trn jobs", doing="squeue")
    queued, _, ended = said.partition("--- ended")
    rows: list[tuple[str, ...]] = []
    for line in queued.strip().splitlines():
        job_id, name, state, nodes, submitted = (line.split("|") + [""] * 5)[:5]
        rows.append((job_id, name, SLURM_STATES.get(state, state), nodes, submitted))
    listed = {r[0] for r in rows}
    for line in ended.strip().splitlines():
        record, content, when = (line.split("|") + [""] * 3)[:3]
        code, partition = (content.split() + ["", ""])[:2]
        name, _, job_id = record.removesuffix(".exit").rpartition("-")
        if job_id in listed or not _JOB_ID.fullmatch(job_id) or partition != queue_name(group):
            continue
        rows.append((job_id, name, SUCCEEDED if code == "0" else FAILED, "", when))
    if not rows:
        out.write(f"no jobs of queue {queue_name(group)} on the head node\n")
        return 0
    table(rows[: args.limit], ["JOB ID", "NAME", "STATE", "NODES", "SUBMITTED / ENDED (UTC)"], out)
    return 0


