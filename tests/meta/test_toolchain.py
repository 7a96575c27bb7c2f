"""The set-up a new user runs: make's layering and help, `make synth` through the real CDK CLI (quiet,
atomic, exit 2 on a config error, dist/ written afresh and kept on an error: end-to-end runs, `make test-e2e`),
`make plan`, and cdk.json (feature flags, notices, telemetry)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import aws_cdk
import pytest

from tests.support import paths
from tests.support.apps import synthesized
from tools.plan import changes, deploy_order, plan
from trainium_cdk.node_runtime import bundled_node

ROOT = paths.ROOT
CDK_JSON = json.loads((ROOT / "cdk.json").read_text())
# Recommended flags kept at another value, and why. Every other recommended flag is set as recommended.
KEPT_FLAGS = {
    # Batch EFA jobs run on the VPC's default security group (no groups on EFA launch templates):
    # stripping its rules would cut their traffic.
    "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup": False,
    # Construct metadata sent to AWS: telemetry, kept off.
    "@aws-cdk/core:enableAdditionalMetadataCollection": False,
    # Stacks deploy in order (network, storage, backends); weak references would let a stack delete an
    # output another still uses.
    "@aws-cdk/core:defaultCrossStackReferences": "strong",
    # Only commercial regions are supported (config.az_id_prefix).
    "@aws-cdk/core:target-partitions": ["aws"],
    # The EKS construct gives the kubectl provider's functions log groups of its own, with the configured
    # retention; the flag adds a second under the same construct id and synth fails.
    "@aws-cdk/aws-lambda:useCdkManagedLogGroup": False,
    # cdk-nag acknowledgments across the stacks name resources with the partition token; literals change
    # every finding id (and only the text of ARNs, no resource).
    "@aws-cdk/core:enablePartitionLiterals": False,
    # Warnings (a capacity block on Batch, ...) stay annotations the CLI prints once; the flag turns each
    # into a multi-line "Acknowledge with" violation in validation-report.json, where cdk-nag's findings live.
    "@aws-cdk/core:annotationsInValidationReport": False,
}


def recommended_flags() -> dict[str, object]:
    """aws-cdk-lib's own recommended-feature-flags.json (what `cdk init` writes), from the installed library."""
    tgz = next((Path(aws_cdk.__file__).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz"))
    with tarfile.open(tgz) as archive:
        return json.load(archive.extractfile("package/recommended-feature-flags.json"))


def test_every_recommended_flag_is_set_as_recommended_or_kept_for_a_reason():
    context = CDK_JSON["context"]
    recommended = recommended_flags()
    assert len(recommended) >= 80
    missing = sorted(set(recommended) - set(context))
    assert missing == []
    differ = {k: context[k] for k, v in recommended.items() if context[k] != v}
    assert differ == KEPT_FLAGS


def test_notices_and_cli_telemetry_are_off():
    assert CDK_JSON["notices"] is False
    assert CDK_JSON["context"]["cli-telemetry"] is False
    assert CDK_JSON["context"]["config"] == "config/default.yaml"  # the pipeline's synth step relies on it


# -- make --------------------------------------------------------------------------------------------


def make_dry(target: str, tmp_path: Path) -> str:
    """`make -n TARGET` in a copy of the set-up files with no .venv: what a fresh clone would run."""
    for name in ("Makefile", "requirements.txt", "requirements-dev.txt", "requirements-rehearsal.txt", "constraints.txt", "package.json",
                 "package-lock.json", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "tools" / "docs-site").mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ROOT / "tools" / "docs-site" / name, tmp_path / "tools" / "docs-site" / name)
    done = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True)
    return done.stdout


def test_make_synth_installs_runtime_dependencies_only(tmp_path):
    commands = make_dry("synth", tmp_path)
    installs = [line for line in commands.splitlines() if " install " in line]
    # The runtime dependencies, then this checkout itself without dependencies (for .venv/bin/trn).
    assert len(installs) == 2 and "-r requirements.txt" in installs[0], installs
    assert "--no-deps -e ." in installs[1], installs
    assert "requirements-dev" not in commands
    assert "tools/docs-site" not in commands  # the site's mermaid (150 MB of npm packages): not for a synth
    assert "installing runtime dependencies" in commands  # a progress line before pip starts


