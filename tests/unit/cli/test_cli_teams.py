"""`trn submit --team` on AWS Batch (issue 46): the team's share identifier, a scheduling priority and the team tag
in the SubmitJob request (asserted whole, sent to moto's Batch), and one clean line for every misuse."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
import yaml

from tests.support.cli_support import REGION, assert_one_clean_line, run_cli
from tests.unit.cli.test_cli_jobs import DEFINITION, QUEUE, batch, submitted  # noqa: F401 (batch: a fixture)

TEAMS = [{"name": "research", "share": 3}, {"name": "platform-eng", "share": 1}]


@pytest.fixture
def teams_config(default_config) -> Path:
    """The default config on Batch and EKS, shared by two teams as the walkthrough writes them."""
    path = default_config("batch", "eks", name="teams.yaml")
    raw = yaml.safe_load(path.read_text())
    raw["teams"] = TEAMS
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_team_s_job_carries_its_share_identifier_priority_and_tag(aws, batch, teams_config):
    result = run_cli("submit", "--config", str(teams_config), "--team", "platform-eng", "--priority", "20",
                     "--name", "eval-run")
    assert result.code == 0, result.err
    assert submitted(aws) == [{
        "jobName": "eval-run", "jobQueue": batch[QUEUE], "jobDefinition": batch[DEFINITION],
        "nodeOverrides": {"numNodes": 2},
        # Batch's share identifiers take no '-': the team's name with '_'.
        "shareIdentifier": "platform_eng", "schedulingPriorityOverride": 20,
        "tags": {"team": "platform-eng"}, "propagateTags": True,
    }]
    job_id = result.out.split("job id ")[1].split()[0]
    (job,) = boto3.client("batch", region_name=REGION).describe_jobs(jobs=[job_id])["jobs"]
    assert job["tags"] == {"team": "platform-eng"}
    assert "team platform-eng" in result.out


def test_the_priority_is_0_unless_given(aws, batch, teams_config):
    assert run_cli("submit", "--config", str(teams_config), "--team", "research").code == 0
    (request,) = submitted(aws)
    assert (request["shareIdentifier"], request["schedulingPriorityOverride"]) == ("research", 0)


def test_the_dry_run_names_the_fair_share_queue(aws, batch, teams_config):
    result = run_cli("submit", "--config", str(teams_config), "--team", "research", "--dry-run", "--name", "r1")
    assert result.code == 0, result.err
    assert '"jobQueue": "trainium-batch-train-teams"' in result.out
    assert '"shareIdentifier": "research"' in result.out
    assert submitted(aws) == [] and aws.of("DescribeStacks") == []  # asks AWS nothing


@pytest.mark.parametrize(("argv", "words"), [
    ((), ["--team", "a team of the config", "research", "platform-eng"]),
    (("--team", "ops"), ["--team", "'ops'", "research", "platform-eng"]),
    (("--team", "research", "--priority", "10000"), ["--priority", "10000", "0 to 9999"]),
])
def test_team_misuse_is_one_clean_line(aws, batch, teams_config, argv, words):
    result = run_cli("submit", "--config", str(teams_config), *argv)
    assert_one_clean_line(result, *words)
    assert submitted(aws) == []


def test_a_config_without_teams_takes_no_team(aws, batch, default_config):
    config = default_config("batch", name="solo.yaml")
    result = run_cli("submit", "--config", str(config), "--team", "research")
    assert_one_clean_line(result, "--team", "'research'", "teams:")


def test_on_eks_a_team_s_job_goes_to_its_volcano_queue_with_its_label(aws, teams_config):
    """A gang job in the team's queue, a one-node job too (Volcano schedules its pod in that queue); both labelled
    team=NAME, which EKS split cost allocation imports."""
    import yaml as yaml_

    from tests.support.chart_helpers import validate_all

    multi = run_cli("submit", "--config", str(teams_config), "--backend", "eks", "--team", "research", "--nodes", "2", "--name", "r1",
                    "--image", "example.com/train:1", "--dry-run")
    assert multi.code == 0, multi.err
    (job,) = [o for o in yaml_.safe_load_all(multi.out) if o]
    assert (job["kind"], job["spec"]["queue"], job["metadata"]["labels"]["team"]) == ("Job", "team-research", "research")
    assert {t["template"]["metadata"]["labels"]["team"] for t in job["spec"]["tasks"]} == {"research"}
    single = run_cli("submit", "--config", str(teams_config), "--backend", "eks", "--team", "platform-eng",
                     "--nodes", "1", "--name", "e1", "--image", "example.com/train:1", "--dry-run")
    assert single.code == 0, single.err
    (job,) = [o for o in yaml_.safe_load_all(single.out) if o]
    validate_all([job])
    template = job["spec"]["template"]
    assert (job["apiVersion"], template["spec"]["schedulerName"]) == ("batch/v1", "volcano")
    assert template["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "team-platform-eng"
    assert template["metadata"]["labels"]["team"] == "platform-eng"
    # Without --team on EKS: the training queue, as before (teams are required on Batch only).
    plain = run_cli("submit", "--config", str(teams_config), "--backend", "eks", "--nodes", "2", "--name", "p1",
                    "--image", "example.com/train:1", "--dry-run")
    (job,) = [o for o in yaml_.safe_load_all(plain.out) if o]
    assert job["spec"]["queue"] == "training" and "team" not in job["metadata"]["labels"]


# -- ParallelCluster: the team's Slurm account ------------------------------------------------------------------------

HEAD_NODE = "i-0123456789abcdef0"


@pytest.fixture
def slurm_teams(default_config) -> Path:
    path = default_config("parallelcluster", name="slurm-teams.yaml")
    raw = yaml.safe_load(path.read_text())
    raw["teams"] = TEAMS
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def head_node(aws, tmp_path, slurm_teams):
    """The head node Run Command reaches (tests/support/ssm_host.py: its sbatch is the Slurm stand-in), with the batch
    scripts the cluster's setup copies to ~/trainium."""
    import datetime as dt

    from tests.support.rehearsal import Stage
    from tests.support.ssm_host import Host, serve_run_command
    from trainium_cdk.app.config import load_config
    from trainium_cdk.app.parallelcluster.sbatch import head_node_files

    host = Host(tmp_path / "head-node", Stage(tmp_path / "nodes"))
    (host.home / "trainium").mkdir()
    for name, text in head_node_files(load_config(slurm_teams)).items():
        (host.home / "trainium" / name).write_text(text)
    aws.fake("DescribeStacks", lambda params: {"Stacks": [{
        "StackName": "trainium-parallelcluster", "StackStatus": "CREATE_COMPLETE", "CreationTime": dt.datetime(2026, 11, 1),
        "Outputs": [{"OutputKey": "HeadNodeInstanceId", "OutputValue": HEAD_NODE}]}]})
    serve_run_command(aws, {HEAD_NODE: host})
    return host


