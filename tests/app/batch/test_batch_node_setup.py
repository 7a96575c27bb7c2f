"""A Batch node's setup ships once, as an S3 asset: the user data (node/batch_bootstrap.sh) fetches it, checks its
sha256 and only then runs it; a host whose setup cannot be fetched, does not match or fails never joins (no ECS
agent) and terminates. The bootstrap runs here as the synthesized user data carries it, with stand-ins for the AWS
CLI (a local bucket), systemctl and shutdown."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.support import node_files
from tests.support.helpers import config_with, synth, template_text
from trainium_cdk.constructs.batch_node import node_setup
from trainium_cdk.facts.catalog import DEFAULT_CATALOG

REFUSED = ["systemctl mask --now ecs.service", "shutdown -h now"]


@pytest.fixture(scope="module")
def app():
    """Two Batch groups of one type and one of another, without storage (nor the CPU queue, whose node setup is its
    own: tests/unit/constructs/test_batch_cpu.py)."""
    groups = [{"name": n, "instance_type": t, "nodes": 2, "az_ids": "usw2-az4"}
              for n, t in (("a", "trn1.32xlarge"), ("b", "trn1.32xlarge"), ("c", "trn1n.32xlarge"))]
    groups[2]["az_ids"] = "usw2-az3"
    return synth(config_with(backends=["batch"], compute_groups=groups, storage={"enabled": False},
                             batch={"cpu_instance_type": None}), nag=False)


def _launch_template(app, name: str) -> dict:
    group = app.stacks.backends["batch"].groups[name]
    holder = group.launch_template.resource.stack
    template = json.loads((app.outdir / holder.template_file).read_text())
    logical_id = holder.resolve(holder.get_logical_id(group.launch_template.resource))
    return template["Resources"][logical_id]["Properties"]["LaunchTemplateData"]


def _user_data(app, name: str) -> str:
    text = template_text(_launch_template(app, name)["UserData"]["Fn::Base64"])
    return text.split('Content-Type: text/x-shellscript; charset="us-ascii"\n\n', 1)[1].rsplit("\n\n--", 1)[0] + "\n"


def test_the_setup_is_one_object_per_content_named_in_a_short_user_data(app):
    """Groups whose setup is the same text fetch one object (without storage, the types' differences are values:
    the EFA installer); the user data is a few KB, not the ~15 KB setup (EC2 allows 16 KB of user data), and
    carries the digest of what the asset holds (tests/support/node_files.py)."""
    (a_values, a_program), (b_values, _), (c_values, _) = (
        node_files.fetched_setup(_user_data(app, n), app.outdir) for n in "abc")
    assert a_values["NODE_SETUP_SHA256"] == b_values["NODE_SETUP_SHA256"] == c_values["NODE_SETUP_SHA256"]
    assert len(list(app.outdir.glob("asset.*.sh"))) == 1
    assert a_program.startswith("#!/bin/bash\n") and len(a_program.encode()) > 4 * 1024
    for name in "abc":
        assert len(_user_data(app, name).encode()) < 4 * 1024


def test_a_host_that_cannot_set_itself_up_terminates_instead_of_stopping(app):
    for name in "abc":
        assert _launch_template(app, name)["InstanceInitiatedShutdownBehavior"] == "terminate"


def test_the_instance_role_reads_the_setup_object_and_nothing_else_of_the_bucket(app):
    template = app.template_with_nested("batch")  # each group's instance role is in its nested stack
    statements = [s for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"
                  for s in r["Properties"]["PolicyDocument"]["Statement"]]
    s3 = [s for s in statements if any(a.startswith("s3:") for a in ([s["Action"]] if isinstance(s["Action"], str)
                                                                     else s["Action"]))]
    keys = {path.name.removeprefix("asset.") for path in app.outdir.glob("asset.*.sh")}
    assert len(keys) == 1 and len(s3) == 3  # each group's own role (a, b, c), on the one object
    for statement in s3:
        assert statement["Action"] == "s3:GetObject" and statement["Effect"] == "Allow"
        # arn:<partition>:s3:::<asset bucket>/<key>: that object alone
        assert statement["Resource"]["Fn::Join"][1][-1] in {f"/{k}" for k in keys}, statement
        assert "*" not in template_text(statement["Resource"]), statement


def _stand_ins(tmp_path: Path, *, fetch_fails: bool = False) -> tuple[dict[str, str], Path, Path]:
    """PATH with aws (s3 cp from tmp_path/bucket; or failing), systemctl, shutdown and sleep recorders."""
    bindir, bucket, log = tmp_path / "bin", tmp_path / "bucket", tmp_path / "calls.log"
    bindir.mkdir()
    bucket.mkdir()
    aws = ("exit 1" if fetch_fails else
           f'[ "$1 $2" = "s3 cp" ] || exit 2; for a; do last="$a"; done; src="${{@: -2:1}}"; '
           f'cp "{bucket}/${{src##*/}}" "$last"')
    tools = {"aws": f'echo "aws $*" >> "{log}"\n{aws}', "systemctl": f'echo "systemctl $*" >> "{log}"',
             "shutdown": f'echo "shutdown $*" >> "{log}"', "sleep": "exit 0"}
    for tool, body in tools.items():
        (bindir / tool).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / tool).chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin", "NODE_SETUP_PATH": str(tmp_path / "node" / "setup.sh")}, bucket, log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _run(app, tmp_path: Path, program: str, *, digest: str | None = None, fetch_fails: bool = False):
    """The bootstrap of group a's user data (its header's values) with ``program`` in the bucket under the key the
    user data names, and its digest (or ``digest``) in place of the synthesized program's."""
    env, bucket, log = _stand_ins(tmp_path, fetch_fails=fetch_fails)
    values = node_files.split(_user_data(app, "a"), "batch_bootstrap.sh")
    values["NODE_SETUP_URL"] = "s3://cdk-assets-bucket/setup.sh"  # the template's is a token (Fn::Sub)
    (bucket / "setup.sh").write_text(program)
    values["NODE_SETUP_SHA256"] = digest or hashlib.sha256(program.encode()).hexdigest()
    return node_files.run("batch_bootstrap.sh", values, env), log


