"""The BERT-large example image: the script of aws-neuron-samples at one pinned commit, every file checked
against its sha256 when the image is built, on the xla track's Neuron training container.

There is no network here (and no Docker): the Dockerfile's pins are checked for shape and against the
job that runs the script. Against the files themselves when a clone of aws-neuron-samples is at hand:
``NEURON_SAMPLES_GIT=<a clone or its git directory> pytest tests/e2e/test_example_bert.py``.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from trainium_cdk.constructs.eks_workloads import BERT_EXAMPLE_DIR
from trainium_cdk.examples import BERT_LARGE_PHASE1_COMMAND, BERT_SCRIPT
from trainium_cdk.facts import versions

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e

DOCKERFILE = BERT_EXAMPLE_DIR / "Dockerfile"
REPOSITORY = "https://raw.githubusercontent.com/aws-neuron/aws-neuron-samples/"
SAMPLE_DIR = "torch-neuronx/training/dp_bert_hf_pretrain"
# The modules the script imports from its own directory (the optimizers of --optimizer; the default,
# AdamW_FP32OptimParams, is the first). test_pins_match_the_samples_repository reads them off the script.
SAMPLE_MODULES = ("adamw_fp32_optim_params", "adamw_fp32_params_copy", "lamb")
# transformers 4.50 removed transformers.AdamW (huggingface/transformers PR 36177), which the script imports.
TRANSFORMERS_WITHOUT_ADAMW = (4, 50)
CLONE = os.environ.get("NEURON_SAMPLES_GIT")


@dataclass
class Add:
    flags: dict[str, str]
    source: str
    dest: str


@dataclass
class Dockerfile:
    syntax: str = ""
    args: dict[str, str] = field(default_factory=dict)
    base: str = ""
    workdir: str = ""
    adds: list[Add] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


def _expand(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), value)


def parse(text: str) -> Dockerfile:
    """The instructions this Dockerfile uses, with its ARG defaults expanded as the build expands them."""
    found = Dockerfile()
    for line in text.splitlines():
        if line.startswith("# syntax="):
            found.syntax = line.removeprefix("# syntax=")
        if not line.strip() or line.startswith("#"):
            continue
        assert not line.endswith("\\"), f"one instruction per line: {line}"
        instruction, _, rest = line.partition(" ")
        if instruction == "ARG":
            name, _, default = rest.partition("=")
            found.args[name] = _expand(default, found.args)
        elif instruction == "FROM":
            found.base = rest
        elif instruction == "WORKDIR":
            found.workdir = _expand(rest, found.args)
        elif instruction == "ADD":
            words = shlex.split(rest)
            flags = dict(w.removeprefix("--").split("=", 1) for w in words if w.startswith("--"))
            source, dest = (_expand(w, found.args) for w in words if not w.startswith("--"))
            found.adds.append(Add(flags, source, dest))
        elif instruction == "RUN":
            found.runs.append(_expand(rest, found.args))
        else:
            raise AssertionError(f"an instruction this test does not read: {line}")
    return found


IMAGE = parse(DOCKERFILE.read_text())


def _added_file(add: Add) -> PurePosixPath:
    """Where an ADD puts its file in the image."""
    dest = PurePosixPath(IMAGE.workdir) / add.dest
    return dest / PurePosixPath(add.source).name if add.dest.endswith("/") else dest


def _sample_path(add: Add) -> str:
    """The file's path in aws-neuron-samples."""
    return add.source.removeprefix(REPOSITORY + IMAGE.args["SAMPLES_COMMIT"] + "/")


def test_the_syntax_has_add_checksum():
    """ADD --checksum is stable from Dockerfile syntax 1.6; an older builder would reject the flag."""
    match = re.fullmatch(r"docker/dockerfile:1\.(\d+)", IMAGE.syntax)
    assert match and int(match.group(1)) >= 6, IMAGE.syntax


def test_on_the_public_copy_of_the_pinned_training_image():
    assert IMAGE.base == f"{versions.NEURON_TRAINING_IMAGE_PUBLIC_REPOSITORY}:${{BASE_TAG}}"
    assert "BASE_TAG" in IMAGE.args and IMAGE.args["BASE_TAG"] == ""  # passed by the stack, from versions.py


