"""`trn submit`, `trn status`, `trn logs`: training jobs on the Batch or the EKS backend.

The backend modules do the work; this one parses, picks the backend and the compute group, and
holds the wait loop both share.
"""

from __future__ import annotations

import argparse
import datetime as dt
import secrets
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, cast

from trainium_cdk.app import backends as backend_registry
from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.app.config.fields import check_environment_name
from trainium_cdk.cli import throughput
from trainium_cdk.cli._common import CliError, is_interactive, parse_overrides, read_config
from trainium_cdk.cli.compile_cache import SummaryWatch, describe
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts.teams import MAX_PRIORITY
from trainium_cdk.runtime.jobs import check_node_count
from trainium_cdk.runtime.launcher import WORKDIR_VARIABLE

JOB_BACKENDS = backend_registry.job_backends()  # the backends with a job client (trainium_cdk/app/backends.py)
SUCCEEDED, FAILED = "SUCCEEDED", "FAILED"
TERMINAL = (SUCCEEDED, FAILED)
# Polling: first wait, growth per poll without a change, longest wait; a heartbeat line this often
# when stdout is not a terminal (CI logs that print nothing for hours get killed).
POLL_FIRST_S = 2.0
POLL_FACTOR = 1.5
POLL_MAX_S = 30.0
HEARTBEAT_S = 300.0
CANCEL_REASON = "cancelled with trn cancel"
SKIP_FIT_FLAG = "--skip-fit"
JOBS_LIMIT = 20


@dataclass
class JobState:
    """Where a job is: a Batch status (SUBMITTED ... RUNNING, SUCCEEDED, FAILED) or the same words for EKS."""

    state: str
    detail: str = ""
    lines: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL


@dataclass
class Clock:
    """Time as the wait loops see it: replaced in tests."""

    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    now: Callable[[], dt.datetime] = dt.datetime.now


CLOCK = Clock()


def same_job_flags(args: argparse.Namespace, backend: str, *, namespace: str | None = None) -> str:
    """The flags a printed follow-up (`trn status ...`) needs to reach the same job: the backend, and the
    --config, -c, --namespace, --kubeconfig and --context this command was given, shell-quoted."""
    parts = ["--backend", backend]
    if getattr(args, "config", None):
        parts += ["--config", args.config]
    for override in getattr(args, "overrides", None) or []:
        parts += ["-c", override]
    if backend == "eks":
        if namespace:
            parts += ["--namespace", namespace]
        for flag in ("kubeconfig", "context"):
            if getattr(args, flag, None):
                parts += [f"--{flag}", getattr(args, flag)]
    return " ".join(shlex.quote(part) for part in parts)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=JOB_BACKENDS, help="default: the job backend the config deploys")
    p.add_argument("--config", metavar="PATH", help="config YAML (default: config/default.yaml)")
    p.add_argument(
        "-c", dest="overrides", action="append", metavar="KEY=VALUE", default=[],
        help="override like `cdk synth -c` (region, backends, instance_type, nodes); repeatable",
    )
    k = p.add_argument_group("EKS backend")
    k.add_argument("--namespace", help="Kubernetes namespace (default: the kubeconfig context's, else default)")
    k.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k.add_argument("--context", help="kubeconfig context (default: the current one)")


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    """What a job is, as `trn submit` and `trn rehearse` both take it: the group, the nodes, the user's command
    (after ``--``) or a workload (``--job``), and its environment."""
    p.add_argument("--group", metavar="NAME", help="compute group (default: the first one of the config)")
    p.add_argument("--nodes", type=int, metavar="N", help="nodes of the job (default: the group's nodes)")
    p.add_argument(
        "--job", metavar="WORKLOAD",
        help="a configured workload instead of a command: EKS, a job of workloads.jobs or an example (mlp, "
        "mlp-distributed, bert-large-phase1)",
    )
    p.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE",
        help="environment of the job (repeatable); wins over the job definition's own",
    )
    p.add_argument(
        "--workdir", metavar="DIR",
        help="directory on the nodes the command runs in, such as /fsx/s3/code/myproj (default: the image's)",
    )
    p.add_argument(
        "program", nargs=argparse.REMAINDER, metavar="-- SCRIPT [ARGS...]",
        help="your training command, as one process runs it (train.py --lr 3e-4): torchrun runs it on every "
        "NeuronCore of every node",
    )


