"""The shell commands of the README and of every page of the documentation site run exactly as written,
walkthrough by walkthrough.

Every fenced sh/bash block of README.md and of docs/ (in mkdocs.yml's nav order) runs in a session
(tests/support/readme.py): a copy of the repository, one bash per host, moto's server as the AWS account and a
Kubernetes API server stand-in, each command as the page prints it. A command that exits non-zero fails the
test; one that needs a real account runs its listed substitute instead (tests/support/readme_exemptions.py, the only
place that substitutes anything). Every job a session submits or applies runs through the launch rehearsal,
and the session fails unless each of those jobs exited 0 on every node and, where it trains, its loss fell.
"""

from __future__ import annotations

import json

import pytest

from tests.support import readme, readme_exemptions
from tests.support.rehearsal import assert_trained
from tests.support.walkthrough import Walkthrough

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e

JSII_BANNER = "!" * 20  # the frame of jsii's Node.js version banners
SESSIONS = readme.site_sessions()


def test_commands_are_split_as_bash_reads_them():
    text = "\n".join([
        "<!-- session: demo -->",
        "<!-- on: head-node -->",
        "```sh",
        "# a comment line is dropped",
        "aws batch submit-job \\",
        "  --job-name x   # a continuation stays one command",
        "cat > f <<'EOF'",
        "a $HOME b",
        "EOF",
        "",
        "for i in 1 2; do",
        "  echo $i",
        "done",
        "kubectl describe node <a node>",
        "```",
        "```yaml",
        "not: shell",
        "```",
    ])
    (block,) = readme.blocks(text)
    assert (block.session, block.host, block.line) == ("demo", "head-node", 3)
    assert [c.text for c in block.commands] == [
        "aws batch submit-job \\\n  --job-name x   # a continuation stays one command",
        "cat > f <<'EOF'\na $HOME b\nEOF",
        "for i in 1 2; do\n  echo $i\ndone",
        "kubectl describe node <a node>",  # not shell as written: kept, and running it fails
    ]
    assert [c.line for c in block.commands] == [5, 7, 11, 14]


def test_a_file_block_is_written_byte_for_byte_into_the_sessions_folder(tmp_path):
    import subprocess

    text = "\n".join([
        "<!-- session: demo -->",
        "<!-- file: app.py -->",
        "```python",
        "print('$HOME', \"`x`\")  # nothing expands",
        "```",
        "```python",
        "a block without a file marker is read, not written",
        "```",
    ])
    (block,) = readme.blocks(text)
    assert (block.session, block.file, block.line) == ("demo", "app.py", 3)
    (command,) = block.commands
    subprocess.run(["bash", "-c", command.text], cwd=tmp_path, check=True)
    assert (tmp_path / "app.py").read_text() == "print('$HOME', \"`x`\")  # nothing expands\n"


def test_every_listed_exemption_is_a_command_of_the_readme():
    commands = {c.text for blocks in SESSIONS.values() for b in blocks for c in b.commands}
    assert set(readme_exemptions.EXEMPT) <= commands, set(readme_exemptions.EXEMPT) - commands


def test_no_command_has_a_placeholder_to_fill_in():
    """A `<thing>` the reader must replace cannot be run as written: walkthroughs use variables."""
    found = [
        f"{c.where}: {c.text.splitlines()[0]}"
        for blocks in SESSIONS.values() for b in blocks for c in b.commands
        if readme.has_placeholder(c.text)
    ]
    assert not found, "\n".join(found)


# Sessions that fail today for a defect being fixed (strict: the test fails once they pass, so that the
# entry goes). Nothing else may be listed here.
KNOWN_BROKEN: dict[str, str] = {}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_BROKEN[n], strict=True)) if n in KNOWN_BROKEN else n
     for n in sorted(SESSIONS)],
)
def test_readme_session_runs(name, tmp_path):
    walk = Walkthrough(name, tmp_path)
    try:
        for ran in walk.run_blocks(SESSIONS[name]):
            where = f"{ran.command.where} (session {name}, on {ran.host})"
            assert ran.code == 0, (
                f"{where}: `{ran.command.text}` exited {ran.code}:\n{ran.output[-8000:]}\n{walk.job_logs()}"
            )
            # jsii's banner about the Node.js it runs on (end-of-life, untested): the README's commands run on a
            # supported one, whatever node the machine has (the workstation's PATH has the machine's).
            assert JSII_BANNER not in ran.output, f"{where}: `{ran.command.text}` printed jsii's Node.js banner"
        if walk.cluster is not None:
            walk.cluster.wait_for_jobs()
        for rehearsal in walk.rehearsals:
            results = rehearsal["results"]
            outputs = "\n".join(f"--- node {r.rank} exited {r.code}:\n{r.output[-2000:]}" for r in results)
            assert all(r.code == 0 for r in results), (
                f"session {name}: {rehearsal['backend']} job {rehearsal['job']} failed\n{outputs}"
            )
            if any('"loss_per_epoch"' in r.output for r in results):
                assert_trained(results)
        assert_sessions_forward_the_private_endpoint(walk)
        assert_the_warmup_filled_its_jobs_cache(walk)
    finally:
        walk.close()


def assert_the_warmup_filled_its_jobs_cache(walk: Walkthrough) -> None:
    """The warm-up before a capacity block (`trn submit ... --name warmup --env TRN_PRECOMPILE=1`): every node
    ran neuron_parallel_compile over TRN_PRECOMPILE_STEPS steps, without a checkpoint directory, into the job's
    own cache set, which the same job finds on another group."""
    if not any(r.command.text.startswith("trn submit") and "--name warmup" in r.command.text for r in walk.ran):
        return
    log = walk.tmp / readme_exemptions.PRECOMPILE_LOG
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(c["env"]["NODE_RANK"] for c in calls) == ["0", "1"], calls
    for call in calls:
        assert call["argv"][0] == "torchrun" and call["env"]["TRN_PRECOMPILE_STEPS"] == "10", call
        assert call["env"]["TRN_CHECKPOINT_DIR"] is None, call
        assert "neuron-cache/mlp-distributed" in call["env"]["NEURON_CC_FLAGS"], call


