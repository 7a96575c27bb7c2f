"""`trn usage`: who used what (issue 46): node-hours, NeuronCore-hours and dollars per team, from AWS Batch's job
records (every job of each group's queue Batch still knows: about 7 days after it ends) or Slurm's accounting on a
ParallelCluster cluster with teams (sacct on the head node, through SSM Run Command: the last 30 days unless --since).

A job's use is its run time (Batch: startedAt to stoppedAt, or now while it runs; Slurm: sacct's ElapsedRaw) times its
nodes; a job that never ran used nothing. Its team on Batch is its `team` tag (`trn submit --team`), else its share
identifier; on Slurm its account (`sbatch --account`); else "-". Dollars are node-hours at the catalog's on-demand price
(facts/prices.py): instances start before a job and stop after it, and a Capacity Block is paid whether used or not,
so this is each team's part of the bill, not the bill. On Batch, a capacity-block group's hours inside its block's
paid extensions are at their fee per node-hour, the one fee EC2 tells (reservations.block_fee); its other hours at
the on-demand price, and a line per such group says so."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, TextIO

from trainium_cdk.app.config import ComputeGroup, Config
from trainium_cdk.cli.reservations import BlockFee
from trainium_cdk.errors import ConfigError, one_of
from trainium_cdk.facts import prices
from trainium_cdk.facts.teams import TEAM_TAG, share_identifier

NO_TEAM = "-"
# Slurm keeps every job in its database: without --since, this many days back.
SLURM_DEFAULT_DAYS = 30
BACKENDS = ("batch", "parallelcluster")


def add_parser(sub: Any, common: Any) -> None:
    p = sub.add_parser(
        "usage", help="node-hours, NeuronCore-hours and dollars per team (AWS Batch's job records, Slurm's sacct)",
        description="Print what each team's jobs used: node-hours, NeuronCore-hours and dollars at the on-demand "
        "price, per team and per job, from AWS Batch's records of every compute group's queue (Batch keeps a job "
        "about 7 days after it ends) or, on ParallelCluster, Slurm's accounting (sacct on the head node; the last "
        f"{SLURM_DEFAULT_DAYS} days unless --since). A job's use is its run time times its nodes.",
    )
    p.add_argument("--team", metavar="NAME", help="only this team's jobs (one of the config's teams:)")
    p.add_argument("--since", metavar="YYYY-MM-DD", help="only jobs that started on or after this day (UTC)")
    p.add_argument("--group", metavar="NAME", help="only this compute group (default: every group)")
    common(p)
    p.set_defaults(func=usage)


@dataclass(frozen=True)
class JobUse:
    """One job's use."""

    job_id: str
    name: str
    team: str
    group: str
    state: str
    nodes: int
    node_hours: float
    core_hours: float
    usd: float


def priced(config: Config, group: ComputeGroup, *, job_id: str, name: str, team: str, state: str, nodes: int,
           node_hours: float) -> JobUse:
    """A job's use, in NeuronCore-hours and dollars of its group's instance type."""
    return JobUse(job_id=job_id, name=name, team=team, group=group.name, state=state, nodes=nodes,
                  node_hours=node_hours, core_hours=node_hours * config.spec(group).neuron_cores,
                  usd=node_hours * _hourly(config, group))


def _hourly(config: Config, group: ComputeGroup) -> float:
    """A node-hour of the group's instance type at the catalog's on-demand price in the config's region."""
    return prices.in_region(prices.instance_price(config.spec(group).name), config.region).usd