def test_on_slurm_a_team_s_job_is_submitted_to_its_account(aws, head_node, slurm_teams):
    result = run_cli("submit", "--config", str(slurm_teams), "--team", "platform-eng", "--name", "eval-1")
    assert result.code == 0, result.err
    (request,) = aws.of("SendCommand")
    script = request["Parameters"]["commands"]
    assert [line for line in script if line.startswith("sbatch ")] == [
        'sbatch --parsable --nodes=2 --job-name=eval-1 --account=platform-eng "$HOME"/trainium/train-train.sbatch '
        '"$HOME"/trainium/mlp_train.py']
    (job,) = [json.loads(p.read_text()) for p in head_node.spool.glob("job-*.json")]
    assert (job["account"], job["name"], job["nodes"]) == ("platform-eng", "eval-1", 2)
    assert "account platform-eng" in result.out


def test_on_slurm_the_dry_run_shows_the_account(aws, slurm_teams):
    result = run_cli("submit", "--config", str(slurm_teams), "--team", "research", "--name", "r1", "--dry-run")
    assert result.code == 0, result.err
    assert "--account=research" in result.out and aws.of("SendCommand") == []


@pytest.mark.parametrize(("argv", "words"), [
    ((), ["--team", "a team of the config", "research", "platform-eng", "Slurm account"]),
    (("--team", "research", "--priority", "5"), ["--priority", "5", "left out on ParallelCluster", "fair share"]),
])
def test_on_slurm_team_misuse_is_one_clean_line(aws, slurm_teams, argv, words):
    assert_one_clean_line(run_cli("submit", "--config", str(slurm_teams), *argv), *words)
    assert aws.of("SendCommand") == []
