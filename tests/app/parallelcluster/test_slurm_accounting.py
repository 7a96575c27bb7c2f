"""Slurm accounting and fair share from the config's teams (issue 46): the slurm.conf settings and sacctmgr commands
(trainium_cdk/parallelcluster/accounting.py), the config's members, and what a cluster without teams keeps.

The settings and commands run on a real Slurm in tests/e2e/test_slurm_fair_share.py."""

from __future__ import annotations

import pytest

from tests.support.helpers import config_with
from trainium_cdk.app.config import ConfigError
from trainium_cdk.parallelcluster.accounting import (
    SlurmAccount,
    SlurmAccounting,
    custom_slurm_settings,
    render_commands,
    sacctmgr_commands,
)

TEAMS = [{"name": "research", "share": 3, "slurm_users": ["alice", "carol"]},
         {"name": "platform-eng", "share": 1, "slurm_users": ["bob", "carol"]}]
ACCOUNTING = SlurmAccounting(
    accounts=(SlurmAccount("research", 3, ("alice", "carol")), SlurmAccount("platform-eng", 1, ("bob", "carol"))),
    submitter="ubuntu",
)


def _associations(commands: list[tuple[str, ...]]) -> dict[str, tuple[list[str], str]]:
    """User -> (its accounts, its default account), as the `add user` and `modify user` commands leave them."""
    found: dict[str, tuple[list[str], str]] = {}
    for command in commands:
        if command[:2] == ("add", "user"):
            fields = dict(word.split("=", 1) for word in command[3:])
            found[command[2]] = (fields["Account"].split(","), fields["DefaultAccount"])
        elif command[:2] == ("modify", "user") and command[3] != "name=root":
            user = command[3].removeprefix("name=")
            assert found[user][1] == command[-1].removeprefix("DefaultAccount=")  # the same default, set again
    return found


def test_one_account_per_team_with_its_share_as_fairshare():
    commands = sacctmgr_commands(ACCOUNTING)
    added = {c[2]: dict(w.split("=", 1) for w in c[3:]) for c in commands if c[:2] == ("add", "account")}
    assert {name: fields["Fairshare"] for name, fields in added.items()} == {"research": "3", "platform-eng": "1"}
    assert {fields["Organization"] for fields in added.values()} == {"trainium-cdk"}
    # A share changed in the config reaches an account that exists (`add` leaves it as it was).
    modified = [c for c in commands if c[:2] == ("modify", "account")]
    assert modified == [("modify", "account", "where", "name=research", "set", "Fairshare=3"),
                        ("modify", "account", "where", "name=platform-eng", "set", "Fairshare=1")]
    # Every account exists before a user is added to it; root's own association takes no share.
    first_user = next(i for i, c in enumerate(commands) if c[:2] == ("add", "user"))
    assert all(c[:2] != ("add", "account") for c in commands[first_user:])
    assert commands[0] == ("modify", "user", "where", "name=root", "account=root", "set", "Fairshare=parent")


def test_members_and_the_submitter_get_their_teams_accounts():
    assert _associations(sacctmgr_commands(ACCOUNTING)) == {
        # trn submit runs sbatch --account=TEAM as the OS user: it belongs to every team.
        "ubuntu": (["research", "platform-eng"], "research"),
        "alice": (["research"], "research"),
        "bob": (["platform-eng"], "platform-eng"),
        # In two teams: both accounts, the first team that lists the user its default.
        "carol": (["research", "platform-eng"], "research"),
    }


def test_the_commands_file_is_the_commands_a_line_each_words_by_tabs():
    text = render_commands(ACCOUNTING)
    assert [tuple(line.split("\t")) for line in text.splitlines()] == sacctmgr_commands(ACCOUNTING)
    assert text.endswith("\n") and "\n\n" not in text


def test_the_slurm_conf_settings_are_multifactor_fair_share_with_enforced_accounting():
    settings = custom_slurm_settings(ACCOUNTING)
    assert all(len(s) == 1 for s in settings)  # ParallelCluster's form: one setting per mapping
    merged = {k: v for s in settings for k, v in s.items()}
    assert merged["PriorityType"] == "priority/multifactor"
    assert merged["AccountingStorageEnforce"] == "associations,limits,qos"
    # Fair share decides; age adds at most a tenth of it; usage decays (a half-life of 0 would keep it forever).
    assert int(merged["PriorityWeightFairshare"]) == 10 * int(merged["PriorityWeightAge"]) > 0
    assert merged["PriorityDecayHalfLife"] == "1-0"
    assert not {k.lower() for k in merged} & {"accountingstoragetype", "accountingstoragehost", "jobacctgathertype"}


@pytest.mark.parametrize(("team", "words"), [
    ({"name": "a", "share": 1, "slurm_users": ["root"]}, ["teams[0].slurm_users", "'root'", "other than root"]),
    ({"name": "a", "share": 1, "slurm_users": ["Alice"]}, ["teams[0].slurm_users", "'Alice'", "POSIX user name"]),
    ({"name": "a", "share": 1, "slurm_users": ["al ice"]}, ["teams[0].slurm_users", "'al ice'"]),
    ({"name": "a", "share": 1, "slurm_users": ["al", "al"]}, ["teams[0].slurm_users", "each user once"]),
    ({"name": "a", "share": 1, "slurm_users": "alice"}, ["teams[0].slurm_users", "'alice'"]),
])
def test_members_that_are_no_posix_user_name_are_refused_in_one_line(team, words):
    with pytest.raises(ConfigError) as caught:
        config_with(backends=["parallelcluster"], teams=[team])
    message = str(caught.value)
    assert "\n" not in message
    assert all(word in message for word in words), message


def test_two_teams_with_a_name_and_a_share_are_a_complete_config():
    config = config_with(backends=["parallelcluster"], teams=[{"name": "research", "share": 3},
                                                              {"name": "platform-eng", "share": 1}])
    assert [t.slurm_users for t in config.teams] == [(), ()]


def test_accounting_refuses_what_sacctmgr_would_misread():
    with pytest.raises(ConfigError, match="POSIX user name other than root"):
        SlurmAccount("research", 3, ("root",))
    with pytest.raises(ConfigError, match="at least one team"):
        SlurmAccounting(accounts=(), submitter="ubuntu")
    with pytest.raises(ConfigError, match="a team name"):
        SlurmAccount("a\tb", 1)
