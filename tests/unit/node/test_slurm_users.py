"""Slurm for every user of a ParallelCluster cluster, not only `ubuntu` (issue 32).

Ubuntu creates home directories 750 (since 21.04): the venv and batch scripts every job reads live in the
cluster's directory on /home, owned by root, and each job marks the venv it uses in a sticky `.jobs` every user
may write. The compile cache /fsx/neuron-cache is shared by the group `neuron` (setgid 2775, a default ACL that
keeps what jobs write group-writable), no longer world-writable (1777).

The head node's setup runs as it is in a folder standing for its root (tests/support/head_node.py). Then, where this
machine lets a test switch users (root: setpriv), the batch script runs through the Slurm rehearsal as three real
uids: `ubuntu` (1000), another member of the group, and a user outside it. Their processes cannot run this test's
Python where it lives under root's home (700), so there the stage's Python stand-ins run on the system's Python and
torchrun is a stand-in (:data:`TORCHRUN`): what is under test is who may read and write what, not torch.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.head_node import NEW_PINS, OS_USER_UID, HeadNode
from tests.support.helpers import config_with
from tests.support.rehearsal import Stage, run_slurm_script
from trainium_cdk.app.parallelcluster.sbatch import render_sbatch
from trainium_cdk.facts.names import CACHE_GROUP
from trainium_cdk.parallelcluster.configuration import SHARED_SCRIPTS, VENV

ROOT_USER = os.geteuid() == 0
# The gid the head node's system gives the group (a test as root picks one no account of this machine has).
GROUP_GID = 4242 if ROOT_USER else os.getgid()
ACL_DEFAULT = "system.posix_acl_default"


@pytest.fixture
def world() -> Iterator[Path]:
    """A folder every uid may enter (pytest's own tmp folders are 700): what stands for the head node's /."""
    path = Path(tempfile.mkdtemp(prefix="trn-users-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def head(world) -> HeadNode:
    (world / "head").mkdir()
    return HeadNode(world / "head", gid=GROUP_GID)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _default_acl(path: Path) -> dict[str, int] | None:
    """The default ACL's base entries (tag -> rwx bits), or None when the directory has none."""
    try:
        blob = os.getxattr(path, ACL_DEFAULT)
    except OSError:
        return None
    tags = {0x01: "user", 0x04: "group", 0x10: "mask", 0x20: "other"}
    entries = [struct.unpack_from("<HHI", blob, 4 + 8 * i) for i in range((len(blob) - 4) // 8)]
    return {tags[tag]: perm for tag, perm, _ in entries if tag in tags}


def test_the_venv_and_scripts_every_user_reads_are_the_clusters_not_ubuntus(head):
    proc, calls = head.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert VENV == "/home/trainium-cdk/neuron-venv" and SHARED_SCRIPTS == "/home/trainium-cdk/trainium"
    target = Path(os.readlink(head.link))
    assert target.parent == head.home and _mode(head.home) == 0o755 and _mode(target) == 0o755
    # Built by root, not as ubuntu: no user's job can change the venv others import.
    assert not any(c.startswith("sudo ") and (" -m venv " in c or " -m pip " in c) for c in calls), calls
    if ROOT_USER:
        assert {target.stat().st_uid, (target / "installed.txt").stat().st_uid} == {0}
    # Each job marks the venv it uses: a sticky directory every user writes, as /tmp.
    assert _mode(target / ".jobs") == 0o1777
    # The batch scripts: for every user beside the venv (readable), and the OS user's copy as before.
    shared = sorted(p.name for p in (head.home / "trainium").iterdir())
    assert shared and shared == sorted(p.name for p in (head.ubuntu / "trainium").iterdir())
    assert {_mode(head.home / "trainium" / name) for name in shared} == {0o644}


def test_the_compile_cache_is_the_groups_and_what_a_job_writes_there_stays_group_writable(head):
    proc, calls = head.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"groupadd --system {CACHE_GROUP}" in calls and f"usermod -aG {CACHE_GROUP} ubuntu" in calls
    assert _mode(head.cache) == 0o2775 and head.cache.stat().st_gid == GROUP_GID  # not 1777: not everyone's
    assert _default_acl(head.cache) == {"user": 7, "group": 7, "other": 5}
    # A job with the usual umask (022) creates its cache set and a graph: both the group's, group-writable.
    old = os.umask(0o022)
    try:
        (head.cache / "train").mkdir()
        (head.cache / "train" / "model.neff").write_text("graph")
    finally:
        os.umask(old)
    assert _mode(head.cache / "train") == 0o2775 and (head.cache / "train").stat().st_gid == GROUP_GID
    assert _mode(head.cache / "train" / "model.neff") == 0o664
    # Another update finds the group's cache and changes nothing in it.
    proc, calls = head.run()
    assert proc.returncode == 0 and "passes to group" not in proc.stdout, proc.stdout
    assert (calls.count(f"groupadd --system {CACHE_GROUP}"), [c for c in calls if c.startswith("setfacl")]) == (
        0, [f"setfacl -d -m u::rwx,g::rwx,o::rx {head.cache}"])


@pytest.mark.skipif(not ROOT_USER, reason="a cache of other users' files needs root to make (chown)")
def test_a_world_writable_cache_of_an_older_version_passes_to_the_group(head):
    old = head.cache / "train"
    old.mkdir(parents=True)
    head.cache.chmod(0o1777)
    old.chmod(0o755)
    (old / "model.neff").write_text("graph")
    (old / "model.neff").chmod(0o644)
    for path in (old, old / "model.neff"):
        os.chown(path, OS_USER_UID, OS_USER_UID)
    proc, _ = head.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"passes to group {CACHE_GROUP} ({GROUP_GID})" in proc.stdout
    assert (_mode(head.cache), _mode(old), _mode(old / "model.neff")) == (0o2775, 0o2775, 0o664)
    assert {p.stat().st_gid for p in (head.cache, old, old / "model.neff")} == {GROUP_GID}
    assert (old / "model.neff").stat().st_uid == OS_USER_UID and _default_acl(old) is not None


def test_the_venv_in_ubuntus_home_serves_jobs_queued_before_and_goes_once_unused(head):
    """A cluster set up before issue 32: its venv and link in /home/ubuntu, a job still running from it."""
    legacy = head.ubuntu / "neuron-venv-2.28.0-0123456789ab"
    (legacy / ".jobs").mkdir(parents=True)
    (legacy / ".jobs" / "4242").touch()
    (head.ubuntu / "neuron-venv").symlink_to(legacy)
    squeue = head.root / "opt" / "slurm" / "bin" / "squeue"
    squeue.parent.mkdir(parents=True)
    squeue.write_text("#!/bin/sh\necho 4242\n")
    squeue.chmod(0o755)
    proc, _ = head.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    target = os.readlink(head.link)
    # A batch script sbatch copied before the update activates the old link: it now names the current venv.
    assert os.readlink(head.ubuntu / "neuron-venv") == target and legacy.is_dir()
    squeue.write_text("#!/bin/sh\nexit 0\n")  # the job ended
    proc, _ = head.run(NEW_PINS)
    assert proc.returncode == 0 and not legacy.exists(), proc.stdout
    assert os.readlink(head.ubuntu / "neuron-venv") == os.readlink(head.link) != target


# -- jobs of three users through the Slurm rehearsal -----------------------------------------------------------

# The job's program stands for what the Neuron compiler does in it: each process writes a graph into the cache
# set the launcher gives it (NEURON_CC_FLAGS --cache_dir).
COMPILE = """import json, os, pathlib, re
cache = pathlib.Path(re.search(r"--cache_dir=(\\S+)", os.environ["NEURON_CC_FLAGS"]).group(1))
graph = cache / f"MODULE_{os.getuid()}_{os.environ['RANK']}"
graph.mkdir()
(graph / "model.neff").write_text("compiled")
print(json.dumps({"graph": str(graph), "uid": os.getuid()}))
"""
USERS = {"ubuntu": (OS_USER_UID, True), "alice": (2001, True), "mallory": (3001, False)}
SYSTEM_PYTHON = "/usr/bin/python3"
# torchrun stand-in: NPROC_PER_NODE processes of the program (the launcher exports it), with torchrun's ranks; its
# own options (--nnodes=..., one word each) are left out.
TORCHRUN = f"""#!/bin/sh
while [ "${{1#--}}" != "$1" ]; do shift; done
i=0 pids=""
while [ "$i" -lt "$NPROC_PER_NODE" ]; do
  RANK=$((NODE_RANK * NPROC_PER_NODE + i)) LOCAL_RANK=$i WORLD_SIZE=$((NNODES * NPROC_PER_NODE)) {SYSTEM_PYTHON} "$@" &
  pids="$pids $!" i=$((i + 1))
done
code=0
for pid in $pids; do wait "$pid" || code=1; done
exit "$code"
"""


def _as(name: str) -> list[str]:
    uid, member = USERS[name]
    groups = f"{uid},{GROUP_GID}" if member else str(uid)
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={groups}", "--"]


def _job(world: Path, head: HeadNode, name: str, job_id: str) -> tuple[int, str]:
    """`sbatch -N 1 <the cluster's batch script> /fsx/code/compile.py` as user ``name`` from a folder of theirs."""
    config = config_with(backends=["parallelcluster"])
    script = render_sbatch(config, config.compute_groups[0])
    stage = Stage(world / name, fsx=head.root / "fsx")
    stage.venv = head.link  # the head node's venv, as the setup left it
    for tool in stage.bin.iterdir():  # the stage's Python stand-ins on a Python every uid may run
        text = tool.read_text()
        if text.startswith(f"#!{sys.executable}\n"):
            tool.write_text(f"#!{SYSTEM_PYTHON}\n" + text.split("\n", 1)[1])
    (stage.bin / "torchrun").write_text(TORCHRUN)
    (stage.bin / "torchrun").chmod(0o755)
    os.chown(stage.root, USERS[name][0], USERS[name][0])
    (result,) = run_slurm_script(stage, script, 1, "/fsx/code/compile.py", env={"USER": name}, job_id=job_id,
                                 user=_as(name))
    return result.code, result.output


@pytest.mark.e2e
@pytest.mark.skipif(not ROOT_USER or not shutil.which("setpriv") or not Path(SYSTEM_PYTHON).exists(),
                    reason="switching uids needs root and setpriv; the users' processes need the system's Python")
def test_jobs_of_a_second_user_run_and_share_the_compile_cache_with_the_group_only(world, head):
    assert head.run()[0].returncode == 0
    (head.root / "fsx" / "code").mkdir()
    (head.root / "fsx" / "code" / "compile.py").write_text(COMPILE)
    (head.root / "fsx" / "checkpoints").mkdir(mode=0o1777)  # as every node's Lustre setup makes it (lustre_tuning.sh)
    (head.root / "fsx" / "checkpoints").chmod(0o1777)
    cache_set = head.cache / config_with(backends=["parallelcluster"]).compute_groups[0].name

    code, out = _job(world, head, "ubuntu", "101")
    assert code == 0, out
    code, out = _job(world, head, "alice", "102")  # another user: the venv, the markers, ubuntu's cache set
    assert code == 0, out
    # This test's graphs (compile.py); the rehearsal's stand-in of Neuron's compiler cache adds its own
    # neuronxcc-<version>/ folder beside them (trainium_cdk/rehearsal: the substitution table).
    graphs = sorted(p.name for p in cache_set.iterdir() if p.name.startswith("MODULE_"))
    assert graphs == [f"MODULE_{uid}_{rank}" for uid in (OS_USER_UID, 2001) for rank in (0, 1)], graphs
    assert {p.stat().st_gid for p in cache_set.rglob("*")} == {GROUP_GID}
    jobs = Path(os.readlink(head.link)) / ".jobs"
    assert {(p.name, p.stat().st_uid) for p in jobs.iterdir()} == {("101", OS_USER_UID), ("102", 2001)}

    # A user outside the group reads the venv and marks it, but cannot write compiled graphs others load.
    code, out = _job(world, head, "mallory", "103")
    assert code != 0 and "Permission denied" in out, out
    assert sorted(p.name for p in cache_set.iterdir() if p.name.startswith("MODULE_")) == graphs
    assert [json.loads(line[line.index("{"):])["uid"] for line in out.splitlines() if '"graph"' in line] == []
