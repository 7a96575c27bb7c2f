"""Slurm accounting and fair share of a ParallelCluster cluster, from its teams (issue 46): the slurm.conf settings
ParallelCluster's ``SlurmSettings.CustomSlurmSettings`` carries, and the sacctmgr commands the head node runs.

Pure: no config and no CDK. ``trainium_cdk.app.adapters.parallelcluster`` maps the config's ``teams:`` to a
:class:`SlurmAccounting`; without teams there is none, and the cluster configuration is what it was (one tenant,
Slurm's basic priority, no database).

What the settings promise (docs/guide/teams.md, "Slurm"): a job's priority is mostly its team's fair share, Slurm's
Fair Tree of each account's share (the team's ``share``) against its use, decayed with a half-life of a day (AWS Batch's
fair-share queues use the same day, ``shareDecaySeconds`` 86400); a job's age adds at most a tenth of that, so that a
job waiting a week still yields to a team under its share. Slurm takes a job only from a user with an association to its
account (``AccountingStorageEnforce``): every team's members, and the cluster's OS user, through which `trn submit`
runs ``sbatch --account=TEAM``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.teams import SLURM_USER_NAME, TEAM_NAME

# The weight of the fair-share factor (0 to 1) in a job's priority: it decides the order while teams wait.
PRIORITY_WEIGHT_FAIRSHARE = 10000
# The weight of the age factor, which reaches 1 after PRIORITY_MAX_AGE: a tenth of the fair share's, so that between
# jobs of teams whose fair-share factors differ by more than 0.1 the older job never overtakes.
PRIORITY_WEIGHT_AGE = 1000
PRIORITY_MAX_AGE = "7-0"
# The half-life of past use (days-hours): a team's use of yesterday counts half. Slurm needs it non-zero for
# multifactor priority to decay usage at all.
PRIORITY_DECAY_HALF_LIFE = "1-0"
# Minutes between Slurm's recalculations of usage and fair share (its default is 5): at the scale of a training
# cluster (tens of jobs) the calculation is cheap, and a team's use counts within a minute of its jobs running.
PRIORITY_CALC_PERIOD = "1"
# Jobs only from users with an association to their account (associations), within its limits (limits) and with a
# QOS the association allows (qos: every association allows Slurm's own `normal`).
ACCOUNTING_STORAGE_ENFORCE = "associations,limits,qos"
# Each account's organization in sacctmgr (a label: `sacctmgr show account` lists the teams this project made).
ORGANIZATION = "trainium-cdk"
# The accounting database's least Aurora Serverless v2 capacity (ACUs): slurmdbd keeps a connection open, so it never
# pauses and this is what it costs while nothing runs (app/cost.py's idle floor).
DATABASE_MIN_CAPACITY_ACU = 0.5
# The file of sacctmgr commands the head node fetches (neuron_setup.sh --accounting): one command a line, its words
# separated by tabs (no word holds a tab or a newline: team and user names are checked).
COMMANDS_FILE_NAME = "slurm-accounting.tsv"


# ParallelCluster's Database.DatabaseName: 0-9, a-z and _, at most 64.
_DATABASE_NAME_LENGTH = 64


def database_name(cluster_name: str) -> str:
    """The database (schema) of a cluster's accounting: ``slurm_`` and the cluster's name in MySQL's letters."""
    return ("slurm_" + re.sub(r"[^0-9a-z_]", "_", cluster_name.lower()))[:_DATABASE_NAME_LENGTH]


@dataclass(frozen=True)
class SlurmAccount:
    """One team's Slurm account.

    :param name: the team's name (the account's).
    :param share: its share against the other accounts (sacctmgr's Fairshare).
    :param users: POSIX user names of its members on the cluster. Default: none (only the submitter).
    """

    name: str
    share: int
    users: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not TEAM_NAME.fullmatch(self.name):
            raise ConfigError("account", self.name, "a team name: a lower-case DNS label of at most 32 characters")
        if self.share < 1:
            raise ConfigError(f"account {self.name}: share", self.share, "a whole number of 1 or more")
        for user in self.users:
            if not SLURM_USER_NAME.fullmatch(user) or user == "root":
                raise ConfigError(f"account {self.name}: users", user, "a POSIX user name other than root")