def assert_sessions_forward_the_private_endpoint(walk: Walkthrough) -> None:
    """Every Session Manager session `trn connect` opened, as the API received it: port forwarding to the
    cluster's private endpoint on 443, through the access host the EKS stack deployed, nothing else."""
    from trainium_cdk.facts.names import OUTPUT_ACCESS_HOST_ID

    connects = [r for r in walk.ran if r.command.text.startswith("trn connect") and "--stop" not in r.command.text]
    started = [s for s in walk.sessions() if s["action"] == "StartSession"]
    hosts = {o[OUTPUT_ACCESS_HOST_ID] for o in walk.outputs.values() if OUTPUT_ACCESS_HOST_ID in o}
    assert len(started) == (1 if connects else 0), started
    for request in started:
        assert request == {
            "action": "StartSession", "region": readme_exemptions.REGION, "Target": request["Target"],
            "DocumentName": "AWS-StartPortForwardingSessionToRemoteHost",
            "Parameters": {"host": [readme_exemptions.PRIVATE_ENDPOINT_HOST], "portNumber": ["443"],
                           "localPortNumber": ["8443"]},
        }
        assert request["Target"] in hosts, (request["Target"], hosts)


def test_the_readmes_envsubst_fills_in_the_placeholders_and_nothing_else(tmp_path):
    """The README's `envsubst '$TRAINING_IMAGE' < dist/...` leaves the launcher's own shell variables alone;
    the bare `envsubst < file` it replaced emptied them (`[ -n "$MASTER_ADDR" ]` became `[ -n "" ]`)."""
    import re
    import shlex
    import shutil
    import subprocess

    import yaml

    from tests.support.helpers import ROOT
    from trainium_cdk.app.config import build_config
    from trainium_cdk.app.dist import write_dist

    envsubst = shutil.which("envsubst")
    assert envsubst, "envsubst (gettext-base) is needed: the README's commands use it"
    (command,) = [c.text for b in readme.site_blocks() for c in b.commands if c.text.startswith("envsubst '")
                  and "job-mlp.k8s.yaml" in c.text]
    words = shlex.split(command.split("|")[0].split("<")[0])
    assert words[0] == "envsubst" and len(words) == 2, command
    write_dist(build_config(yaml.safe_load((ROOT / "config" / "default.yaml").read_text())), tmp_path)
    text = (tmp_path / "eks" / "workloads" / "job-mlp.k8s.yaml").read_text()
    env = {"PATH": "/usr/bin:/bin", "TRAINING_IMAGE": "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1"}

    def run(*args: str) -> str:
        return subprocess.run([envsubst, *args], input=text, env=env, capture_output=True, text=True, check=True).stdout

    # The launcher's variables as Kubernetes takes them: every $ written $$ (charts/_k8s.literal).
    assert "${TRAINING_IMAGE}" in text and '"$$MASTER_ADDR"' in text
    # Only $TRAINING_IMAGE / ${TRAINING_IMAGE} change (the file's header comment names the variable too).
    assert run(words[1]) == re.sub(r"\$\{?TRAINING_IMAGE\}?", env["TRAINING_IMAGE"], text)
    assert '"$$MASTER_ADDR"' not in run()  # the old README line: every $VAR of the launcher emptied


# Imported first by every process torchrun starts (PYTHONPATH): at exit, after the script's own handlers, a
# DistributedDataParallel still in memory (referenced, or in a cycle no collection has freed) fails the process.
_DDP_AT_EXIT = '''\
import atexit, gc, os, sys

def _no_ddp_left():
    ddp = sys.modules.get("torch.nn.parallel")
    if ddp is not None and any(isinstance(o, ddp.DistributedDataParallel) for o in gc.get_objects()):
        sys.stderr.write("DistributedDataParallel alive at exit\\n")
        sys.stderr.flush()
        os._exit(97)

atexit.register(_no_ddp_left)
'''


def test_the_site_scripts_free_ddp_before_the_process_group_goes(tmp_path):
    """DDP's reducer holds the process group in a reference cycle. A script that leaves its DDP model to interpreter
    exit has the group torn down there with gloo's threads running, and a rank aborts now and then ("terminate called
    without an active exception", SIGABRT: 2 runs in 50 of the walkthrough's train.py here; CI's red run at
    205f002). Every file block of the site that wraps a model in DDP runs under torchrun with a check at exit."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.rehearsal import free_port

    found = [b for b in readme.site_blocks() if b.file and b.file.endswith(".py")
             and "DistributedDataParallel(" in b.commands[0].text]
    assert found, "the walkthroughs' own script wraps its model in DDP"
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "sitecustomize.py").write_text(_DDP_AT_EXIT)
    for block in found:
        subprocess.run(["bash", "-c", block.commands[0].text], cwd=tmp_path, check=True)
        torchrun = Path(sys.executable).parent / "torchrun"
        done = subprocess.run(
            [str(torchrun), "--nnodes=1", "--nproc_per_node=2", "--master_addr=127.0.0.1",
             f"--master_port={free_port()}", block.file, "--steps", "3"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
            env={"PATH": f"{torchrun.parent}:/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1",
                 "PYTHONPATH": str(tmp_path / "probe")},
        )
        assert done.returncode == 0, f"{block.page}:{block.line} ({block.file}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