def job_use(job: dict[str, Any], group: ComputeGroup, config: Config, *, now_ms: int,
            fee: BlockFee | None = None) -> JobUse | None:
    """What ``job`` (a DescribeJobs record) used, or None: it never ran. ``fee``: the group's block's, for the hours
    it tells a price of."""
    started = job.get("startedAt")
    if not started:
        return None
    nodes = int((job.get("nodeProperties") or {}).get("numNodes") or 1)
    stopped = max(started, job.get("stoppedAt") or now_ms)
    node_hours = (stopped - started) / 3_600_000 * nodes
    teams = {share_identifier(t.name): t.name for t in config.teams}
    team = (job.get("tags") or {}).get(TEAM_TAG) or teams.get(job.get("shareIdentifier", ""), NO_TEAM)
    use = priced(config, group, job_id=job["jobId"], name=job.get("jobName", ""), team=team,
                 state=job.get("status", ""), nodes=nodes, node_hours=node_hours)
    if fee is None or not fee.periods:
        return use
    inside, outside = fee.split(_utc_ms(started), _utc_ms(stopped))
    usd = nodes * (sum(hours * rate for hours, rate in inside) + outside * _hourly(config, group))
    return dataclasses.replace(use, usd=usd)


def _utc_ms(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def _block_fees(groups: list[ComputeGroup], sess: Any) -> dict[str, BlockFee]:
    """The fee EC2 tells of each capacity-block group's block."""
    from trainium_cdk.cli._common import client
    from trainium_cdk.cli.reservations import block_fee, reservation_id

    blocks = [g for g in groups if g.capacity.is_capacity_block]
    if not blocks:
        return {}
    ec2 = client(sess, "ec2")
    return {g.name: block_fee(ec2, reservation_id(g)) for g in blocks}


def sacct_uses(text: str, config: Config, groups: list[ComputeGroup], *, since: int) -> list[JobUse]:
    """The uses of sacct's jobs (:data:`trainium_cdk.app.parallelcluster.submit.SACCT_FIELDS`, '|' between, one job
    a line) in ``groups`` (a group's jobs are its Slurm partition's) that started on or after ``since`` (ms)."""
    from trainium_cdk.app.parallelcluster.cluster_config import queue_name
    from trainium_cdk.app.parallelcluster.submit import SACCT_FIELDS

    by_partition = {queue_name(group): group for group in groups}
    teams = {t.name for t in config.teams}
    used = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != len(SACCT_FIELDS):
            continue  # a line of sacct's that is no job (a warning), not ours to price
        job_id, name, account, partition, state, nodes, elapsed, start = fields
        group = by_partition.get(partition)
        started = _sacct_time(start)
        if group is None or started is None or started < since or not elapsed.isdigit() or int(elapsed) == 0:
            continue  # another partition, never ran, or before the window
        used.append(priced(config, group, job_id=job_id, name=name, team=account if account in teams else NO_TEAM,
                           state=state.split()[0] if state else "", nodes=int(nodes or 1),
                           node_hours=int(elapsed) / 3600 * int(nodes or 1)))
    return used


def _sacct_time(value: str) -> int | None:
    """sacct's time (UTC: the script runs it with TZ=UTC) in ms, or None (Unknown, None: the job never started)."""
    try:
        return int(dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC).timestamp() * 1000)
    except ValueError:
        return None


def _since(value: str | None) -> int:
    if value is None:
        return 0
    try:
        day = dt.datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ConfigError("--since", value, "a day such as 2026-12-01 (UTC)") from None
    return int(day.timestamp() * 1000)


