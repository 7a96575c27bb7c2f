"""`trn usage`: who used what (issue 46): node-hours, NeuronCore-hours and dollars per team, from AWS Batch's job
records (every job of each group's queue Batch still knows: about 7 days after it ends).

A job's use is its run time (startedAt to stoppedAt, or now while it runs) times its nodes; a job that never ran
used nothing. Its team is its `team` tag (`trn submit --team`), else its share identifier, else "-". Dollars are
node-hours at the catalog's on-demand price (facts/prices.py): instances start before a job and stop after it, and a
Capacity Block is paid whether used or not, so this is each team's part of the bill, not the bill. A capacity-block
group's hours inside its block's paid extensions are at their fee per node-hour, the one fee EC2 tells
(reservations.block_fee); its other hours at the on-demand price, and a line per such group says so."""

from __future__ import annotations

import argparse
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


def add_parser(sub: Any, common: Any) -> None:
    p = sub.add_parser(
        "usage", help="node-hours, NeuronCore-hours and dollars per team (AWS Batch's job records)",
        description="Print what each team's jobs used: node-hours, NeuronCore-hours and dollars at the on-demand "
        "price, per team and per job, from AWS Batch's records of every compute group's queue (Batch keeps a job "
        "about 7 days after it ends). A job's use is its run time times its nodes.",
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
    spec = config.spec(group)
    teams = {share_identifier(t.name): t.name for t in config.teams}
    team = (job.get("tags") or {}).get(TEAM_TAG) or teams.get(job.get("shareIdentifier", ""), NO_TEAM)
    hourly = prices.in_region(prices.instance_price(spec.name), config.region).usd
    usd = node_hours * hourly
    if fee is not None and fee.periods:
        priced, outside = fee.split(_utc_ms(started), _utc_ms(stopped))
        usd = nodes * (sum(hours * rate for hours, rate in priced) + outside * hourly)
    return JobUse(job_id=job["jobId"], name=job.get("jobName", ""), team=team, group=group.name,
                  state=job.get("status", ""), nodes=nodes, node_hours=node_hours,
                  core_hours=node_hours * spec.neuron_cores, usd=usd)


def _utc_ms(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def _block_fees(groups: list[ComputeGroup], sess: Any) -> dict[str, BlockFee]:
    """The fee EC2 tells of each capacity-block group's block."""
    from trainium_cdk.cli._common import client
    from trainium_cdk.cli.reservations import block_fee, reservation_id

    blocks = [g for g in groups if g.capacity.type == "capacity-block"]
    if not blocks:
        return {}
    ec2 = client(sess, "ec2")
    return {g.name: block_fee(ec2, reservation_id(g)) for g in blocks}


def _since(value: str | None) -> int:
    if value is None:
        return 0
    try:
        day = dt.datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ConfigError("--since", value, "a day such as 2026-12-01 (UTC)") from None
    return int(day.timestamp() * 1000)


def usage(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from trainium_cdk.cli._common import client, session, stack_outputs, table
    from trainium_cdk.cli.batch_jobs import STACK_PART, describe, group_output_value, queue_jobs
    from trainium_cdk.cli.jobs import group_of, load
    from trainium_cdk.facts.names import BATCH_JOB_QUEUE_ARN

    config, backend = load(args)
    if backend != "batch":
        raise ConfigError("--backend", backend, "batch: trn usage reads AWS Batch's job records; EKS, ParallelCluster "
                          "and the development instance keep none it reads yet")
    names = [t.name for t in config.teams]
    if args.team is not None and args.team not in names:
        raise ConfigError("--team", args.team, "a team of the config; " + (one_of(names) if names else "it has none"))
    since = _since(args.since)
    groups = [group_of(config, args.group)] if args.group else list(config.compute_groups)
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
            if use is not None and job["startedAt"] >= since and args.team in (None, use.team):
                used.append(use)
    window = f"since {args.since}" if args.since else "of every job Batch still knows (about 7 days)"
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