def test_make_test_adds_the_dev_tools_on_top(tmp_path):
    commands = make_dry("test", tmp_path)
    installs = [line for line in commands.splitlines() if " install " in line and " -r " in line]
    # The site's mermaid, which tests/meta/test_site.py's build serves, from its own lock file.
    assert re.search(r"npm-cli\.js\" ci --prefix tools/docs-site ", commands), commands
    assert [re.search(r"-r (\S+)", line).group(1) for line in installs] == [
        "requirements.txt", "requirements-dev.txt", "requirements-rehearsal.txt"]
    # TorchTitan for the rehearsal, without the resolver: tyro asks for typeguard>=4, jsii pins 2.13.3.
    assert "--no-deps -r requirements-rehearsal.txt" in installs[2]
    dev = (ROOT / "requirements-dev.txt").read_text()
    assert "-r requirements.txt" in dev
    runtime = (ROOT / "requirements.txt").read_text()
    for heavy in ("torch", "moto", "cfn-lint", "pytest"):
        assert not re.search(rf"^{heavy}==", runtime, re.M), heavy


def test_make_test_compiles_what_the_tests_import_once_after_the_installs(tmp_path):
    """On a fresh clone each pytest worker compiled the same modules at once (12 s before its first test, twice the
    work on 2 cores): set-up compiles them once, into .venv/pycache, as pip compiles at install; and has mypy read
    the aws-cdk-lib modules the package uses once (tests/support/mypy_deps.py)."""
    for target in ("test", "test-e2e"):
        lines = make_dry(target, tmp_path).splitlines()
        collect = [i for i, line in enumerate(lines) if "-m pytest --collect-only" in line]
        run = [i for i, line in enumerate(lines) if "-m pytest -n auto" in line]
        installs = [i for i, line in enumerate(lines) if " install " in line]
        assert len(collect) == 1 and installs and run and max(installs) < collect[0] < run[0], lines
        assert 'PYTHONPYCACHEPREFIX="' in lines[collect[0]] and "/.venv/pycache" in lines[collect[0]]
        # A module that does not import (or a type error) is the test run's to report, whole: not the set-up's.
        assert lines[collect[0]].rstrip().endswith("|| true") and lines[collect[0] + 1].rstrip().endswith("|| true")
        assert "-m tests.support.mypy_deps" in lines[collect[0] + 1]  # mypy's reading of aws-cdk-lib, cached
        assert "touch .venv/.test-modules-compiled" in lines[collect[0] + 2]


def test_ci_runs_make_test_and_its_end_to_end_runs():
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-2:] == ["make test", "make test-e2e"]


def test_make_help_lists_every_documented_target():
    done = subprocess.run(["make", "help"], cwd=ROOT, capture_output=True, text=True, check=True)
    makefile = (ROOT / "Makefile").read_text()
    documented = re.findall(r"^## ([a-z0-9-]+):", makefile, re.M)
    listed = re.findall(r"^  make (\S+)", done.stdout, re.M)
    assert listed == documented
    assert {"synth", "test", "test-e2e", "plan", "deploy", "diff", "help"} <= set(listed)
    for target in documented:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), target


# -- make synth through the real CDK CLI ------------------------------------------------------------


