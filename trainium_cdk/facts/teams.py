"""Teams (issue 46): what a team's name may be, how large a share, and how each service spells it."""

from __future__ import annotations

import re
from typing import overload

# A team's name: a Kubernetes namespace name and a tag value take it as it is; AWS Batch's share identifier takes
# letters, digits and '_' (and a trailing '*'), so a '-' becomes '_' there (share_identifier).
TEAM_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")
# A team member's POSIX user name on a Slurm cluster (useradd's portable names: a lower-case letter or '_' first, then
# letters, digits, '_' and '-', at most 32): the name Slurm's accounting associates with the team's account.
SLURM_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# Batch's weight factors run 0.0001 to 999.9999 (constructs/batch_queue.py): shares of 1 and 999 are 999.0 and 1.0.
MAX_SHARE = 999
# The tag (and label) a team's jobs carry: cost allocation reads it.
TEAM_TAG = "team"
# A fair-share Batch queue's name: the FIFO queue's and this suffix. CloudFormation replaces a FIFO queue by a
# fair-share one (Batch gives a queue its policy when it creates it) and cannot create it under the name the old
# one still holds.
FAIR_SHARE_QUEUE_SUFFIX = "-teams"
# `trn submit --priority`: AWS Batch's schedulingPriorityOverride, 0 to 9999 (higher goes first within a team's
# share); 0 unless given.
MAX_PRIORITY = 9999


@overload
def queue_name(name: str, *, fair_share: bool) -> str: ...
@overload
def queue_name(name: None, *, fair_share: bool) -> None: ...
def queue_name(name: str | None, *, fair_share: bool) -> str | None:
    """A group's Batch queue name: ``name``, a fair-share queue's with ``-teams`` (the construct names it so, the
    CLI's dry run reads it so); no name (the construct's generated one) stays None."""
    return f"{name}{FAIR_SHARE_QUEUE_SUFFIX}" if name and fair_share else name


def team_queue(team: str) -> str:
    """A team's Volcano queue on EKS (cluster-wide names: never the training queue's or Volcano's own default)."""
    return f"team-{team}"


def share_identifier(team: str) -> str:
    """A team's AWS Batch share identifier: its name with '_' for '-'."""
    return team.replace("-", "_")
