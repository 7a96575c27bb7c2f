"""`make destroy` ends in DELETE_COMPLETE, judged by CloudFormation's deletion rule on the synthesized stacks.

CloudFormation deletes a stack's resources except those with ``DeletionPolicy: Retain``; a resource still
used by one that stays cannot be deleted (the subnets and VPC that hold a retained file system's interfaces,
the security group its interfaces carry), and the stack ends in DELETE_FAILED. The model here follows every
reference a surviving resource makes (Ref, Fn::GetAtt, Fn::ImportValue through the exporting stack's output)
and fails on one that points at a deleted resource. It is written apart from tools/destroy.py, which plans
the destroy: the plan is judged, not restated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import ROOT, config_with, synth

sys.path.insert(0, str(ROOT / "tools"))
import destroy  # noqa: E402

Templates = dict[str, dict[str, Any]]


def _templates(outdir: Path) -> Templates:
    return {p.name.removesuffix(".template.json"): json.loads(p.read_text()) for p in outdir.glob("*.template.json")}


def _references(stack: str, value: Any, exports: dict[str, tuple[str, Any]]) -> Iterator[tuple[str, str]]:
    """(stack, logical id) of every resource ``value`` refers to, across stacks through exports."""
    if isinstance(value, list):
        for inner in value:
            yield from _references(stack, inner, exports)
    elif isinstance(value, dict):
        if set(value) == {"Ref"} and isinstance(value["Ref"], str) and not value["Ref"].startswith("AWS::"):
            yield stack, value["Ref"]
        elif set(value) == {"Fn::GetAtt"}:
            target = value["Fn::GetAtt"]
            yield stack, target[0] if isinstance(target, list) else target.split(".")[0]
        elif set(value) == {"Fn::ImportValue"} and value["Fn::ImportValue"] in exports:
            yield from _references(*exports[value["Fn::ImportValue"]], exports)
        else:
            for inner in value.values():
                yield from _references(stack, inner, exports)


def deletion_failures(templates: Templates, deleted: list[str]) -> list[str]:
    """What CloudFormation cannot delete when the ``deleted`` stacks go: '<resource> is used by <resource>'."""
    exports = {
        output["Export"]["Name"]: (name, output["Value"])
        for name, template in templates.items() for output in template.get("Outputs", {}).values()
        if "Export" in output
    }
    surviving = {
        (name, logical)
        for name, template in templates.items() for logical, resource in template["Resources"].items()
        if name not in deleted or resource.get("DeletionPolicy") == "Retain"
    }
    failures = []
    for name, logical in sorted(surviving):
        resource = templates[name]["Resources"][logical]
        for target in set(_references(name, resource.get("Properties", {}), exports)):
            if target not in surviving and target[1] in templates[target[0]]["Resources"]:
                failures.append(f"{target[0]}/{target[1]} is used by {name}/{logical}")
    return sorted(set(failures))


@pytest.fixture(scope="module")
def retained():
    """The default config: storage.removal_policy retain."""
    return synth(config_with())


@pytest.fixture(scope="module")
def disposable():
    return synth(config_with(storage={"removal_policy": "destroy"}))


def test_deleting_every_stack_fails_while_the_file_system_is_retained(retained):
    """What `make destroy` did (`cdk destroy --all`): the network cannot go while the file system holds
    its subnets, nor the group the file system's interfaces carry (it had no retain policy)."""
    templates = _templates(retained.outdir)
    failures = deletion_failures(templates, list(templates))
    assert any(f.startswith("t-network/") and f.endswith("used by t-storage/LustreFileSystem") for f in failures), failures


def test_make_destroy_deletes_what_cloudformation_can_and_names_what_stays(retained):
    templates = _templates(retained.outdir)
    planned = destroy.plan(retained.outdir)
    assert deletion_failures(templates, planned) == []
    assert "t-network" not in planned and {"t-storage", "t-eks"} <= set(planned)
    # The file system's security group stays with it (its interfaces use it).
    storage = templates["t-storage"]["Resources"]
    assert storage["LustreSecurityGroup"]["DeletionPolicy"] == "Retain"
    message = destroy.kept_message(retained.outdir, ids=lambda stack: {"LustreFileSystem": "fs-0123456789abcdef0"})
    assert "kept: fs-0123456789abcdef0 t-storage/LustreFileSystem (AWS::FSx::FileSystem)" in message
    assert "kept: stack t-network, used by the retained t-storage/LustreFileSystem" in message
    assert message.splitlines()[-1].endswith("then `make destroy-kept`")
    assert destroy.kept_stacks(destroy.stacks(retained.outdir)).keys() == {"t-network"}


def test_with_removal_policy_destroy_everything_goes(disposable):
    templates = _templates(disposable.outdir)
    planned = destroy.plan(disposable.outdir)
    assert sorted(planned) == sorted(templates)
    assert deletion_failures(templates, planned) == []
    assert "kept: stack" not in destroy.kept_message(disposable.outdir, ids=lambda stack: {})


def test_make_destroy_runs_the_plan_and_prints_what_stays():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndestroy: setup\n", 1)[1].split("\n\n", 1)[0]
    assert "tools/destroy.py kept > cdk.out/trainium-cdk-kept.txt" in recipe
    assert "destroy --app cdk.out $$($(PY) tools/destroy.py plan)" in recipe and "--all" not in recipe


@pytest.mark.e2e
def test_make_destroy_without_a_terminal_says_how_and_runs_with_force(tmp_path):
    """The CDK CLI asks "Are you sure?" and, with no terminal to answer (CI, a script), stops: `make destroy`
    failed with only the CLI's own words. ARGS=--force (aws-cdk's destroy option) destroys without asking."""
    from tests.support.walkthrough import make_sandbox

    root = make_sandbox(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull)

    def make(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", *args], cwd=root, env=env, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)

    assert make("synth").returncode == 0
    asked = make("destroy")
    assert asked.returncode != 0
    assert "terminal (TTY) is not attached" in asked.stdout + asked.stderr
    assert "make: the CDK CLI asks to confirm a destroy and there is no terminal to answer: `make destroy " \
           "ARGS=--force` destroys without asking" in asked.stderr
    forced = make("destroy", "ARGS=--force")
    assert forced.returncode != 0  # no AWS account here: the destroy itself is what fails
    assert "trainium-batch" not in forced.stdout and "trainium-eks: destroying..." in forced.stdout + forced.stderr
    assert "Unable to resolve AWS account" in forced.stdout + forced.stderr
    assert "TTY" not in forced.stdout + forced.stderr and "no terminal to answer" not in forced.stderr


def test_the_non_interactive_destroy_is_documented():
    from tests.support.readme import page

    assert "make destroy ARGS=--force" in page("guide/walkthroughs/eks.md")
    done = subprocess.run(["make", "help"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "without a terminal: make destroy ARGS=--force" in done.stdout
