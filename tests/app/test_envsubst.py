"""Filling dist/ placeholders cannot corrupt a job: each file names its placeholders and the one envsubst
command that fills exactly those, and that command, run as written with the real envsubst, changes
nothing else. A bare envsubst (the README's old pipe) empties the launcher's variables and the job fails.

envsubst is GNU gettext's (Debian package gettext-base). The tests find it on PATH, else install it with
apt-get when they run as root, else skip with the install command.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_rehearsal import run_kubernetes_job
from tests.support.helpers import ROOT, config_with
from tests.support.rehearsal import Stage, assert_trained
from trainium_cdk.app.dist import PLACEHOLDERS, write_dist
from trainium_cdk.app.parallelcluster.cluster_config import placeholder_names
from trainium_cdk.app.parallelcluster.image import IMAGE_PLACEHOLDERS
from trainium_cdk.runtime import envsubst

# With the example images built (eks.example_images): the BERT-large job and its ${BERT_IMAGE} placeholder exist.
CONFIG = config_with(project="trainium", backends=["eks", "parallelcluster"], eks={"example_images": True})
# Every placeholder name the code makes: EKS manifests, the cluster and image configurations.
KNOWN = tuple(dict.fromkeys((*PLACEHOLDERS, *placeholder_names(CONFIG), *IMAGE_PLACEHOLDERS)))
# A value for each: distinct, and with characters a shell or YAML would mangle if quoting were wrong.
VALUES = {name: f"v-{name.lower()}-$x/&'\"" for name in KNOWN}
HEADER_COMMAND = re.compile(r"^#   (envsubst '[^']*' < \S+ .+)$", re.M)
MLP = "dist/eks/workloads/job-mlp.k8s.yaml"


def _envsubst() -> str:
    found = shutil.which("envsubst")
    if found:
        return found
    if shutil.which("apt-get") and os.geteuid() == 0:
        install = ["apt-get", "install", "-y", "--no-install-recommends", envsubst.PACKAGE]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
        found = shutil.which("envsubst")
        if found:
            return found
    pytest.skip(f"envsubst is not installed and cannot be installed here: apt-get install {envsubst.PACKAGE}")


@pytest.fixture(scope="module")
def tool() -> str:
    return _envsubst()


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A folder holding dist/ as `make synth` writes it (headers name dist/... relative to here)."""
    root = tmp_path_factory.mktemp("project")
    write_dist(CONFIG, root / "dist")
    return root


def _files(project: Path) -> list[Path]:
    return sorted(p for p in (project / "dist").rglob("*") if p.is_file() and p.suffix == ".yaml")


def _kubectl(project: Path) -> Path:
    """kubectl stand-in: `kubectl apply -f -` keeps what it was given."""
    bin_dir = project / "bin"
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / "kubectl"
    path.write_text('#!/bin/sh\n[ "$*" = "apply -f -" ] || { echo "unexpected: $*" >&2; exit 9; }\ncat > "$APPLIED"\n')
    path.chmod(0o755)
    return bin_dir


def _run(project: Path, line: str, tool: str, out: Path, values: dict[str, str] | None = None) -> None:
    """Run ``line`` as a user would, from the project folder, with the placeholders' values exported."""
    env = {
        "PATH": f"{_kubectl(project)}:{Path(tool).parent}:/usr/bin:/bin",
        "APPLIED": str(out), "LANG": "C.UTF-8", **(values if values is not None else VALUES),
    }
    if "|" not in line:
        line = f'{line} && cp {shlex.split(line)[-1]} "$APPLIED"'
    subprocess.run(["bash", "-c", line], cwd=project, env=env, check=True)


def _expected(text: str, names: Iterable[str]) -> str:
    """What filling exactly ``names`` must give: each ``${NAME}`` replaced; in comment lines (the header
    names the placeholders) also ``$NAME``, as envsubst does; every other byte as it was."""
    def fill(line: str) -> str:
        for name in names:
            line = line.replace(envsubst.placeholder(name), VALUES[name])
            if line.startswith("#"):
                line = re.sub(r"\$" + name + r"(?![A-Za-z0-9_])", lambda _, name=name: VALUES[name], line)
        return line

    return "".join(fill(line) for line in text.splitlines(keepends=True))


