"""A team's own dependency (issue 49, "Dependencies on every backend"): a requirements.txt beside the script naming a
package that no base image and not the project's .venv has. On ParallelCluster and the development instance the job's
scripts install it into a virtual environment layered on the node's Python (node/job_venv.sh) before the launcher;
on EKS and Batch the image holds it (`trn image init`'s Dockerfile installs requirements.txt), and the rehearsal
builds the same layered environment in its place. The package comes from a wheel this test builds (the index
options in requirements.txt, as a private index would be named): nothing is downloaded, and .venv is left as it was.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli_support import run_cli

pytestmark = pytest.mark.e2e

USES_ITS_PACKAGE = '''\
import os, pathlib, sys
import teamutil
shards = sorted(pathlib.Path(sys.argv[2]).glob("*.jsonl"))
if os.environ["RANK"] == "0":
    print("TEAMUTIL", teamutil.answer(), sys.executable, len(shards), flush=True)
'''
CONFIG = {"region": "us-west-2", "backends": ["eks", "batch", "parallelcluster", "instance"],
          "compute_groups": [{"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2}],
          "instance": {"instance_type": "trn1.32xlarge"}}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """teamutil 1.0, a wheel built here: the team's own package, on no index."""
    root = tmp_path_factory.mktemp("teamutil")
    (root / "src" / "teamutil").mkdir(parents=True)
    (root / "src" / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                                 '"setuptools.build_meta"\n[project]\nname = "teamutil"\nversion = "1.0"\n')
    (root / "src" / "teamutil" / "__init__.py").write_text("def answer():\n    return 42\n")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(root / "wheels"), str(root / "src")], check=True)
    return root / "wheels"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wheels: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(USES_ITS_PACKAGE)
    (tmp_path / "requirements.txt").write_text(f"--no-index\n--find-links {wheels}\nteamutil==1.0\n")
    (tmp_path / "data").mkdir()
    for shard in range(2):
        (tmp_path / "data" / f"part-{shard}.jsonl").write_text('{"text": "a note"}\n')
    (tmp_path / "trn.yaml").write_text(yaml.safe_dump(CONFIG))
    return tmp_path


def _in_dot_venv() -> bool:
    return subprocess.run([sys.executable, "-c", "import teamutil"], capture_output=True).returncode == 0


@pytest.mark.parametrize("backend", ["eks", "batch", "parallelcluster", "instance"])
def test_a_package_of_the_jobs_requirements_reaches_every_rank(project, backend):
    assert not _in_dot_venv()
    # Its data seeded where the job reads it on the cluster (--data), as a user runs it.
    result = run_cli("rehearse", "--config", "trn.yaml", "--backend", backend, "--data", "data=/fsx/datasets/team",
                     "--", "train.py", "--data", "/fsx/datasets/team")
    assert result.code == 0, result.out[-3000:] + result.err
    (seen,) = [line.split("TEAMUTIL ", 1)[1] for line in result.out.splitlines() if "TEAMUTIL " in line]
    answer, python, shards = seen.split()
    # In a layered environment of its own (kept beside the stand-in /fsx for the next run), not in .venv.
    assert answer == "42" and python.startswith(str(project / ".trn-rehearse" / "venvs")), seen
    assert shards == "2"
    assert not _in_dot_venv()


def test_without_its_package_the_job_fails_as_it_would_on_a_node(project):
    """No requirements.txt: the package is missing in the rehearsal as on a node (before, .venv decided)."""
    (project / "requirements.txt").unlink()
    result = run_cli("rehearse", "--config", "trn.yaml", "--backend", "parallelcluster", "--", "train.py", "--data",
                     "data")
    assert result.code == 1
    assert "No module named 'teamutil'" in result.out


@pytest.mark.parametrize("backend", ["batch", "parallelcluster"])
def test_a_requirement_that_cannot_install_stops_before_the_nodes(project, backend):
    (project / "requirements.txt").write_text("--no-index\nno-such-package-anywhere==9\n")
    result = run_cli("rehearse", "--config", "trn.yaml", "--backend", backend, "--", "train.py", "--data", "data")
    assert result.code == 1
    said = result.out + result.err
    assert "no-such-package-anywhere" in said and "TEAMUTIL" not in said