def test_every_download_is_at_one_commit_with_its_sha256():
    commit = IMAGE.args["SAMPLES_COMMIT"]
    assert re.fullmatch(r"[0-9a-f]{40}", commit), "a commit, not a branch or tag: they move"
    assert IMAGE.adds
    for add in IMAGE.adds:
        assert add.source.startswith(REPOSITORY + commit + "/"), add.source
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", add.flags.get("checksum", "")), add
        assert add.flags.get("chmod") == "644", "ADD of a URL writes 0600 files otherwise"
    checksums = [a.flags["checksum"] for a in IMAGE.adds]
    assert len(set(checksums)) == len(checksums)


def test_the_job_runs_the_script_the_image_holds_beside_its_modules():
    assert BERT_LARGE_PHASE1_COMMAND[0] == BERT_SCRIPT
    added = {_added_file(a): _sample_path(a) for a in IMAGE.adds}
    script = PurePosixPath(BERT_SCRIPT)
    assert added[script] == f"{SAMPLE_DIR}/{script.name}"
    # Python puts the script's directory first on sys.path: its optimizers must sit beside it.
    for module in SAMPLE_MODULES:
        assert added[script.parent / f"{module}.py"] == f"{SAMPLE_DIR}/{module}.py"
    # The licences travel with the code: the repository's, its NOTICE and the script's third-party ones.
    assert {"LICENSE", "NOTICE", f"{SAMPLE_DIR}/{script.stem}_THIRD-PARTY-LICENSES.txt"} <= set(added.values())


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def test_transformers_is_one_that_still_has_adamw():
    pinned = IMAGE.args["TRANSFORMERS_VERSION"]
    assert _version(pinned) < TRANSFORMERS_WITHOUT_ADAMW
    assert any(f'"transformers=={pinned}"' in run and "pip3 install" in run for run in IMAGE.runs)


def test_the_build_context_is_the_dockerfile_alone():
    """Everything else comes from the pinned downloads: nothing of aws-neuron-samples is in this repository."""
    assert sorted(p.name for p in BERT_EXAMPLE_DIR.iterdir()) == ["Dockerfile"]


# -- against aws-neuron-samples itself -----------------------------------------------------------------------


def _show(path: str) -> bytes:
    commit = IMAGE.args["SAMPLES_COMMIT"]
    done = subprocess.run(["git", "-C", CLONE, "show", f"{commit}:{path}"], capture_output=True, check=False)
    assert done.returncode == 0, f"{commit}:{path} not in {CLONE}: {done.stderr.decode().strip()}"
    return done.stdout


@pytest.mark.skipif(not CLONE, reason="NEURON_SAMPLES_GIT names no clone of aws-neuron-samples (no network here)")
def test_pins_match_the_samples_repository():
    for add in IMAGE.adds:
        digest = hashlib.sha256(_show(_sample_path(add))).hexdigest()
        assert add.flags["checksum"] == f"sha256:{digest}", _sample_path(add)
    script = ast.parse(_show(f"{SAMPLE_DIR}/{PurePosixPath(BERT_SCRIPT).name}"))
    imported = {a.name.split(".")[0] for n in ast.walk(script) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(script) if isinstance(n, ast.ImportFrom) and n.module}
    local = {p.stem for p in map(PurePosixPath, _ls(SAMPLE_DIR)) if p.suffix == ".py"}
    assert imported & local == set(SAMPLE_MODULES)
    from_transformers = {a.name for n in ast.walk(script) if isinstance(n, ast.ImportFrom)
                         and n.module == "transformers" for a in n.names}
    assert "AdamW" in from_transformers  # why transformers is pinned below 4.50
    requirements = _show(f"{SAMPLE_DIR}/requirements.txt").decode().split()
    assert f"transformers=={IMAGE.args['TRANSFORMERS_VERSION']}" in requirements


def _ls(directory: str) -> list[str]:
    commit = IMAGE.args["SAMPLES_COMMIT"]
    done = subprocess.run(["git", "-C", CLONE, "ls-tree", "--name-only", f"{commit}:{directory}"],
                          capture_output=True, text=True, check=True)
    return done.stdout.split()