def run_synth(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    node = bundled_node()
    assert node is not None
    env = {**os.environ, "PATH": f"{node.parent}:{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "synth.py"), *args], cwd=project, env=env, capture_output=True,
        text=True, timeout=600, check=False,
    )


STALE = Path("dist/parallelcluster/other-project-cluster.yaml")


def files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A working directory as the CLI sees the repository: cdk.json, node_modules, the real app."""
    project = tmp_path_factory.mktemp("project")
    cdk_json = {**CDK_JSON, "app": f"{sys.executable} {ROOT / 'app.py'}"}
    cdk_json["context"] = {**CDK_JSON["context"], "config": str(ROOT / "config" / "default.yaml")}
    (project / "cdk.json").write_text(json.dumps(cdk_json))
    (project / "node_modules").symlink_to(ROOT / "node_modules")
    (project / STALE).parent.mkdir(parents=True)  # dist/ as another project's synth left it
    (project / STALE).write_text("from another project\n")
    return project


@pytest.fixture(scope="module")
def first_synth(project):
    return run_synth(project)


# `make synth` through the CDK CLI runs the whole default app in a process of its own (5-6 s a synth): these are
# end-to-end runs (`make test-e2e`), like the README's walkthroughs that run it too.
@pytest.mark.e2e
def test_synth_prints_exactly_what_it_wrote_and_nothing_else(project, first_synth):
    assert first_synth.returncode == 0, first_synth.stderr
    assert first_synth.stderr == ""  # no flags count, no notices, no banner, no "Supply a stack id"
    templates = sorted(p.relative_to(project).as_posix() for p in project.glob("cdk.out/*.template.json"))
    dist = sorted(p.relative_to(project).as_posix() for p in (project / "dist").rglob("*") if p.is_file())
    assert templates == ["cdk.out/trainium-eks.template.json", "cdk.out/trainium-network.template.json",
                         "cdk.out/trainium-storage.template.json"]
    listed, _, bill = first_synth.stdout.partition("\n\n")
    assert listed.splitlines() == templates + dist
    # dist/ is written afresh: what another synth left there is gone.
    assert not (project / STALE).exists()
    assert all(f.startswith("dist/eks/") for f in dist) and "dist/eks/neuron-device-plugin.k8s.yaml" in dist
    # Then the bill of the config (the app writes it to cdk.out/bill.txt).
    assert bill.startswith("Cost estimate, us-west-2") and "total idle floor" in bill


@pytest.mark.e2e
def test_the_default_apps_stacks_are_in_the_configs_region_in_the_account_deploying(project, first_synth):
    manifest = json.loads((project / "cdk.out" / "manifest.json").read_text())
    envs = {a["environment"] for a in manifest["artifacts"].values() if a["type"] == "aws:cloudformation:stack"}
    assert envs == {"aws://unknown-account/us-west-2"}


def test_no_feature_flag_needs_attention():
    """The library's own list of flags (the feature-flag report in the cloud assembly of an app synthesized with
    cdk.json's context): each one is configured, or unconfigured behaves as recommended (what `cdk flags` and the CLI
    warning count)."""
    manifest = json.loads((synthesized("trn1.32xlarge").outdir / "manifest.json").read_text())
    (report,) = [a for a in manifest["artifacts"].values() if a["type"] == "cdk:feature-flag-report"]
    flags = report["properties"]["flags"]
    assert len(flags) >= 100
    attention = [
        name for name, f in flags.items()
        # An unconfigured flag behaves as its v2 default, false when the report gives none (as the CLI reads it).
        if "userValue" not in f and (f.get("unconfiguredBehavesLike") or {}).get("v2", False) != f.get("recommendedValue")
    ]
    assert attention == []


@pytest.mark.e2e
def test_a_config_error_exits_2_and_keeps_the_last_good_cdk_out(project, first_synth):
    before = {p.name: p.read_bytes() for p in (project / "cdk.out").glob("*.template.json")}
    dist = files(project / "dist")
    done = run_synth(project, "-c", "nodes=99")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"trainium-cdk: {ROOT / 'config' / 'default.yaml'}: compute_groups[0].nodes = 99: between 1 and the group "
        "maximum max_nodes (4); raise max_nodes (-c max_nodes=N) for more"
    ]
    assert done.stdout == ""
    assert {p.name: p.read_bytes() for p in (project / "cdk.out").glob("*.template.json")} == before
    assert not (project / "cdk.out.tmp").exists()
    assert files(project / "dist") == dist  # the last good dist/ stays too


@pytest.mark.e2e
def test_a_batch_only_synth_lists_no_stale_files(project, first_synth):
    done = run_synth(project, "-c", "backends=batch")
    assert done.returncode == 0, done.stderr
    listed, _, bill = done.stdout.partition("\n\n")
    assert listed.splitlines() == ["cdk.out/trainium-batch.template.json", "cdk.out/trainium-network.template.json",
                                   "cdk.out/trainium-storage.template.json",
                                   # the CPU queue's and the compute group's own templates (stacks/batch_stack.py)
                                   "cdk.out/trainiumbatchCpuQueue14AF71F7.nested.template.json",
                                   "cdk.out/trainiumbatchGrouptrainA1A79672.nested.template.json"]
    assert "total idle floor" in bill
    assert not (project / "dist").exists()  # a Batch-only synth writes no dist/ files
    assert not [p for p in project.iterdir() if p.name.startswith(".dist")]  # no staging folders left
    assert not (project / "cdk.out" / "trainium-eks.template.json").exists()
    plan_lines = plan(project / "cdk.out")
    assert plan_lines[0].startswith("trainium-network (us-west-2): ")
    stacks = [line.split(" ")[0] for line in plan_lines if not line.startswith(" ")][:-1]
    assert stacks == ["trainium-network", "trainium-storage", "trainium-batch", "trainiumbatchCpuQueue14AF71F7",
                      "trainiumbatchGrouptrainA1A79672"]


# -- make plan ---------------------------------------------------------------------------------------


def test_plan_counts_every_resource_of_every_stack(tmp_path):
    out = tmp_path / "cdk.out"
    out.mkdir()
    templates = {
        "b": {"Resources": {"Q": {"Type": "AWS::Batch::JobQueue"}, "M": {"Type": "AWS::CDK::Metadata"}}},
        "a": {"Resources": {"V": {"Type": "AWS::EC2::VPC"}, "S1": {"Type": "AWS::EC2::Subnet"},
                            "S2": {"Type": "AWS::EC2::Subnet"}}},
    }
    for name, template in templates.items():
        (out / f"{name}.template.json").write_text(json.dumps(template))
    artifacts = {
        "b": {"type": "aws:cloudformation:stack", "environment": "aws://unknown-account/us-east-1",
              "properties": {"templateFile": "b.template.json"}, "dependencies": ["a", "b.assets"]},
        "b.assets": {"type": "cdk:asset-manifest"},
        "a": {"type": "aws:cloudformation:stack", "environment": "aws://unknown-account/us-east-1",
              "properties": {"templateFile": "a.template.json"}},
    }
    (out / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    assert deploy_order({"artifacts": artifacts}) == ["a", "b"]
    assert plan(out) == [
        "a (us-east-1): 3 resources",
        "     2  AWS::EC2::Subnet",
        "     1  AWS::EC2::VPC",
        "b (us-east-1, after a): 1 resources",
        "     1  AWS::Batch::JobQueue",
        f"2 stacks (0 nested), 4 resources (offline, from {out}; `make diff` compares with a deployed account)",
    ]
    # A Batch compute group is a nested stack: its template is in the assembly, its resources count, and a
    # group dropped from the config is deleted with its parent (not left deployed, as a dropped stack is).
    group = {"Resources": {"E": {"Type": "AWS::Batch::ComputeEnvironment"}, "Q": {"Type": "AWS::Batch::JobQueue", "Properties": {"Priority": 1}}}}
    (out / "bGroupg1ABCD.nested.template.json").write_text(json.dumps(group))
    assert plan(out)[-4:] == [
        "bGroupg1ABCD (nested): 2 resources",
        "     1  AWS::Batch::ComputeEnvironment",
        "     1  AWS::Batch::JobQueue",
        f"2 stacks (1 nested), 6 resources (offline, from {out}; `make diff` compares with a deployed account)",
    ]
    previous = tmp_path / "cdk.out.previous"
    shutil.copytree(out, previous)
    (out / "bGroupg1ABCD.nested.template.json").unlink()
    assert changes(previous, out) == ["bGroupg1ABCD (nested): deleted with its parent's update"]
    group["Resources"]["Q"]["Properties"]["Priority"] = 2
    (out / "bGroupg1ABCD.nested.template.json").write_text(json.dumps(group))
    assert changes(previous, out) == ["bGroupg1ABCD (nested):", "  ~ Q (AWS::Batch::JobQueue)", "      Priority: 1 -> 2"]


def test_plan_without_a_synth_says_what_to_run(tmp_path):
    with pytest.raises(SystemExit, match="run `make synth` first"):
        plan(tmp_path / "cdk.out")


# -- README troubleshooting --------------------------------------------------------------------------


def test_readme_troubleshooting_quotes_what_trn_prints_and_names_real_commands():
    from tests.support.readme import page

    section = page("guide/troubleshooting.md")
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| you see")]
    # A message the table says `trn` prints is one it can print: the longest run of its words without a
    # <placeholder> is in the CLI's source (which has {fields} where the README has an example).
    cli = "\n".join(p.read_text() for p in sorted((ROOT / "trainium_cdk" / "cli").glob("*.py")))
    quoted_by_trn = [m for row in rows if row.split("|")[1].strip().startswith("`trn ")
                     for m in re.findall(r"`([^`]+)`", row.split("|")[1])[1:]]
    assert len(quoted_by_trn) >= 3, quoted_by_trn
    for message in quoted_by_trn:
        runs = " ".join(w if "<" not in w else "\n" for w in message.split()).split("\n")
        longest = max((r.strip() for r in runs), key=len)
        assert len(longest.split()) >= 2 and longest in cli, (message, longest)
    from trainium_cdk.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)
    for used in re.findall(r"`trn (\w+)", section):
        assert used in commands, used
    makefile = (ROOT / "Makefile").read_text()
    for target in re.findall(r"`make (\w+)", section):
        assert re.search(rf"^{target}:", makefile, re.M), target


def test_make_bench_configs_are_valid(tmp_path):
    """make bench is not a test, but what it synthesizes must be a config the app accepts (its eight groups
    once gave trn1.2xlarge two nodes, which the config refuses)."""
    import yaml

    from tools import bench
    from trainium_cdk.app.config import build_config

    path = tmp_path / "eight.yaml"
    bench.eight_group_config(path)
    assert len(build_config(yaml.safe_load(path.read_text())).compute_groups) == 8


# -- compiled modules ----------------------------------------------------------------------------------


def test_make_keeps_compiled_modules_in_the_venv_where_the_machine_says_not_to():
    """A machine's PYTHONDONTWRITEBYTECODE=1 made every process compile aws-cdk-lib's modules again (5 s a pytest
    worker or an app.py run); make's commands write them under .venv/pycache, never beside the sources (an asset
    folder with a __pycache__ would change its hash)."""
    probe = "import sys; print(sys.pycache_prefix, sys.dont_write_bytecode)"
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", f"probe: ; @$(RUN) $(PY) -c '{probe}'", "probe"],
        cwd=ROOT, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(ROOT / ".venv" / "pycache"), "False"]


def test_a_run_drops_the_compiled_modules_of_temporary_folders_and_keeps_the_checkouts(tmp_path):
    from tests.conftest import prune_compiled_temp_files

    prefix, temp = tmp_path / "pycache", tmp_path / "tmp"
    checkout = temp / "clone" / "trainium-cdk"  # a checkout that is itself in the temporary folder (CI's)
    mirror = prefix / temp.resolve().relative_to(temp.resolve().anchor)
    kept = [mirror / "clone" / "trainium-cdk" / "app.cpython-311.pyc", prefix / "usr" / "lib" / "os.cpython-311.pyc"]
    dropped = [mirror / "pytest-of-root" / "pytest-3" / "x.cpython-311.pyc", mirror / "pip-target-ab12" / "y.pyc"]
    for path in kept + dropped:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    checkout.mkdir(parents=True)

    prune_compiled_temp_files(prefix, temp, checkout)

    assert [p.exists() for p in kept] == [True, True]
    assert [p.exists() for p in dropped] == [False, False]
    assert [p.name for p in mirror.iterdir()] == ["clone"]