def add_skip_fit_argument(p: argparse.ArgumentParser) -> None:
    """`trn submit` and `trn rehearse`: go on when `trn fit` says a recipe's job does not fit."""
    p.add_argument(SKIP_FIT_FLAG, action="store_true",
                   help="a recipe's job: run it even when `trn fit` says it does not fit (a warning instead)")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "submit", help="submit a training job (your command after --) to a compute group",
        description="Submit a training job: your command after -- (trn submit -- train.py --lr 3e-4), or a "
        "configured workload (--job). EKS: the training job chart's objects, through your kubeconfig. Batch: a "
        "job on the group's queue, your command and environment as overrides (a new job definition revision for "
        "a new --image). ParallelCluster: sbatch on the head node through SSM Run Command. Development "
        "instance: a systemd unit through SSM Run Command.",
    )
    add_job_arguments(p)
    p.add_argument("--name", help="job name (default: <group>-<date>-<time>)")
    p.add_argument("--team", metavar="NAME", help="the job's team, one of the config's teams: (Batch: its share of the "
                   "fair-share queue and the tag team=NAME; EKS: its Volcano queue team-NAME and the label team=NAME; "
                   "ParallelCluster: its Slurm account, sbatch --account=NAME); required on Batch and ParallelCluster "
                   "when the config has teams")
    p.add_argument("--priority", type=int, metavar="N", help="with --team: the job's priority within its team's share, "
                   "0 to 9999 (Batch's schedulingPriorityOverride; default 0)")
    p.add_argument(
        "--image", metavar="URI",
        help="training image (EKS and Batch; `trn image push` builds yours). EKS default: workloads.image, else "
        "the stack's example image; Batch default: the job definition's",
    )
    p.add_argument("--dry-run", action="store_true",
                   help="print exactly what would be sent (no AWS credentials needed), send nothing")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print only the job's id (or name) on stdout, for JOB=$(trn submit -q ...); the rest on stderr")
    add_skip_fit_argument(p)
    _common(p)
    p.set_defaults(func=submit)

    p = sub.add_parser("status", help="state of a job; --wait follows it to SUCCEEDED or FAILED",
                       description="Print the state of a job (its id or name, as `trn submit` printed it). "
                       "Exit 1 if it FAILED.")
    p.add_argument("job", help="the job: Batch and Slurm job id, EKS and development instance job name")
    p.add_argument("--wait", action="store_true", help="poll (with backoff) until SUCCEEDED or FAILED")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="with --wait: give up after this long (exit 1)")
    _common(p)
    p.set_defaults(func=status)

    p = sub.add_parser("logs", help="logs of one node of a job (default: node rank 0)",
                       description="Print the logs of one node of a job, with every process torchrun runs there: "
                       "--rank N picks node rank N (default 0). Batch: the node's CloudWatch log stream; EKS: its "
                       "pod; Slurm: its lines of the job's output file; development instance: the job's log. "
                       "--follow streams until the job ends. Then, on stderr, the Neuron compile cache's hits and "
                       "misses the launcher counted on that node (graphs loaded from the cache, graphs compiled), and the "
                       "job's throughput where its log has step lines with tokens_per_s_per_node (the recipes' do).")
    p.add_argument("job", help="the job: Batch and Slurm job id, EKS and development instance job name")
    p.add_argument("--rank", type=int, default=0, metavar="N", help="node rank (0 .. nodes-1; default 0)")
    p.add_argument("--follow", "-f", action="store_true", help="keep streaming until the job ends")
    p.add_argument("--container", help="EKS: container of the pod (default: its first)")
    _common(p)
    p.set_defaults(func=logs)

    p = sub.add_parser("cancel", help="stop a job and every node of it",
                       description="Stop a job. Batch: TerminateJob (running nodes are stopped, queued jobs "
                       "cancelled). EKS: delete the batch/v1 Job or Volcano Job and, with it, its pods. Slurm: "
                       "scancel. Development instance: stop its unit.")
    p.add_argument("job", help="the job: Batch and Slurm job id, EKS and development instance job name")
    p.add_argument("--reason", default=CANCEL_REASON, help=f"Batch: the status reason (default: {CANCEL_REASON!r})")
    _common(p)
    p.set_defaults(func=cancel)

    p = sub.add_parser("jobs", help="recent jobs of a compute group, newest first",
                       description="List a compute group's recent jobs, newest first: id or name, state, nodes, "
                       "when it was submitted.")
    p.add_argument("--group", metavar="NAME", help="compute group (default: the first one of the config)")
    p.add_argument("--limit", type=int, default=JOBS_LIMIT, metavar="N", help=f"at most N jobs (default {JOBS_LIMIT})")
    _common(p)
    p.set_defaults(func=list_jobs)


