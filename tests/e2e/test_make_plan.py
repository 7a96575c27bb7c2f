"""`make plan` shows what a change does, offline; `make deploy|diff|destroy` act on the last `make synth`.

The plan compares cdk.out with the assembly before it (cdk.out.prev, kept by tools/synth.py): resources
added, removed, changed (values inside the Kubernetes manifests too) and replaced, by CloudFormation's
rule (a create-only property of the type, tools/create_only.json from cfn-lint's resource schemas).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, config_with, synth

sys.path.insert(0, str(ROOT / "tools"))
import assembly  # noqa: E402
import plan  # noqa: E402

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e


def _group(instance_type: str) -> dict:
    return {"name": "train", "instance_type": instance_type, "nodes": 2, "max_nodes": 4, "az_ids": ["usw2-az4"]}


@pytest.fixture(scope="module")
def trn1_then_trn1n():
    before = synth(config_with(compute_groups=[_group("trn1.32xlarge")]), nag=False)
    after = synth(config_with(compute_groups=[_group("trn1n.32xlarge")]), nag=False)
    return before.outdir, after.outdir


def test_create_only_table_is_cfn_lints_resource_schemas():
    import cfnlint

    base = Path(cfnlint.__file__).parent / "data" / "schemas"
    providers = json.loads((base / "providers" / "us-west-2.json").read_text())
    for kind, properties in plan.CREATE_ONLY.items():
        schema = json.loads((base / "resources" / f"{providers[kind]}.json").read_text())
        expected = sorted({p.removeprefix("/properties/").replace("/*", "") for p in schema["createOnlyProperties"]})
        assert properties == expected, kind
    assert "SubnetIds" in plan.CREATE_ONLY["AWS::FSx::FileSystem"]


def test_plan_shows_the_instance_type_and_the_efa_interfaces_that_change(trn1_then_trn1n):
    lines = plan.changes(*trn1_then_trn1n)
    text = "\n".join(lines)
    assert "trn1.32xlarge -> trn1n.32xlarge" in text
    # One ENA interface and 8 EFA interfaces become one and 16: the launch template Karpenter uses.
    assert "spec.networkInterfaces: 9 items -> 17 items" in text
    assert "REPLACED" not in text  # a NodePool and an EC2NodeClass change in place (Karpenter drifts nodes)
    assert plan.changes(trn1_then_trn1n[1], trn1_then_trn1n[1]) == ["no change"]


def _assembly(root: Path, resources: dict) -> Path:
    root.mkdir()
    (root / "manifest.json").write_text(json.dumps({"artifacts": {"s": {
        "type": plan.STACK, "displayName": "s", "properties": {"templateFile": "s.template.json"}}}}))
    (root / "s.template.json").write_text(json.dumps({"Resources": resources}))
    return root


def test_a_create_only_change_is_a_replacement_and_others_are_not(tmp_path):
    def fsx(subnet: str, throughput: int) -> dict:
        return {"Type": "AWS::FSx::FileSystem", "Properties": {
            "SubnetIds": [subnet], "LustreConfiguration": {"PerUnitStorageThroughput": throughput}}}

    old = _assembly(tmp_path / "old", {"Fs": fsx("subnet-a", 250), "Gone": {"Type": "AWS::SQS::Queue"}})
    new = _assembly(tmp_path / "new", {"Fs": fsx("subnet-b", 250), "Added": {"Type": "AWS::SQS::Queue"}})
    assert plan.changes(old, new) == [
        "s:",
        "  + Added (AWS::SQS::Queue)",
        "  - Gone (AWS::SQS::Queue)",
        "  ! Fs (AWS::FSx::FileSystem): REPLACED (create-only SubnetIds)",
        "      SubnetIds[0]: subnet-a -> subnet-b",
    ]
    faster = _assembly(tmp_path / "faster", {"Fs": fsx("subnet-a", 500), "Gone": {"Type": "AWS::SQS::Queue"}})
    assert plan.changes(old, faster)[1] == "  ~ Fs (AWS::FSx::FileSystem)"


def test_deploy_with_context_other_than_the_synths_is_refused(tmp_path):
    out = tmp_path / "cdk.out"
    assert "run `make synth" in assembly.check([], out)
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    (out / assembly.RECORD).write_text(json.dumps({"args": ["-c", "instance_type=trn1n.32xlarge"]}))
    assert assembly.check(["--require-approval", "never"], out) is None
    assert assembly.check(["-c", "instance_type=trn1n.32xlarge"], out) is None
    refused = assembly.check(["-c", "backends=batch"], out)
    assert "the last `make synth` had -c instance_type=trn1n.32xlarge" in refused
    assert 'make synth ARGS="-c backends=batch"' in refused


def _digest(folder: Path) -> str:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return hashlib.sha256(b"".join(p.relative_to(folder).as_posix().encode() + p.read_bytes() for p in files)).hexdigest()


def test_make_diff_and_deploy_leave_the_last_synth_as_it_was(tmp_path):
    """The old `make diff` re-ran the app with the default context: cdk.out and dist/ became the default app's."""
    from tests.support.walkthrough import make_sandbox

    root = make_sandbox(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull)

    def make(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)

    done = make("synth", "ARGS=-c instance_type=trn1n.32xlarge")
    assert done.returncode == 0, done.stdout + done.stderr
    before = (_digest(root / "cdk.out"), _digest(root / "dist"))
    diff = make("diff")
    assert diff.returncode != 0 and "Unable to resolve AWS account" in diff.stdout + diff.stderr
    assert "cdk diff --app cdk.out" in diff.stdout
    deploy = make("deploy", "ARGS=-c backends=batch")
    assert deploy.returncode == 2
    assert "the last `make synth` had -c instance_type=trn1n.32xlarge" in deploy.stderr
    assert (_digest(root / "cdk.out"), _digest(root / "dist")) == before


