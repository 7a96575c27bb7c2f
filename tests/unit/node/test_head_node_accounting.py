"""The head node applies the teams' Slurm accounts (neuron_setup.sh --accounting, issue 46), here against a sacctmgr
stand-in that answers an `add` of what exists as Slurm 22.05 does ("Nothing new added", exit 1) or as 25.11, which
ParallelCluster 3.16 ships, does (SLURM_NO_CHANGE_IN_DATA: a notice, exit 0; SchedMD/slurm's sacctmgr at tags
slurm-22-05-8-1 and slurm-25-11-7-1): every command of the file, in order, once slurmdbd answers; what exists already
passes, any other failure fails the setup.

tests/e2e/test_slurm_fair_share.py runs the same setup against a real slurmdbd."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.head_node import HeadNode
from tests.support.helpers import config_with
from trainium_cdk.app.adapters.parallelcluster import slurm_accounting
from trainium_cdk.parallelcluster.accounting import sacctmgr_commands

TEAMS = config_with(backends=["parallelcluster"], teams=[{"name": "research", "share": 3, "slurm_users": ["alice"]},
                                                         {"name": "platform-eng", "share": 1}])
# sacctmgr stand-in: each call a line of its log (arguments by tabs); `list cluster` fails until $STANDIN_DBD_UP
# exists (slurmdbd starting); an `add` of what the state file holds answers as Slurm $STANDIN_SLURM does;
# $STANDIN_FAIL_ON fails the call that contains it.
SACCTMGR = r"""#!/bin/bash
log="$STANDIN_SACCTMGR_LOG"
if [[ "$*" == "--noheader list cluster" ]]; then [[ -e "$STANDIN_DBD_UP" ]] || exit 1; echo t-cluster; exit 0; fi
(IFS=$'\t'; echo "$*") >> "$log"
if [[ -n "${STANDIN_FAIL_ON:-}" && "$*" == *"$STANDIN_FAIL_ON"* ]]; then
  echo " Parent account 'x' doesn't exist on cluster t-cluster"; exit 1
fi
if [[ "$2" == add ]]; then
  key="$3 $4"
  if grep -qxF "$key" "$STANDIN_SACCTMGR_STATE" 2>/dev/null; then
    if [[ "$STANDIN_SLURM" == 22.05 ]]; then echo " Nothing new added."; exit 1; fi
    echo " Data has not changed since time specified"; exit 0
  fi
  echo "$key" >> "$STANDIN_SACCTMGR_STATE"
fi
echo " Done"
"""


@pytest.fixture
def head() -> Iterator[HeadNode]:
    world = Path(tempfile.mkdtemp(prefix="trn-accounting-"))
    node = HeadNode(world, config=TEAMS)
    sacctmgr = world / "opt" / "slurm" / "bin" / "sacctmgr"
    sacctmgr.parent.mkdir(parents=True)
    sacctmgr.write_text(SACCTMGR)
    sacctmgr.chmod(0o755)
    node.env.update(STANDIN_SACCTMGR_LOG=str(world / "sacctmgr.log"), STANDIN_SACCTMGR_STATE=str(world / "state"),
                    STANDIN_DBD_UP=str(world / "dbd-up"), STANDIN_SLURM="22.05")
    (world / "dbd-up").touch()
    yield node
    shutil.rmtree(world, ignore_errors=True)


def _calls(head: HeadNode) -> list[tuple[str, ...]]:
    log = head.root / "sacctmgr.log"
    return [tuple(line.split("\t")) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("slurm", ["22.05", "25.11"])
def test_the_head_node_runs_every_command_of_the_teams_and_again_after_an_update(head, slurm):
    head.env["STANDIN_SLURM"] = slurm
    proc, _ = head.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = [("-i", *command) for command in sacctmgr_commands(slurm_accounting(TEAMS))]
    assert _calls(head) == expected
    # OnNodeUpdated, after an update: every `add` answers "Nothing new added" (exit 1), and the setup passes.
    (head.root / "sacctmgr.log").unlink()
    again, _ = head.run()
    assert again.returncode == 0, again.stdout + again.stderr
    assert _calls(head) == expected
    already = "Nothing new added" if slurm == "22.05" else "Data has not changed since time specified"
    assert again.stdout.count(already) == sum(1 for c in expected if c[1] == "add") == 4  # 2 accounts, 2 users


def test_a_command_that_fails_fails_the_head_node_setup(head):
    proc, _ = head.run(STANDIN_FAIL_ON="add account platform-eng")
    assert proc.returncode == 1
    assert "sacctmgr add account platform-eng" in proc.stderr and "failed (exit 1)" in proc.stderr
    # It stopped there: no user was added to an account that may not exist.
    assert not any(call[1:3] == ("add", "user") for call in _calls(head))


def test_the_accounts_wait_for_slurmdbd_and_give_up_saying_so(head):
    (head.root / "dbd-up").unlink()
    proc, _ = head.run(TRN_ACCOUNTING_WAIT_S="0")
    assert proc.returncode == 1
    assert "slurmdbd did not answer in 0s: the teams have no Slurm accounts" in proc.stderr
    assert _calls(head) == []


def test_without_teams_the_head_node_runs_no_sacctmgr(tmp_path):
    node = HeadNode(tmp_path)  # the harness's config: no teams
    proc, _ = node.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--accounting" not in node.args() and "sacctmgr" not in proc.stdout + proc.stderr