# -- shared ------------------------------------------------------------------------------------------


def load(args: argparse.Namespace) -> tuple[Config, str]:
    """The config and the backend of a job command, its flags that need no config checked first."""
    check_flags(args)
    config = read_config(args.config, parse_overrides(args.overrides))
    return config, backend_of(config, args.backend)


def check_flags(args: argparse.Namespace) -> None:
    """The job commands' flags that are wrong whatever the config: an empty --name (it fell back to the default
    name)."""
    name = getattr(args, "name", None)
    if name is not None and not name.strip():
        raise ConfigError("--name", name, "a job name, or leave --name out for <group>-<date>-<time>-<random>")


def backend_of(config: Config, chosen: str | None) -> str:
    if chosen:
        if chosen not in config.backends:
            deployed = [b for b in config.backends if b in JOB_BACKENDS]
            raise ConfigError("--backend", chosen, f"a backend the config deploys; {one_of(deployed or ['none'])} "
                              "(add it to backends, or pass the config that deploys it)")
        return chosen
    deployed = [b for b in config.backends if b in JOB_BACKENDS]
    if not deployed:
        raise CliError(
            f"the config deploys no job backend (backends: {', '.join(config.backends)}): pass --backend "
            f"{' or '.join(JOB_BACKENDS)}, or add one to backends"
        )
    return deployed[0]


def group_of(config: Config, name: str | None) -> ComputeGroup:
    names = [g.name for g in config.compute_groups]
    if name is None:
        return config.compute_groups[0]
    for group in config.compute_groups:
        if group.name == name:
            return group
    raise ConfigError("--group", name, "a compute group of the config; " + one_of(names))


def cpu_only_recipe(name: str | None) -> bool:
    from trainium_cdk import recipes

    recipe = recipes.find(name) if name else None
    return recipe is not None and recipe.cpu_only


def on_batch_cpu_queue(config: Config, job: str | None) -> bool:
    """Whether Batch runs recipe ``job`` on the CPU queue: a CPU-only recipe, and the config deploys the queue."""
    return config.batch.cpu_instance_type is not None and cpu_only_recipe(job)


def check_nodes(config: Config, group: ComputeGroup, nodes: int | None) -> int:
    if nodes is None:
        return group.nodes
    return check_node_count("--nodes", nodes, maximum=group.maximum, instance=config.spec(group), group=group.name)


@dataclass(frozen=True)
class UserJob:
    """What the user asked to run, before any backend shapes it: the group, the nodes (None: the backend's or
    the workload's default), the command after ``--`` (empty: a workload or the backend's default), the
    workload (``--job``), the environment (``--env``, and ``--workdir`` as the launcher's TRN_WORKDIR)."""

    group: ComputeGroup
    nodes: int | None
    program: tuple[str, ...]
    job: str | None
    env: dict[str, str]


def user_job(args: argparse.Namespace, config: Config) -> UserJob:
    """The job of `trn submit` / `trn rehearse` arguments, every part checked (one line for each mistake)."""
    group = group_of(config, args.group)
    nodes = None if args.nodes is None else check_nodes(config, group, args.nodes)
    program = tuple(args.program[1:] if args.program[:1] == ["--"] else args.program)
    if program and args.job:
        raise ConfigError("--job", args.job, f"left out when a command follows -- ({shlex.join(program)}): one or the other")
    if program and not program[0].strip():
        raise ConfigError("command", shlex.join(program), "a program or script first, such as train.py")
    if any("\0" in word for word in program):
        raise ConfigError("command", shlex.join(program), "words without NUL characters")
    env = parse_env(args.env)
    if args.workdir is not None:
        workdir = args.workdir
        if not workdir.startswith("/") or "\n" in workdir or "\0" in workdir:
            raise ConfigError("--workdir", workdir, "an absolute directory on the nodes, such as /fsx/s3/code/myproj")
        if WORKDIR_VARIABLE in env:
            raise ConfigError("--env", f"{WORKDIR_VARIABLE}={env[WORKDIR_VARIABLE]}", "left out with --workdir")
        env[WORKDIR_VARIABLE] = workdir
    return UserJob(group=group, nodes=nodes, program=program, job=args.job, env=env)