def test_every_dist_file_with_placeholders_names_them_and_the_restricted_command(project):
    with_placeholders = 0
    for path in _files(project):
        text = path.read_text()
        names = envsubst.placeholders_in(text, KNOWN)
        if not names:
            assert not HEADER_COMMAND.search(text), path
            continue
        with_placeholders += 1
        shown = path.relative_to(project).as_posix()
        sink = "| kubectl apply -f -" if "/eks/" in shown else f"> {path.name.split('-')[-1]}"
        (command,) = HEADER_COMMAND.findall(text)
        listed = re.findall(r"\$([A-Z0-9_]+)", command.split("'")[1])
        assert sorted(listed) == sorted(set(listed)) == sorted(names), path
        assert command == envsubst.command(listed, shown, sink), path
        assert f"# Deploy-time placeholders: {' '.join('${' + n + '}' for n in listed)}." in text
    # The job, data and storage manifests, the cluster and the image configurations.
    assert with_placeholders == 8


def test_the_header_command_as_written_fills_only_the_placeholders(project, tool, tmp_path):
    for path in _files(project):
        text = path.read_text()
        names = envsubst.placeholders_in(text, KNOWN)
        if not names:
            continue
        (line,) = HEADER_COMMAND.findall(text)
        applied = tmp_path / path.name
        _run(project, line, tool, applied)
        assert applied.read_text() == _expected(text, names), path
        assert "${" + names[0] + "}" not in applied.read_text()
        assert [d for d in yaml.safe_load_all(applied.read_text()) if d]  # still YAML


def test_no_script_variable_shares_a_placeholder_name(project):
    """Outside the header a placeholder name appears only as the placeholder itself: no script in a
    manifest reads a variable the restricted envsubst would fill."""
    for path in _files(project):
        body = "".join(line for line in path.read_text().splitlines(keepends=True) if not line.startswith("#"))
        for name in KNOWN:
            uses = re.findall(r"\$\{?" + name + r"(?![A-Za-z0-9_])[^\s\"']{0,2}", body)
            assert all(u.startswith(envsubst.placeholder(name)) for u in uses), (path, uses)


@pytest.mark.e2e
def test_a_bare_envsubst_empties_the_launcher_and_the_job_fails_the_restricted_one_trains(project, tool, tmp_path):
    original = (project / MLP).read_text()
    # The launcher's own variables, each $ written $$ for Kubernetes (charts/_k8s.literal), which reduces them to $.
    assert '[ -n "$$MASTER_ADDR" ]' in original
    # The README's old line, with only the documented variable exported: it empties $MASTER_ADDR, leaving "$".
    bare = tmp_path / "bare.yaml"
    _run(project, f"envsubst < {MLP} | kubectl apply -f -", tool, bare, {"TRAINING_IMAGE": "example.com/t:1"})
    assert '[ -n "$" ]' in bare.read_text() and '[ -n "$$MASTER_ADDR" ]' not in bare.read_text()
    (line,) = HEADER_COMMAND.findall(original)
    restricted = tmp_path / "restricted.yaml"
    _run(project, line, tool, restricted, {"TRAINING_IMAGE": "example.com/t:1"})
    assert '[ -n "$$MASTER_ADDR" ]' in restricted.read_text()

    (broken,) = [d for d in yaml.safe_load_all(bare.read_text()) if d]
    (result,) = run_kubernetes_job(Stage(tmp_path / "bare-node"), broken)
    assert result.code == 2 and "node rank $ of $ nodes" in result.output, result.output[-2000:]
    (job,) = [d for d in yaml.safe_load_all(restricted.read_text()) if d]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "example.com/t:1"
    assert_trained(run_kubernetes_job(Stage(tmp_path / "node"), job))


def test_every_envsubst_the_readme_shows_is_the_one_its_file_states(project):
    from tests.support.readme import site_text

    readme = site_text()
    calls = re.findall(r"envsubst(?: ('[^']*'))? < (dist/\S+)", readme)
    assert calls, "the README shows no envsubst"
    for shell_format, source in calls:
        (stated,) = HEADER_COMMAND.findall((project / source).read_text())
        assert stated.startswith(f"envsubst {shell_format} < {source} "), (source, shell_format or "a bare envsubst")


def test_shell_format_and_names():
    assert envsubst.shell_format(["A", "B_2"]) == "'$A $B_2'"
    assert envsubst.placeholders_in("x ${B} ${A} $C", ["A", "B", "C"]) == ["A", "B"]
    for bad in ("lower", "A-B", "1A", ""):
        with pytest.raises(ValueError):
            envsubst.placeholder(bad)
    with pytest.raises(ValueError):
        envsubst.shell_format([])
