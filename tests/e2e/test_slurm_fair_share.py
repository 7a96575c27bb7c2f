"""Fair share and accounting between teams on a real Slurm (issue 46): Debian's slurm-wlm 22.05, slurmdbd, munge and
MariaDB on loopback, two slurmd on this host (tests/support/real_slurm.py), with the slurm.conf settings and the
sacctmgr commands the project generates for two teams, research (share 3) and platform-eng (share 1).

- The head node's setup (neuron_setup.sh, run as the cluster configuration gives it the teams' file, with stand-ins for
  the rest of the head node: tests/support/head_node.py) applies the accounts to the real slurmdbd, twice.
- Jobs go in through `trn submit --team` (SSM Run Command answered by the head node's shell: `sudo -iu ubuntu`
  switches to ubuntu for real); the group's batch script runs the command as it is (what runs inside is not this
  test's: training on Trainium is not possible here).
- research runs 3 node-units of work, platform-eng 2: research used more, but less than its share (60% of the use for
  75% of the shares), platform-eng more than its (40% for 25%). Then, on drained nodes, platform-eng queues a job
  first and research one after: research's must go first, by its fair-share factor (sprio, squeue), and start first.
- `trn usage` prints each team's NeuronCore-hours from the real sacct.

ParallelCluster 3.16.1 ships Slurm 25.11.8 (facts/versions.py PARALLELCLUSTER_SLURM_VERSION). Where this test depends
on Slurm, 22.05 and 25.11 agree (their man pages and sources: Fair Tree is the default fair-share algorithm,
Fairshare=parent, PriorityCalcPeriod in minutes, the sshare/sprio/sacct fields read here, `sacctmgr -i add user` for a
user without a uid), but one: an `add` of what exists is "Nothing new added" with exit 1 in 22.05, a notice with exit 0
in 25.11 (SLURM_NO_CHANGE_IN_DATA); the head node's setup takes both (tests/unit/node/test_head_node_accounting.py runs
it against stand-ins of either).

Slurm recalculates usage and fair share every PriorityCalcPeriod (the project's: 1 minute, Slurm's least): the test
waits for one recalculation, about a minute.
"""

from __future__ import annotations

import datetime as dt
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support import paths
from tests.support.cli_support import fake_aws_environment, recorded_aws, run_cli
from tests.support.head_node import HeadNode
from tests.support.real_slurm import HeadNodeShell, LocalSlurm, missing
from tests.support.ssm_host import serve_run_command
from trainium_cdk.app.adapters.parallelcluster import cluster_name, slurm_accounting
from trainium_cdk.app.config import load_config
from trainium_cdk.app.parallelcluster.cluster_config import batch_script_name, queue_name
from trainium_cdk.cli import jobs
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.parallelcluster.accounting import database_name, sacctmgr_commands, slurm_conf_settings

pytestmark = pytest.mark.e2e

TEAMS = [{"name": "research", "share": 3, "slurm_users": ["alice"]},
         {"name": "platform-eng", "share": 1, "slurm_users": ["bob"]}]
# The head node's users: the OS user `trn` submits as, a member of each team, and a user of neither.
USERS = {"ubuntu": 61000, "alice": 61001, "bob": 61002, "mallory": 61003}
HEAD_NODE = "i-0123456789abcdef0"
JOB_SECONDS = 6
RECALCULATION_WAIT_S = 150.0
# The group's batch script as the test's head node has it: the command as it is.
BATCH_SCRIPT = "#!/bin/bash\n# The group's batch script, replaced: the command as it is.\nexec \"$@\"\n"


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="trn-slurm-"))
    path.chmod(0o755)  # every user of the cluster enters it
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def config_path(folder: Path) -> Path:
    raw = yaml.safe_load((paths.ROOT / "config" / "default.yaml").read_text())
    raw.update(backends=["parallelcluster"], teams=TEAMS)
    path = folder / "teams.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def slurm(folder: Path, config_path: Path) -> Iterator[LocalSlurm]:
    reason = missing()
    if reason is not None:
        pytest.skip(f"no real Slurm here: {reason}")
    config = load_config(config_path)
    (group,) = config.compute_groups
    cluster = LocalSlurm(folder / "cluster", cluster=cluster_name(config), database=database_name(cluster_name(config)),
                         partition=queue_name(group), settings=slurm_conf_settings(),
                         users=USERS)
    try:
        cluster.start()
        scripts = cluster.home("ubuntu") / "trainium"
        scripts.mkdir()
        (scripts / batch_script_name(group)).write_text(BATCH_SCRIPT)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def head_node(folder: Path, config_path: Path, slurm: LocalSlurm) -> HeadNode:
    """The head node's setup (OnNodeUpdated) with the teams' file; its sacctmgr is the cluster's."""
    (folder / "head").mkdir()
    node = HeadNode(folder / "head", config=load_config(config_path))
    sacctmgr = node.root / "opt" / "slurm" / "bin" / "sacctmgr"
    sacctmgr.parent.mkdir(parents=True)
    sacctmgr.write_text(f"#!/bin/sh\nexec {shlex.join(slurm.command(['sacctmgr']))} \"$@\"\n")
    sacctmgr.chmod(0o755)
    return node