def parse_env(pairs: Sequence[str] | None) -> dict[str, str]:
    """``--env KEY=VALUE`` pairs: each KEY an environment variable name, once; values of one line."""
    env: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        try:
            check_environment_name(key)
        except ValueError as error:
            raise ConfigError("--env", pair, f"KEY=VALUE, KEY {error}") from None
        if not sep:
            raise ConfigError("--env", pair, f"KEY=VALUE (for an empty value: {key}=)")
        if "\n" in value or "\0" in value:
            raise ConfigError("--env", pair, "a value of one line (no newline or NUL)")
        if key in env:
            raise ConfigError("--env", key, "each KEY once")
        env[key] = value
    return env


def check_fit(args: argparse.Namespace, config: Config, job: UserJob, backend: str, err: TextIO) -> None:
    """Before `trn submit --job` and `trn rehearse --job` run a recipe: stop (exit 1) when `trn fit` says its job
    does not fit, naming the change that would; with --skip-fit, a warning and on."""
    from trainium_cdk.recipes import FitUnknown, fit_of

    if job.job is None:
        return
    try:
        report = fit_of(config, job.job, group=job.group, backend=backend, nodes=job.nodes, env=job.env)
    except FitUnknown as unknown:
        err.write(f"trn {args.command} --job {job.job}: not checked against the memory of a NeuronCore: {unknown}\n")
        return
    if report is None or report.fits:
        return
    verdict = f"does not fit ({report.totals()})"
    if getattr(args, "skip_fit", False):
        err.write(f"trn {args.command} --job {job.job}: {verdict}; going on ({SKIP_FIT_FLAG}): `trn fit --job "
                  f"{job.job}` prints the plan\n")
        return
    raise CliError(f"{verdict}: {report.suggestion}; `trn fit --job {job.job}` prints the plan, {SKIP_FIT_FLAG} "
                   "submits anyway", code=1)


def check_team(args: argparse.Namespace, config: Config, backend: str) -> None:
    """`trn submit --team/--priority`, checked before anything is sent: a team of the config, required on Batch when
    the config has teams (its fair-share queues take no job without a share identifier) and on ParallelCluster (Slurm
    would charge the job to the OS user's default account, the first team's), refused on the development instance."""
    team, priority = getattr(args, "team", None), getattr(args, "priority", None)
    names = [t.name for t in config.teams]
    if team is not None and not names:
        raise ConfigError("--team", team, "left out: the config has no teams: (docs/guide/teams.md)")
    if team is None and names and backend == "batch":
        raise ConfigError("--team", None, f"a team of the config ({', '.join(names)}): its fair-share queues take "
                          "no job without one")
    if team is None and names and backend == "parallelcluster":
        raise ConfigError("--team", None, f"a team of the config ({', '.join(names)}): the job runs in its Slurm "
                          "account's fair share, and Slurm would charge it to the first team's without one")
    if team is not None and team not in names:
        raise ConfigError("--team", team, "a team of the config; " + one_of(names))
    if team is not None and backend not in ("batch", "eks", "parallelcluster"):
        raise ConfigError("--team", team, f"left out on {backend}: teams share Batch, EKS and ParallelCluster "
                          "(docs/guide/teams.md)")
    if priority is not None and team is None:
        raise ConfigError("--priority", priority, "with --team only (a priority within the team's share)")
    if priority is not None and backend == "parallelcluster":
        raise ConfigError("--priority", priority, "left out on ParallelCluster: a Slurm job's priority is its team's "
                          "fair share and its age (sbatch --nice lowers one's own)")
    if priority is not None and not 0 <= priority <= MAX_PRIORITY:
        raise ConfigError("--priority", priority, f"0 to {MAX_PRIORITY} (AWS Batch's scheduling priority)")


def say_where_cpu_work_runs(args: argparse.Namespace, config: Config, job: UserJob, backend: str, err: TextIO) -> None:
    """Before `trn submit --job` sends a CPU-only recipe (a data preparation): one line saying where it runs, not on
    a Trainium node (issue 44): on EKS the system nodes, on Batch the CPU queue (without one, a node of its group)."""
    if not cpu_only_recipe(job.job):
        return
    if backend == "eks":
        where = f"the system nodes ({config.eks.system_instance_type})"
    elif backend == "batch" and on_batch_cpu_queue(config, job.job):
        where = f"the Batch CPU queue ({config.batch.cpu_instance_type})"
    else:
        return
    err.write(f"trn {args.command} --job {job.job}: CPU work, on {where}, no Trainium node\n")


