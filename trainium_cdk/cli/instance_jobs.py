"""Jobs on the development instance: a systemd unit per job, started and read through SSM Run Command.

The instance is the ``<project>-instance`` stack's output; the scripts are :mod:`trainium_cdk.runtime.instance_job`'s.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import replace
from typing import TextIO

from trainium_cdk.app.config import Config
from trainium_cdk.cli._common import CliError, client, deployed_output, session, table
from trainium_cdk.cli.jobs import (
    CLOCK,
    FAILED,
    SUCCEEDED,
    Clock,
    JobState,
    announce,
    default_name,
    user_job,
    watch,
)
from trainium_cdk.cli.ssm_run import LineFilter, checked, parse_chunk, print_log, run, send_request
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import OUTPUT_INSTANCE_ID, output_key
from trainium_cdk.runtime.instance_job import (
    EXAMPLE_SCRIPT,
    InstanceSubmission,
    cancel_script,
    job_environment_of,
    jobs_script,
    log_script,
    status_script,
)

STACK_PART = "instance"
BACKEND = "instance"
# A job's name is a systemd unit's and a folder's: a DNS label, as on EKS.
_JOB_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
# systemd's ActiveState of the job's unit (RemainAfterExit: "active" after a clean exit too).
RUNNING_UNIT_STATES = ("activating", "active", "reloading", "deactivating")


def instance_id(config: Config) -> str:
    return deployed_output(config, STACK_PART, OUTPUT_INSTANCE_ID)


def _run(config: Config, script: str, *, comment: str, doing: str, clock: Clock = CLOCK) -> str:
    instance = instance_id(config)
    what = f"development instance {instance}"
    ssm = client(session(config.region), "ssm")
    return checked(run(ssm, instance, script, comment=comment, what=what, clock=clock), what=what, doing=doing)


def _check_name(name: str, field: str = "job") -> str:
    if not _JOB_NAME.fullmatch(name):
        raise ConfigError(field, name, "a job name: a lower-case DNS label of at most 40 characters (letters, digits, '-')")
    return name


def submission(args: argparse.Namespace, config: Config) -> InstanceSubmission:
    """The unit `trn submit` (and `trn rehearse`) runs for these arguments."""
    job = user_job(args, config)
    if getattr(args, "image", None):
        raise ConfigError("--image", args.image, "left out for the development instance: jobs run in the DLAMI's "
                          "Neuron venv, not in a container")
    if job.job is not None:  # a recipe that runs on the development instance (its code on /fsx)
        from trainium_cdk import recipes

        settings = recipes.job(config, job.job, group=job.group, backend=BACKEND, nodes=job.nodes)
        job = replace(job, program=tuple(settings.command), env={**settings.env, **job.env})
    if (job.nodes or 1) != 1:
        raise ConfigError("--nodes", job.nodes, "1: the development instance is one node")
    name = _check_name(getattr(args, "name", None) or default_name(job.group), "--name")
    return InstanceSubmission(name=name, program=job.program or (EXAMPLE_SCRIPT,),
                              env={**job_environment_of(config, name), **job.env})


def submit(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    sub = submission(args, config)
    script = sub.start_script()
    if args.dry_run:
        stack = config.stack_name(STACK_PART)
        request = send_request(f"<{output_key(OUTPUT_INSTANCE_ID)} of {stack}>", script, comment=f"trn submit {sub.name}")
        out.write(f"dry run: would run on the development instance through SSM Run Command in {config.region} (no AWS "
                  f"call made):\n{script}SendCommand:\n{json.dumps(request, indent=2)}\n")
        return 0
    _run(config, script, comment=f"trn submit {sub.name}", doing="starting the job")
    summary = f"submitted {sub.name}: unit {sub.unit} on the development instance ({config.instance.instance_type})"
    announce(args, out, err, job=sub.name, summary=summary, backend=BACKEND)
    return 0


def parse_status(text: str, name: str) -> JobState:
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if fields.get("job") == "missing":
        raise CliError(f"no job {name} on the development instance: check the name (`trn jobs --backend instance`)")
    code, unit = fields.get("exit"), fields.get("unit", "")
    detail = f"started {fields['started']}" if fields.get("started") else ""
    if code is not None:
        state = SUCCEEDED if code.strip() == "0" else FAILED
        return JobState(state, f"{detail}, exit code {code.strip()}" if detail else f"exit code {code.strip()}")
    if unit in RUNNING_UNIT_STATES:
        return JobState("RUNNING", detail)
    return JobState(FAILED, f"{detail}, stopped before it ended (trn cancel, or the instance stopped)".lstrip(", "))


def _state(config: Config, name: str, clock: Clock = CLOCK) -> JobState:
    return parse_status(_run(config, status_script(name), comment=f"trn status {name}", doing="reading the job",
                             clock=clock), name)


def status(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO, clock: Clock = CLOCK) -> int:
    name = _check_name(args.job)
    final = watch(lambda: _state(config, name, clock), out=out, wait=args.wait, label=f"job {name}",
                  timeout=args.timeout, clock=clock)
    return 1 if final.state == FAILED else 0


def cancel(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    name = _check_name(args.job)
    state = _state(config, name)
    if state.done:
        out.write(f"job {name} is already {state.state}: nothing to cancel\n")
        return 0
    _run(config, cancel_script(name), comment=f"trn cancel {name}", doing="stopping the job")
    out.write(f"stopped job {name} on the development instance\n")
    return 0


def logs(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO, clock: Clock = CLOCK) -> int:
    name = _check_name(args.job)
    if args.rank != 0:
        raise ConfigError("--rank", args.rank, "0: the development instance is one node")

    def read(offset: int, size: int) -> tuple[str, int, str]:
        return parse_chunk(_run(config, log_script(name, offset=offset, size=size), comment=f"trn logs {name}",
                                doing="reading the job's log", clock=clock))

    def ended() -> str | None:
        state = _state(config, name, clock)
        return state.state if state.done else None

    return print_log(read, ended, follow=args.follow, lines=LineFilter(), what=f"job {name}", out=out, err=err,
                     clock=clock)


def list_jobs(args: argparse.Namespace, config: Config, out: TextIO, err: TextIO) -> int:
    said = _run(config, jobs_script(limit=args.limit), comment="trn jobs", doing="listing jobs")
    rows = []
    for line in said.strip().splitlines():
        name, unit, code, started = (line.split("|") + [""] * 4)[:4]
        if code.strip():
            state = SUCCEEDED if code.strip() == "0" else FAILED
        else:
            state = "RUNNING" if unit in RUNNING_UNIT_STATES else FAILED
        rows.append((name, state, started))
    if not rows:
        out.write("no jobs on the development instance\n")
        return 0
    table(rows, ["JOB", "STATE", "SUBMITTED (UTC)"], out)
    return 0