@pytest.fixture(scope="module")
def accounts(head_node: HeadNode) -> list[str]:
    """The head node's setup, run twice (its configuration, then an update): both runs' output."""
    runs = [head_node.run() for _ in range(2)]
    for proc, _ in runs:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return [proc.stdout for proc, _ in runs]


@pytest.fixture(scope="module")
def edge(folder: Path, slurm: LocalSlurm, accounts: list[str]) -> Iterator[object]:
    """The AWS edge of `trn`: the stack's head node output, and Run Command answered by the head node's shell."""
    with pytest.MonkeyPatch.context() as patch:
        fake_aws_environment(patch, folder)
        patch.setattr(jobs.CLOCK, "sleep", lambda seconds: None)
        with recorded_aws(patch) as aws:
            aws.fake("DescribeStacks", lambda params: {"Stacks": [{
                "StackName": params["StackName"], "StackStatus": "CREATE_COMPLETE", "CreationTime": dt.datetime(2026, 12, 1),
                "Outputs": [{"OutputKey": "HeadNodeInstanceId", "OutputValue": HEAD_NODE}]}]})
            serve_run_command(aws, {HEAD_NODE: HeadNodeShell(slurm)})
            yield aws


def _submit(config_path: Path, team: str, name: str, *, nodes: int, seconds: int) -> str:
    result = run_cli("submit", "--config", str(config_path), "--team", team, "--name", name, "--nodes", str(nodes),
                     "--quiet", "--", "sleep", str(seconds))
    assert result.code == 0, result.err
    return result.out.strip()