def usage(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from trainium_cdk.cli._common import table
    from trainium_cdk.cli.jobs import group_of, load

    config, backend = load(args)
    if backend not in BACKENDS:
        raise ConfigError("--backend", backend, f"{' or '.join(BACKENDS)}: trn usage reads AWS Batch's job records and "
                          "Slurm's accounting; EKS and the development instance keep none it reads yet")
    names = [t.name for t in config.teams]
    if args.team is not None and args.team not in names:
        raise ConfigError("--team", args.team, "a team of the config; " + (one_of(names) if names else "it has none"))
    if backend == "parallelcluster" and not names:
        raise ConfigError("teams", [], "teams: a ParallelCluster cluster keeps Slurm accounting only with teams "
                          "(docs/guide/teams.md)")
    groups = [group_of(config, args.group)] if args.group else list(config.compute_groups)
    fees: dict[str, BlockFee] = {}
    if backend == "batch":
        since = _since(args.since)
        used, fees = _batch_uses(config, groups, since=since)
        window = f"since {args.since}" if args.since else "of every job Batch still knows (about 7 days)"
    else:
        start = args.since or f"{dt.datetime.now(dt.UTC) - dt.timedelta(days=SLURM_DEFAULT_DAYS):%Y-%m-%d}"
        since = _since(start)
        used = _slurm_uses(config, groups, since=since)
        window = f"since {start}" + ("" if args.since else f" (the last {SLURM_DEFAULT_DAYS} days; --since for more)")
    used = [use for use in used if args.team in (None, use.team)]
    out.write(f"usage {window}, run time x nodes, at on-demand prices of {prices.PRICES_AS_OF}"
              + (" (capacity-block groups: below)" if fees else "") + ":\n")
    for name, fee in fees.items():
        tail = ("; a job's hours inside its paid extensions at their fees, its other hours at the on-demand price"
                if fee.periods else "")
        out.write(f"  group {name}: {fee.said}{tail}\n")
    if not used:
        out.write("no job ran\n")
        return 0
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for use in used:
        total = totals[use.team]
        total[0] += 1
        total[1] += use.node_hours
        total[2] += use.core_hours
        total[3] += use.usd
    rows = [(team, str(int(t[0])), f"{t[1]:.2f}", f"{t[2]:.1f}", f"{t[3]:.2f}") for team, t in sorted(totals.items())]
    table(rows, ["TEAM", "JOBS", "NODE-HOURS", "NEURONCORE-HOURS", "USD"], out)
    out.write("\n")
    table([(u.team, u.job_id, u.name, u.group, u.state, str(u.nodes), f"{u.node_hours:.2f}", f"{u.core_hours:.1f}",
            f"{u.usd:.2f}") for u in used],
          ["TEAM", "JOB ID", "NAME", "GROUP", "STATE", "NODES", "NODE-HOURS", "NEURONCORE-HOURS", "USD"], out)
    return 0


def _batch_uses(config: Config, groups: list[ComputeGroup], *, since: int) -> tuple[list[JobUse], dict[str, BlockFee]]:
    """Every job of the groups' queues Batch still knows that ran, from ``since`` (ms), and the fee EC2 tells of each
    capacity-block group's block."""
    from trainium_cdk.cli._common import client, session, stack_outputs
    from trainium_cdk.cli.batch_jobs import STACK_PART, describe, group_output_value, queue_jobs
    from trainium_cdk.facts.names import BATCH_JOB_QUEUE_ARN

    sess = session(config.region)
    stack = config.stack_name(STACK_PART)
    outputs = stack_outputs(client(sess, "cloudformation"), stack, config.region, backend="batch")
    batch = client(sess, "batch")
    now_ms = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    fees = _block_fees(groups, sess)
    used: list[JobUse] = []
    for group in groups:
        queue = group_output_value(outputs, BATCH_JOB_QUEUE_ARN, group=group.name, stack=stack)
        ids = [s["jobId"] for s in queue_jobs(batch, queue)]
        for job in describe(batch, ids):
            use = job_use(job, group, config, now_ms=now_ms, fee=fees.get(group.name))
            if use is not None and job["startedAt"] >= since:
                used.append(use)
    return used, fees


def _slurm_uses(config: Config, groups: list[ComputeGroup], *, since: int) -> list[JobUse]:
    """Every job of the groups' partitions that ran from ``since`` (ms), from sacct on the head node."""
    from trainium_cdk.app.parallelcluster.submit import usage_script
    from trainium_cdk.cli.slurm_jobs import run_on_head_node

    day = f"{dt.datetime.fromtimestamp(since / 1000, dt.UTC):%Y-%m-%dT%H:%M:%S}"
    said = run_on_head_node(config, usage_script(day), comment="trn usage", doing="sacct")
    return sacct_uses(said, config, groups, since=since)