@dataclass(frozen=True)
class SlurmAccounting:
    """The teams' accounts on a Slurm cluster with accounting.

    :param accounts: one account per team, in the config's order.
    :param submitter: the user `trn submit` runs sbatch as on the head node (the cluster's OS user): a member of every
        account, its default the first.
    """

    accounts: tuple[SlurmAccount, ...]
    submitter: str

    def __post_init__(self) -> None:
        if not self.accounts:
            raise ConfigError("accounts", [], "at least one team (without teams, no accounting)")
        if not SLURM_USER_NAME.fullmatch(self.submitter) or self.submitter == "root":
            raise ConfigError("submitter", self.submitter, "a POSIX user name other than root")

    def memberships(self) -> dict[str, list[str]]:
        """User -> the accounts it belongs to, in the config's order (the first is its default account)."""
        members: dict[str, list[str]] = {self.submitter: [a.name for a in self.accounts]}
        for account in self.accounts:
            for user in account.users:
                names = members.setdefault(user, [])
                if account.name not in names:
                    names.append(account.name)
        return members


def slurm_conf_settings() -> list[tuple[str, str]]:
    """The slurm.conf settings of fair share and enforced accounting, in order: the same for any teams (their shares
    live in the accounts). ParallelCluster sets the rest of accounting itself from ``SlurmSettings.Database``
    (AccountingStorageType, -Host, -Port, -User and JobAcctGatherType are on its deny-list for CustomSlurmSettings)."""
    return [
        ("PriorityType", "priority/multifactor"),
        ("PriorityWeightFairshare", str(PRIORITY_WEIGHT_FAIRSHARE)),
        ("PriorityWeightAge", str(PRIORITY_WEIGHT_AGE)),
        ("PriorityMaxAge", PRIORITY_MAX_AGE),
        ("PriorityDecayHalfLife", PRIORITY_DECAY_HALF_LIFE),
        ("PriorityCalcPeriod", PRIORITY_CALC_PERIOD),
        ("AccountingStorageEnforce", ACCOUNTING_STORAGE_ENFORCE),
    ]


def custom_slurm_settings() -> list[dict[str, str]]:
    """:func:`slurm_conf_settings` as ParallelCluster's ``SlurmSettings.CustomSlurmSettings``: one mapping per
    setting."""
    return [{key: value} for key, value in slurm_conf_settings()]


def sacctmgr_commands(accounting: SlurmAccounting) -> list[tuple[str, ...]]:
    """The sacctmgr commands (arguments after ``sacctmgr -i``) that make the cluster's accounts what ``accounting``
    says. Run again (the head node's OnNodeUpdated after every cluster update), they change what differs and add what
    is missing; an ``add`` of what exists answers "Nothing new added" (exit 1), which the head node takes as done.
    Nothing is deleted: an account or member dropped from the config stays (its jobs' history with it)."""
    commands: list[tuple[str, ...]] = [
        # root's own association takes no share beside the teams' (Slurm's Fairshare=parent): the teams' shares are
        # the whole (sshare's NormShares 0.75 and 0.25 for shares 3 and 1).
        ("modify", "user", "where", "name=root", "account=root", "set", "Fairshare=parent"),
    ]
    for account in accounting.accounts:
        commands.append(("add", "account", account.name, f"Description=team {account.name}",
                         f"Organization={ORGANIZATION}", f"Fairshare={account.share}"))
        # An account added before keeps its share through `add`: a changed share is set here.
        commands.append(("modify", "account", "where", f"name={account.name}", "set", f"Fairshare={account.share}"))
    for user, names in accounting.memberships().items():
        commands.append(("add", "user", user, f"Account={','.join(names)}", f"DefaultAccount={names[0]}"))
        commands.append(("modify", "user", "where", f"name={user}", "set", f"DefaultAccount={names[0]}"))
    return commands


def render_commands(accounting: SlurmAccounting) -> str:
    """The head node's file of :func:`sacctmgr_commands` (:data:`COMMANDS_FILE_NAME`): a command a line, its words
    separated by tabs."""
    return "".join("\t".join(command) + "\n" for command in sacctmgr_commands(accounting))
