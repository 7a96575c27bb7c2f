"""The config's teams: who shares the platform, and in what proportion (issue 46).

A team is a name and a share, its weight against the other teams' when they want the same nodes. With ``teams:``
each AWS Batch job queue schedules by fair share (a share identifier per team, weighted by its share) and
`trn submit --team` says whose a job is; without it, the queues stay FIFO (one tenant). On ParallelCluster each team is
a Slurm account of that share (parallelcluster/accounting.py), its ``slurm_users`` the POSIX users Slurm takes its jobs
from.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from trainium_cdk.app.config.base import _Model
from trainium_cdk.facts.teams import MAX_SHARE, SLURM_USER_NAME, TEAM_NAME


class TeamSettings(_Model):
    """A team of the platform's users."""

    name: str = Field(description="A lower-case DNS label of at most 32 characters (letters, digits, '-').")
    share: int = Field(1, strict=True, description="Its weight in fair share against the other teams': a team of "
                       "share 3 gets three times the nodes of a team of share 1 while both wait for them (1-999).")

    slurm_users: tuple[str, ...] = Field(
        (), description="ParallelCluster: the POSIX user names (on the head node) of the team's members, whom Slurm "
        "lets submit to the team's account (sbatch --account=NAME; the first team that lists a user is its default). "
        "The cluster's OS user, through which `trn submit` runs sbatch, belongs to every team. Default: none.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TEAM_NAME.fullmatch(value):
            raise ValueError("a lower-case DNS label of at most 32 characters (letters, digits, '-'), such as "
                             "research")
        return value

    @field_validator("slurm_users")
    @classmethod
    def _slurm_users(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for user in value:
            if user == "root":
                raise ValueError("'root' is Slurm's administrator, in no team: a POSIX user name other than root")
            if not SLURM_USER_NAME.fullmatch(user):
                raise ValueError(f"{user!r}: a POSIX user name: a lower-case letter or '_', then letters, digits, "
                                 "'_' and '-', at most 32 (such as alice)")
        if len(set(value)) != len(value):
            raise ValueError("each user once")
        return value

    @field_validator("share")
    @classmethod
    def _share(cls, value: int) -> int:
        if not 1 <= value <= MAX_SHARE:
            raise ValueError(f"a whole number from 1 to {MAX_SHARE}")
        return value