def _wait_for(what: str, done: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not done():
        assert time.monotonic() - start < timeout, f"{what}: not after {timeout:.0f}s"
        time.sleep(1)
    return time.monotonic() - start


def _rows(text: str) -> list[list[str]]:
    return [line.split("|") for line in text.splitlines() if line.strip()]


@dataclass
class History:
    """What the scenario left: Slurm's own views at each point, and its times."""

    used: dict[str, list[str]]  # team -> its first jobs' ids
    sshare: list[list[str]]  # after the recalculation: Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|LevelFS
    sprio: dict[str, list[str]]  # job id -> JobID|Priority|weighted FairShare|weighted Age (both queued)
    queue: list[list[str]]  # the queued jobs, highest priority first: JobID|Account|Priority
    queued: dict[str, str]  # team -> its queued job
    started: dict[str, str]  # job id -> its start (sacct)
    seconds: dict[str, float]


@pytest.fixture(scope="module")
def history(slurm: LocalSlurm, config_path: Path, edge: object) -> History:
    seconds = {}
    began = time.monotonic()
    used = {"research": [_submit(config_path, "research", f"r-{i}", nodes=1, seconds=JOB_SECONDS) for i in range(3)],
            "platform-eng": [_submit(config_path, "platform-eng", f"p-{i}", nodes=1, seconds=JOB_SECONDS)
                             for i in range(2)]}
    seconds["first jobs"] = _wait_for("the first jobs", lambda: slurm.run(["squeue", "-h"]).stdout.strip() == "", 120)

    def recalculated() -> bool:
        """A recalculation since the first jobs ended: each team's normalized use is its part of the raw use (which
        Slurm adds when a job ends; the normalized use only when it recalculates)."""
        rows = _rows(slurm.run(["sshare", "-n", "-P", "-o", "Account,User,RawUsage,NormUsage"]).stdout)
        teams = {r[0].strip(): (float(r[2] or 0), float(r[3] or 0)) for r in rows
                 if r[1] == "" and r[0].strip() in ("research", "platform-eng")}
        raw = sum(used for used, _ in teams.values())
        return len(teams) == 2 and raw > 0 and all(abs(norm - used / raw) < 0.01 for used, norm in teams.values())

    seconds["recalculation"] = _wait_for("Slurm's recalculation of usage", recalculated, RECALCULATION_WAIT_S)
    sshare = _rows(slurm.run(["sshare", "-a", "-n", "-P", "-o",
                              "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare,LevelFS"]).stdout)
    # Both teams queue a job of both nodes while the nodes are drained: platform-eng first.
    slurm.run(["scontrol", "update", "nodename=n1,n2", "state=drain", "reason=queue"])
    queued = {"platform-eng": _submit(config_path, "platform-eng", "p-queued", nodes=2, seconds=3)}
    time.sleep(1.5)
    queued["research"] = _submit(config_path, "research", "r-queued", nodes=2, seconds=3)
    time.sleep(1.5)
    sprio = {row[0].strip(): [c.strip() for c in row]
             for row in _rows(slurm.run(["sprio", "-h", "-o", "%i|%Y|%F|%A"]).stdout)}
    queue = _rows(slurm.run(["squeue", "-h", "-t", "PD", "--sort=-p", "-o", "%i|%a|%Q"]).stdout)
    slurm.run(["scontrol", "update", "nodename=n1,n2", "state=resume"])
    seconds["queued jobs"] = _wait_for("the queued jobs", lambda: slurm.run(["squeue", "-h"]).stdout.strip() == "", 60)
    started = {row[0]: row[1] for row in _rows(slurm.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobID,Start", "-j", ",".join(queued.values())]).stdout)}
    seconds["scenario"] = time.monotonic() - began
    # What Slurm showed, for whoever reads the run (pytest -s, -rP).
    print("sshare:", *("|".join(c.strip() for c in row) for row in sshare), sep="\n  ")
    print("sprio (JobID|Priority|FairShare|Age):", *("|".join(row) for row in sprio.values()), sep="\n  ")
    print("queued, highest first (JobID|Account|Priority):", *("|".join(row) for row in queue), sep="\n  ")
    print("started:", started, "seconds:", {k: round(v, 1) for k, v in seconds.items()},
          "cluster up in", round(slurm.started_s, 1), "s")
    return History(used=used, sshare=sshare, sprio=sprio, queue=queue, queued=queued, started=started, seconds=seconds)


def _associations(slurm: LocalSlurm) -> dict[tuple[str, str], str]:
    rows = _rows(slurm.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=Account,User,Fairshare"]).stdout)
    return {(account, user): share for account, user, share in rows}


def test_the_head_node_setup_gives_each_team_an_account_of_its_share(slurm, accounts, config_path):
    found = _associations(slurm)
    assert {a: found[(a, "")] for a in ("research", "platform-eng")} == {"research": "3", "platform-eng": "1"}
    members = {(a, u) for a, u in found if u and a != "root"}
    assert members == {("research", "ubuntu"), ("platform-eng", "ubuntu"), ("research", "alice"),
                       ("platform-eng", "bob")}
    assert found[("root", "root")] == "parent"  # root's own jobs take no share beside the teams'
    defaults = dict(_rows(slurm.run(["sacctmgr", "-n", "-P", "show", "user", "format=User,DefaultAccount"]).stdout))
    assert (defaults["ubuntu"], defaults["alice"], defaults["bob"]) == ("research", "research", "platform-eng")
    # The second run (an update's OnNodeUpdated) found every account and member there: Slurm 22.05's answer to each add.
    adds = [c for c in sacctmgr_commands(slurm_accounting(load_config(config_path))) if c[0] == "add"]
    assert "Nothing new added" not in accounts[0] and accounts[1].count("Nothing new added") == len(adds) == 5


@pytest.mark.parametrize(("user", "account", "taken"), [
    ("alice", "research", True), ("alice", "platform-eng", False), ("bob", "platform-eng", True),
    ("mallory", "research", False), ("ubuntu", "platform-eng", True),
])
def test_slurm_takes_a_team_s_job_only_from_its_members(slurm, accounts, user, account, taken):
    said = slurm.run(["sbatch", "--parsable", "--hold", f"--account={account}", "-N", "1", "--wrap", "true"], user=user,
                     check=False)
    assert (said.returncode == 0) == taken, said.stderr
    if taken:
        slurm.run(["scancel", said.stdout.strip().split(";")[0]])
    else:
        assert "Invalid account or account/partition combination specified" in said.stderr


def test_sshare_shows_the_shares_the_config_promises(history):
    by_account = {row[0].strip(): row for row in history.sshare if row[1] == ""}
    research, platform = by_account["research"], by_account["platform-eng"]
    # Shares 3 and 1 of the config: 0.75 and 0.25 of the whole (root's own association takes none).
    assert (float(research[3]), float(platform[3])) == (0.75, 0.25)
    # research used more than platform-eng (3 jobs to 2) ...
    assert float(research[4]) > float(platform[4]) > 0
    assert 0.5 < float(research[5]) < 0.75 < 1  # ... yet less than its share: 60% of the use
    # ... so its level fair share (shares / use) is above 1, platform-eng's below: Fair Tree ranks research first.
    assert float(research[7]) > 1 > float(platform[7])
    users = {row[0].strip(): float(row[6]) for row in history.sshare if row[1] == "ubuntu"}
    assert users["research"] > users["platform-eng"]


def test_the_team_under_its_share_overtakes_the_one_over_it(history):
    research, platform = history.queued["research"], history.queued["platform-eng"]
    assert int(research) > int(platform)  # queued after platform-eng's
    # sprio: the fair-share part decides (weight 10000 against age's 1000, both jobs a few seconds old).
    assert int(history.sprio[research][2]) > int(history.sprio[platform][2]) + 1000
    assert int(history.sprio[research][1]) > int(history.sprio[platform][1])
    # The queue, highest priority first: research's job ahead of the one queued before it.
    assert [row[1] for row in history.queue[:2]] == ["research", "platform-eng"]
    # And it started first once the nodes were back (each needs both nodes: one at a time).
    assert history.started[research] < history.started[platform]


def test_trn_usage_prints_each_team_s_neuroncore_hours_from_sacct(history, slurm, config_path, edge):
    result = run_cli("usage", "--config", str(config_path))
    assert result.code == 0, result.err
    assert "(the last 30 days; --since for more)" in result.out.splitlines()[0]
    # What sacct itself says each team's jobs used: node-seconds of the jobs that ran.
    node_seconds: dict[str, int] = {}
    jobs_run: dict[str, int] = {}
    for account, elapsed, nodes in _rows(slurm.run(
            ["sacct", "-X", "-a", "-n", "-P", "-S", "now-1days", "-o", "Account,ElapsedRaw,NNodes"]).stdout):
        if int(elapsed) > 0:
            node_seconds[account] = node_seconds.get(account, 0) + int(elapsed) * int(nodes)
            jobs_run[account] = jobs_run.get(account, 0) + 1
    cores = DEFAULT_CATALOG.get("trn1.32xlarge").neuron_cores
    totals = {line.split()[0]: line.split()[1:] for line in result.out.splitlines()[2:4]}
    assert set(totals) == {"research", "platform-eng"}
    for team, (count, node_hours, core_hours, _usd) in totals.items():
        assert int(count) == jobs_run[team] == (4 if team == "research" else 3)
        assert node_hours == f"{node_seconds[team] / 3600:.2f}"
        assert core_hours == f"{node_seconds[team] / 3600 * cores:.1f}"
    # Every job the teams ran, by its id, in the per-job table.
    for team, ids in history.used.items():
        for job_id in [*ids, history.queued[team]]:
            assert any(line.split()[:2] == [team, job_id] for line in result.out.splitlines()), job_id