def test_a_fetched_and_checked_setup_runs_with_the_user_datas_values_and_the_host_joins(app, tmp_path):
    marker = tmp_path / "ran"
    program = f'#!/bin/bash\nset -eu\necho "$NEURON_DRIVER" > "{marker}"\n'
    result, log = _run(app, tmp_path, program)
    assert result.returncode == 0, result.stderr
    assert marker.read_text().strip() == node_setup(DEFAULT_CATALOG.get("trn1.32xlarge"), None).values["NEURON_DRIVER"]
    assert [c for c in _calls(log) if not c.startswith("aws ")] == []
    (fetch,) = [c for c in _calls(log) if c.startswith("aws ")]
    assert fetch.startswith("aws s3 cp --only-show-errors --region ") and " s3://" in fetch


@pytest.mark.parametrize("failure", ["digest mismatch", "fetch fails", "setup fails"])
def test_a_host_whose_setup_is_missing_altered_or_failing_never_starts_the_agent_and_shuts_down(
        app, tmp_path, failure):
    marker = tmp_path / "ran"
    program = f'#!/bin/bash\nset -eu\ntouch "{marker}"\n' + ("false\necho after\n" if failure == "setup fails" else "")
    result, log = _run(app, tmp_path, program, digest="0" * 64 if failure == "digest mismatch" else None,
                       fetch_fails=failure == "fetch fails")
    assert result.returncode != 0
    assert "does not join the compute environment" in result.stderr
    assert [c for c in _calls(log) if not c.startswith("aws ")] == REFUSED
    assert marker.exists() == (failure == "setup fails")
    assert "after" not in result.stdout  # the setup's own `set -e` held
    if failure == "fetch fails":
        assert len([c for c in _calls(log) if c.startswith("aws ")]) == 3
