"""`trn submit --team` on AWS Batch (issue 46): the team's share identifier, a scheduling priority and the team tag
in the SubmitJob request (asserted whole, sent to moto's Batch), and one clean line for every misuse."""

from __future__ import annotations

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
    (("--team", "research", "--backend", "eks"), ["--team", "batch"]),
])
def test_team_misuse_is_one_clean_line(aws, batch, teams_config, argv, words):
    result = run_cli("submit", "--config", str(teams_config), *argv)
    assert_one_clean_line(result, *words)
    assert submitted(aws) == []


def test_a_config_without_teams_takes_no_team(aws, batch, default_config):
    config = default_config("batch", name="solo.yaml")
    result = run_cli("submit", "--config", str(config), "--team", "research")
    assert_one_clean_line(result, "--team", "'research'", "teams:")