def chatter(args: argparse.Namespace, out: TextIO, err: TextIO) -> TextIO:
    """Where submit's progress lines go: stdout, or stderr with --quiet (stdout then holds the job's id alone)."""
    return err if getattr(args, "quiet", False) else out


def announce(args: argparse.Namespace, out: TextIO, err: TextIO, *, job: str, summary: str, backend: str,
             namespace: str | None = None) -> None:
    """What submit prints once the job is in: a summary and the commands that follow it, or with --quiet the
    job's id alone on stdout (the summary on stderr)."""
    if getattr(args, "quiet", False):
        err.write(summary + "\n")
        out.write(job + "\n")
        return
    flags = same_job_flags(args, backend, namespace=namespace)
    out.write(f"{summary}\n  trn status {job} {flags} --wait\n  trn logs {job} {flags} --follow\n")


def default_name(group: ComputeGroup, clock: Clock = CLOCK) -> str:
    """``<group>-<MMDD>-<HHMMSS>-<4 hex>``: the random tail keeps two submits in one second apart."""
    return f"{group.name}-{clock.now():%m%d-%H%M%S}-{secrets.token_hex(2)}"


def watch(
    fetch: Callable[[], JobState], *, out: TextIO, wait: bool, label: str,
    timeout: float | None = None, clock: Clock = CLOCK,
) -> JobState:
    """Fetch once (``wait`` False) or until the job ends, printing each state transition."""
    interactive = is_interactive(out)
    start = clock.monotonic()
    last_state: str | None = None
    last_line = start
    delay = POLL_FIRST_S
    progress = False
    while True:
        current = fetch()
        if current.state != last_state:
            if progress:
                out.write("\r\033[K")
                progress = False
            stamp = f"{clock.now():%H:%M:%S} " if wait else ""
            arrow = f"{last_state} -> " if last_state else ""
            detail = f" ({current.detail})" if current.detail else ""
            out.write(f"{stamp}{label}: {arrow}{current.state}{detail}\n")
            for line in current.lines:
                out.write(f"  {line}\n")
            out.flush()
            last_state, delay, last_line = current.state, POLL_FIRST_S, clock.monotonic()
        if current.done or not wait:
            if progress:
                out.write("\n")
            return current
        elapsed = clock.monotonic() - start
        if timeout is not None and elapsed >= timeout:
            if progress:
                out.write("\n")
            raise CliError(
                f"{label} is still {current.state} after {elapsed:.0f}s: gave up waiting (--timeout)", code=1
            )
        if interactive:
            out.write(f"\r\033[K{label}: {current.state} for {_duration(elapsed)}, next check in {delay:.0f}s")
            out.flush()
            progress = True
        elif clock.monotonic() - last_line >= HEARTBEAT_S:
            out.write(f"{clock.now():%H:%M:%S} {label}: still {current.state} ({_duration(elapsed)})\n")
            out.flush()
            last_line = clock.monotonic()
        clock.sleep(delay)
        delay = min(POLL_MAX_S, delay * POLL_FACTOR)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


# -- commands ----------------------------------------------------------------------------------------


def _client(backend: str) -> Any:
    return backend_registry.backend(backend).job_client()


def submit(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config, backend = load(args)
    job = user_job(args, config)
    check_team(args, config, backend)
    check_fit(args, config, job, backend, err)
    say_where_cpu_work_runs(args, config, job, backend, err)
    return _client(backend).submit(args, config, out, err)


def status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config, backend = load(args)
    return _client(backend).status(args, config, out, err)


def logs(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config, backend = load(args)
    watch = SummaryWatch(out)  # the log as it is on stdout; the launcher's compile-cache counts on stderr
    code = _client(backend).logs(args, config, cast(TextIO, watch), err)
    watch.close_lines()
    if watch.summary is not None:
        err.write(describe(watch.summary, args.rank) + "\n")
    if watch.steps:
        err.write(throughput.describe(watch.steps, args.rank) + "\n")
    return int(code)


def cancel(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config, backend = load(args)
    return _client(backend).cancel(args, config, out, err)


def list_jobs(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config, backend = load(args)
    if args.limit < 1:
        raise ConfigError("--limit", args.limit, "1 or more")
    return _client(backend).list_jobs(args, config, out, err)
