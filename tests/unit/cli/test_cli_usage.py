"""`trn usage` (issue 46): each team's node-hours, NeuronCore-hours and dollars from AWS Batch's job records.

The records come through the AWS edge (ListJobs and DescribeJobs answered here, as Batch writes them: times in
milliseconds, a multi-node job's numNodes, the tags and share identifier `trn submit --team` sent); every request
the verb makes is asserted whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.cli_support import assert_one_clean_line, run_cli
from tests.unit.cli.test_cli_jobs import QUEUE, stack_answer

QUEUE_ARN = "arn:aws:batch:us-west-2:123456789012:job-queue/trainium-batch-train-teams"
HOUR = 3_600_000
START = 1_796_000_000_000  # 2026-11-30 00:53:20 UTC, in ms
JOBS = {
    # research: 2 nodes for 3 hours, tagged by trn submit --team.
    "j-1": {"jobId": "j-1", "jobName": "pretrain-1", "status": "SUCCEEDED", "startedAt": START,
            "stoppedAt": START + 3 * HOUR, "nodeProperties": {"numNodes": 2}, "tags": {"team": "research"},
            "shareIdentifier": "research"},
    # platform-eng: 1 node for 1.5 hours; no tag (submitted by hand), known by its share identifier.
    "j-2": {"jobId": "j-2", "jobName": "eval-1", "status": "FAILED", "startedAt": START + HOUR,
            "stoppedAt": START + HOUR + HOUR // 2 * 3, "nodeProperties": {"numNodes": 1},
            "shareIdentifier": "platform_eng"},
    # Never ran: used nothing.
    "j-3": {"jobId": "j-3", "jobName": "queued", "status": "RUNNABLE", "nodeProperties": {"numNodes": 4},
            "tags": {"team": "research"}},
}
BY_STATUS = {"SUCCEEDED": ["j-1"], "FAILED": ["j-2"], "RUNNABLE": ["j-3"]}


@pytest.fixture
def teams_config(default_config) -> Path:
    path = default_config("batch", name="teams.yaml")
    raw = yaml.safe_load(path.read_text())
    raw["teams"] = [{"name": "research", "share": 3}, {"name": "platform-eng", "share": 1}]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def records(aws):
    aws.fake("DescribeStacks", stack_answer({QUEUE: QUEUE_ARN}))
    aws.fake("ListJobs", lambda params: {"jobSummaryList": [
        {"jobId": i, "createdAt": START} for i in BY_STATUS.get(params["jobStatus"], [])]})
    aws.fake("DescribeJobs", lambda params: {"jobs": [JOBS[i] for i in params["jobs"]]})
    return aws


def test_each_team_s_use_in_node_hours_neuroncore_hours_and_dollars(records, teams_config):
    result = run_cli("usage", "--config", str(teams_config))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    # trn1.32xlarge: 32 NeuronCores, $21.50 an hour on demand in us-west-2.
    assert lines[1].split() == ["TEAM", "JOBS", "NODE-HOURS", "NEURONCORE-HOURS", "USD"]
    assert lines[2].split() == ["platform-eng", "1", "1.50", "48.0", "32.25"]
    assert lines[3].split() == ["research", "1", "6.00", "192.0", "129.00"]
    assert "queued" not in result.out  # never ran
    # Every status listed on the group's queue (ListJobs lists RUNNING ones alone without a status), then one
    # DescribeJobs of every id.
    statuses = ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED"]
    assert records.of("ListJobs") == [{"jobQueue": QUEUE_ARN, "jobStatus": s} for s in statuses]
    assert records.of("DescribeJobs") == [{"jobs": ["j-3", "j-1", "j-2"]}]  # in the order ListJobs found them


def test_one_team_and_a_day(records, teams_config):
    result = run_cli("usage", "--config", str(teams_config), "--team", "research", "--since", "2026-11-30")
    assert result.code == 0, result.err
    assert "platform-eng" not in result.out and "pretrain-1" in result.out
    later = run_cli("usage", "--config", str(teams_config), "--since", "2026-12-01")
    assert later.code == 0 and "no job ran" in later.out


@pytest.mark.parametrize(("argv", "words"), [
    (("--team", "ops"), ["--team", "'ops'", "research"]),
    (("--since", "yesterday"), ["--since", "'yesterday'", "2026-12-01"]),
    (("--backend", "eks"), ["--backend", "batch"]),
])
def test_misuse_is_one_clean_line(records, teams_config, argv, words):
    config = yaml.safe_load(teams_config.read_text())
    if "--backend" in argv:
        config["backends"] = ["batch", "eks"]
        teams_config.write_text(yaml.safe_dump(config))
    assert_one_clean_line(run_cli("usage", "--config", str(teams_config), *argv), *words)


# -- ParallelCluster: Slurm's accounting, sacct on the head node ------------------------------------------------------

HEAD_NODE = "i-0123456789abcdef0"
# sacct --parsable2 as Slurm prints SACCT_FIELDS (JobID|JobName|Account|Partition|State|NNodes|ElapsedRaw|Start):
SACCT = "\n".join([
    "101|pretrain-1|research|train|COMPLETED|2|10800|2026-11-30T01:00:00",  # 2 nodes, 3 hours
    "102|eval-1|platform-eng|train|CANCELLED by 1000|1|5400|2026-11-30T02:00:00",  # 1 node, 1.5 hours
    "103|queued|research|train|PENDING|4|0|Unknown",  # never ran
    "104|admin|root|train|COMPLETED|1|3600|2026-11-30T03:00:00",  # root's own account: no team
    "105|other|research|debug|COMPLETED|1|3600|2026-11-30T03:00:00",  # a partition that is no group of the config
]) + "\n"


@pytest.fixture
def slurm_config(default_config) -> Path:
    path = default_config("parallelcluster", name="slurm-teams.yaml")
    raw = yaml.safe_load(path.read_text())
    raw["teams"] = [{"name": "research", "share": 3}, {"name": "platform-eng", "share": 1}]
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def sacct(aws, no_sleep):
    import datetime as dt

    aws.fake("DescribeStacks", lambda params: {"Stacks": [{
        "StackName": "trainium-parallelcluster", "StackStatus": "CREATE_COMPLETE", "CreationTime": dt.datetime(2026, 11, 1),
        "Outputs": [{"OutputKey": "HeadNodeInstanceId", "OutputValue": HEAD_NODE}]}]})
    aws.fake("SendCommand", lambda params: {"Command": {"CommandId": "c-1", "Status": "Pending"}})
    aws.fake("GetCommandInvocation", lambda params: {"CommandId": "c-1", "InstanceId": HEAD_NODE, "Status": "Success",
                                                     "ResponseCode": 0, "StandardOutputContent": SACCT})
    return aws


def test_on_slurm_each_team_s_use_comes_from_sacct_on_the_head_node(sacct, slurm_config):
    from trainium_cdk.app.parallelcluster.submit import as_os_user

    result = run_cli("usage", "--config", str(slurm_config), "--since", "2026-11-30")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("usage since 2026-11-30,")
    assert lines[2].split() == ["-", "1", "1.00", "32.0", "21.50"]  # root's job: no team's
    assert lines[3].split() == ["platform-eng", "1", "1.50", "48.0", "32.25"]
    assert lines[4].split() == ["research", "1", "6.00", "192.0", "129.00"]
    assert "queued" not in result.out and "other" not in result.out
    assert "CANCELLED" in result.out and "by 1000" not in result.out
    (request,) = sacct.of("SendCommand")
    script = as_os_user("TZ=UTC sacct --allusers --allocations --noheader --parsable2 --starttime 2026-11-30T00:00:00 "
                        "--endtime now --format JobID,JobName,Account,Partition,State,NNodes,ElapsedRaw,Start")
    assert request == {"InstanceIds": [HEAD_NODE], "DocumentName": "AWS-RunShellScript", "Comment": "trn usage",
                       "Parameters": {"commands": script.splitlines(), "executionTimeout": ["300"]}}


def test_on_slurm_one_team_and_the_default_window(sacct, slurm_config):
    result = run_cli("usage", "--config", str(slurm_config), "--team", "platform-eng", "--since", "2026-11-01")
    assert result.code == 0, result.err
    assert "research" not in result.out and "eval-1" in result.out
    default = run_cli("usage", "--config", str(slurm_config))
    assert default.code == 0 and "(the last 30 days; --since for more)" in default.out.splitlines()[0]


def test_on_slurm_without_teams_there_is_no_accounting_to_read(aws, default_config):
    config = default_config("parallelcluster", name="solo.yaml")
    assert_one_clean_line(run_cli("usage", "--config", str(config)), "teams", "Slurm accounting only with teams")
    assert aws.of("SendCommand") == []