def test_after_a_backend_switch_the_plan_says_the_stack_left_out_stays_and_how_to_delete_it(tmp_path):
    """`make deploy` deploys the stacks of cdk.out and never deletes one: the EKS stack of the synth before a
    switch to Batch stays deployed, and billed. The old plan said it was removed, every resource deleted."""
    from tests.support.walkthrough import make_sandbox

    root = make_sandbox(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=os.devnull,
               AWS_SHARED_CREDENTIALS_FILE=os.devnull)

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)

    assert run("make", "synth").returncode == 0
    assert run("make", "synth", "ARGS=-c backends=batch").returncode == 0
    done = run("make", "plan")
    assert done.returncode == 0, done.stderr
    changes = done.stdout.split("Changes since the synth before", 1)[1].splitlines()
    eks = [ln for ln in changes if ln.startswith("trainium-eks")]
    assert eks == ["trainium-eks: not in this synth: STAYS deployed (if it was), and billed: `make deploy` deploys "
                   "the stacks of cdk.out and deletes none"], changes
    said = "\n".join(changes[changes.index(eks[0]):])
    # The batch synth no longer exports the second private subnet, which EKS imports (the file system's group it
    # still does: the Batch CPU queue's Lustre rules name it).
    assert "while it is deployed, `make deploy` fails: this synth drops 1 export(s) of trainium-network that it " \
           "imports" in said
    assert "to delete it, before `make deploy`: `make destroy-removed`" in said
    assert "`aws cloudformation delete-stack --stack-name trainium-eks --region us-west-2`" in said
    assert "(AWS::ECR::Repository)" in said.split("what it retains stays after it", 1)[1]
    assert "every resource of it is deleted" not in done.stdout
    # `make destroy-removed` hands the CDK CLI exactly that stack, from the synth before; here it gets as far as
    # the account (no credentials on this machine).
    removed = run("make", "destroy-removed", "ARGS=--force")
    assert removed.returncode != 0
    assert "cdk destroy --app cdk.out.prev --exclusively $(.venv/bin/python tools/destroy.py removed) --force" in removed.stdout
    assert "trainium-eks: destroying... [1/1]" in removed.stdout + removed.stderr
    assert "Unable to resolve AWS account" in removed.stdout + removed.stderr
    # `make deploy` says it too, before the CDK CLI runs.
    deploy = run("make", "deploy")
    assert deploy.stderr.startswith("make: note: the last `make synth` dropped trainium-eks: `make deploy` leaves it "
                                    "deployed (if deployed), and billed"), deploy.stderr
    # And `trn` takes that synth's context: a plain `trn cost` prices Batch, with no EKS control plane.
    cost = run(".venv/bin/trn", "cost")
    assert cost.returncode == 0, cost.stderr
    assert cost.stderr.startswith("trn: using the context of the last `make synth` (cdk.out/trainium-cdk-synth.json): "
                                  "-c backends=batch;")
    assert "EKS control plane" not in cost.stdout
