"""Hostile values, executed: every generated script that carries what a config or `trn submit` accepts runs here
with values that would leave a marker file if any of them ran as code, and each value arrives as one argument.

The config takes these values (:data:`VALUES`) only in a job's command and arguments, and a glob in the data
loader's S3 URI (the first test; tests/unit/config/test_hostile_inputs.py shows that every script of dist/ still parses). With
a command of such values, under stand-ins (the launch rehearsal's stage: its srun, scontrol, hostname, systemd-run,
its /fsx and Neuron venv; tests/support/ssm_host.py's instance for Run Command; tests/support/slurm_standin.py's sbatch;
tests/support/recorder_standin.py's torchrun and aws, which record what they were given):

==============================================  =================================================================
what runs                                       how
==============================================  =================================================================
a Batch group's job definition (template)       its container command as Batch runs it (exec form), its variables
the EKS job of workloads.jobs (dist/ YAML)      its container's command and args (exec form), its variables
the data loader (dist/ YAML)                    its container's args after the image's entrypoint, aws
the Slurm batch scripts (dist/parallelcluster)  bash, with the command as sbatch's arguments and ``--env`` values
                                                as sbatch passes them; srun runs the launcher on one node
`trn submit` to Slurm and to the dev instance   the Run Command script `trn` sends, on an ssm_host instance: the
                                                sbatch it queues; the unit's run script and the launcher it starts
==============================================  =================================================================

A value holding a line of a here-document's end word ended the Run Command script's document early, and the
lines after it ran as root (node.heredoc_end). Cut: what runs after torchrun (the training program: torchrun's argv
and environment are asserted instead); the job `trn submit` queues on Slurm is not run again (the batch script's
test runs it with the same arguments). The nodes' user data and setup programs (Batch, EKS, dev instance, Slurm
setup and prolog) carry none of these values (:func:`test_no_value_reaches_a_node_setup`; no field that reaches
them accepts one), so running them here would test nothing more; tests/unit/node/test_batch_node.py,
test_fetched_scripts.py and test_slurm_users.py run them under stand-ins.
"""

from __future__ import annotations

import atexit
import copy
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import recorder_standin
from tests.support.chart_helpers import as_run
from tests.support.helpers import Synthesized, group_resources, resources, strings, synth, template_text
from tests.support.rehearsal import Stage
from tests.unit.config.test_hostile_inputs import FREE_TEXT, FULL, PATHS, _get, _set
from trainium_cdk.app.config import ConfigError, build_config
from trainium_cdk.app.dist import write_dist
from trainium_cdk.rehearsal.schedulers import container_env

# Where a value that ran as code leaves its marker: a folder of this run, empty unless something ran.
MARKERS = Path(tempfile.mkdtemp(prefix="trn-hostile-"))
atexit.register(shutil.rmtree, MARKERS, True)
# The here-documents the Run Command scripts of `trn submit` carry their parts in: a value with a line of that word
# ended one early.
HEREDOC_ENDS = ("TRAINIUM_SLURM", "TRAINIUM_RUN", "TRAINIUM_LAUNCHER")


def _values() -> dict[str, str]:
    m = MARKERS
    values = {
        "substitution": f"$(touch {m}/substitution)",
        "backticks": f"`touch {m}/backticks`",
        "semicolon": f"x;touch {m}/semicolon",
        "and": f"x && touch {m}/and",
        "newline": f"x\ntouch {m}/newline",
        "single-quotes": f"' ; touch {m}/single-quotes ; '",
        "double-quotes": f'"$(touch {m}/double-quotes)"',
        "glob": "/*",
        "variable": "${HOME}$PATH",
        "spaces": "two  words\tand a tab",
    }
    # The line after the document's end runs; the ':' closes the quote the value opened (shlex.quote's).
    values |= {f"heredoc-{end}": f"x\n{end}\ntouch {m}/heredoc-{end}\n: '" for end in HEREDOC_ENDS}
    return values


VALUES = _values()
GLOB_URI = "s3://my-training-data/datasets/*"
COMMAND = ["train.py", *VALUES.values()]
# `--env` takes values of one line (cli/jobs.py parse_env).
ENV = {f"HOSTILE_{i}": v for i, v in enumerate(v for v in VALUES.values() if "\n" not in v)}


@pytest.fixture(autouse=True)
def _clean_markers() -> Iterator[None]:
    yield
    found = sorted(p.name for p in MARKERS.iterdir())
    for path in MARKERS.iterdir():
        path.unlink()
    assert found == [], f"a hostile value ran as code: {found}"


def test_the_config_takes_these_values_only_in_free_text():
    """Every string field with each value: refused with a ConfigError, or a field of FREE_TEXT; the one exception,
    a glob in the data loader's S3 URI (``*`` is one of S3's safe characters), is an argument of ``aws s3 sync``."""
    taken, elsewhere = set(), set()
    for path in PATHS:
        free = any(part in FREE_TEXT for part in path if isinstance(part, str))
        for kind, value in VALUES.items():
            raw = copy.deepcopy(FULL)
            _set(raw, path, _get(FULL, path) + value)
            try:
                build_config(raw)
            except ConfigError:
                continue
            (taken if free else elsewhere).add((path, kind))
    assert elsewhere == {(("workloads", "data_loader", "s3_uri"), "glob")}
    assert all("command" in path for path, _ in taken), taken  # the image URIs refuse every one
    assert {(("batch", "command", 0), kind) for kind in VALUES} <= taken
    assert {(("workloads", "jobs", 0, "command", 1), kind) for kind in VALUES} <= taken


# -- the config's jobs: Batch's job definitions, EKS's job in dist/, the Slurm batch scripts -----------------


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> tuple[Synthesized, list[Path]]:
    raw = copy.deepcopy(FULL)
    raw["batch"]["command"] = COMMAND
    raw["workloads"]["jobs"][0]["command"] = COMMAND
    raw["workloads"]["data_loader"]["s3_uri"] = GLOB_URI
    config = build_config(raw)
    return synth(config, nag=False), write_dist(config, tmp_path_factory.mktemp("dist"))


class Node:
    """A node of the launch rehearsal's stage with torchrun recorded: run an argv or a script there."""

    def __init__(self, root: Path) -> None:
        self.stage = Stage(root / "stage")
        self.log = root / "recorded.jsonl"
        self.bin = recorder_standin.install(root / "recorder", ["torchrun"])

    def env(self, job_env: dict[str, str], **scheduler: str) -> dict[str, str]:
        env = self.stage.environment(job_env)
        env.update(scheduler, PATH=f"{self.bin}:{env['PATH']}", RECORDER_LOG=str(self.log),
                   TRN_NEURON_VERSION_FILE=str(self.stage.root / "no-neuron-driver"))
        return env

    def run(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=env, cwd=self.stage.root, capture_output=True, text=True, timeout=120,
                              check=False)

    def torchrun(self) -> dict[str, Any]:
        (call,) = recorder_standin.calls(self.log, "torchrun")
        return call


def _the_command_arrived(call: dict[str, Any]) -> None:
    """torchrun's argv ends with the command, each value one argument as it was written."""
    assert call["argv"][-len(COMMAND):] == COMMAND, call["argv"]


def test_a_batch_job_definition_runs_the_command_as_arguments(synthesized, tmp_path):
    result, _ = synthesized
    template = result.template_with_nested("batch")
    (definition,) = group_resources(template, "AWS::Batch::JobDefinition").values()  # the one group's
    props = definition["Properties"]
    container = props["NodeProperties"]["NodeRangeProperties"][0]["Container"]
    parameters = props.get("Parameters", {})
    argv = [parameters[w.removeprefix("Ref::")] if w.startswith("Ref::") else template_text(w)
            for w in container["Command"]]
    assert argv[-len(COMMAND):] == COMMAND
    node = Node(tmp_path)
    job_env = {e["Name"]: template_text(e["Value"]) for e in container.get("Environment", [])}
    done = node.run(argv, node.env(job_env, AWS_BATCH_JOB_NUM_NODES="1", AWS_BATCH_JOB_NODE_INDEX="0",
                                   AWS_BATCH_JOB_MAIN_NODE_INDEX="0", AWS_BATCH_JOB_ID="job-1"))
    assert done.returncode == 0, done.stderr
    _the_command_arrived(node.torchrun())


def _documents(path: Path) -> list[dict[str, Any]]:
    """A YAML file of dist/ as kubectl reads it: libyaml (go-yaml, which kubectl uses, is its port) takes a tab
    inside a plain scalar, as YAML 1.2 allows; PyYAML's pure-Python scanner refuses it."""
    return list(yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader))


def test_the_eks_job_in_dist_runs_the_command_as_arguments(synthesized, tmp_path):
    _, written = synthesized
    (path,) = [p for p in written if p.name == "job-pretrain.k8s.yaml"]
    (job,) = _documents(path)
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    # As the kubelet starts it: Kubernetes' expansion of the command and env ($$ to $).
    argv, job_env = as_run(container), container_env(container)
    node = Node(tmp_path)
    done = node.run(argv, node.env(job_env, VC_TASK_INDEX="0", VC_LEADER_NUM="1", VC_WORKER_NUM="0",
                                   VC_LEADER_HOSTS="pretrain-leader-0", TRN_JOB_NAME="pretrain"))
    assert done.returncode == 0, done.stderr
    _the_command_arrived(node.torchrun())


def test_the_data_loader_in_dist_copies_the_uri_it_was_given(synthesized, tmp_path):
    """The configured data loader's container (dist/ YAML) with a glob in its S3 URI: `aws s3 sync` gets it as is."""
    _, written = synthesized
    (path,) = [p for p in written if p.name == "data-loader.k8s.yaml"]
    (job,) = [d for d in _documents(path) if d["kind"] == "Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    node = Node(tmp_path)
    recorder_standin.install(node.bin, ["aws"])
    env = node.env({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    # No command: the aws-cli image's entrypoint, aws.
    done = node.run([*container.get("command", ["aws"]), *container["args"]], env)
    assert done.returncode == 0, done.stderr
    (call,) = recorder_standin.calls(node.log, "aws")
    assert call["argv"][:4] == ["s3", "sync", "--only-show-errors", GLOB_URI]


def _sbatch_env(node: Node, script: Path, **extra: str) -> dict[str, str]:
    return node.env({}, SLURM_JOB_ID="7", SLURM_JOB_NAME=script.stem, SLURM_JOB_NUM_NODES="1",
                    SLURM_JOB_NODELIST="train-st-trn1-1", SLURM_SUBMIT_DIR=str(node.stage.root),
                    REHEARSAL_LOG=str(node.stage.root / "srun"), **extra)


@pytest.mark.parametrize("name", ["train-train.sbatch", "fabric-train.sbatch"])
def test_the_slurm_batch_scripts_run_the_command_and_the_env_as_data(synthesized, tmp_path, name):
    """The batch script with the command as sbatch's arguments and `trn submit --env` values as sbatch passes
    them (TRN_JOB_ENV); the fabric check takes no arguments of a user's, and runs with these in its environment."""
    _, written = synthesized
    (path,) = [p for p in written if p.name == name]
    node = Node(tmp_path)
    script = node.stage.root / name
    script.write_text(node.stage.substitute_script(path.read_text()))
    job_env = "\n".join(f"{k}={v}" for k, v in ENV.items())
    done = node.run(["bash", str(script), *COMMAND], _sbatch_env(node, script, TRN_JOB_ENV=job_env))
    srun_output = node.stage.root / "srun.0"  # the stage's srun writes node 0's output there
    assert done.returncode == 0, done.stderr + (srun_output.read_text() if srun_output.exists() else "")
    call = node.torchrun()
    if name.startswith("train-"):
        _the_command_arrived(call)
        assert {k: call["env"][k] for k in ENV} == ENV


def test_no_value_reaches_a_node_setup(synthesized):
    """No user data, launch template or node setup of any backend carries a value (they come from fields that
    refuse them); the jobs do."""
    result, written = synthesized
    marker = str(MARKERS)
    carriers = []
    for path in result.template_paths():
        for name, resource in json.loads(path.read_text()).get("Resources", {}).items():
            if any(marker in text for text in strings(resource)):
                carriers.append(resource["Type"])
                props = resource.get("Properties", {})
                assert "UserData" not in props and "UserData" not in props.get("LaunchTemplateData", {}), name
    # The Batch job definition, and the EKS stack's manifest of the job (applied through the Kubernetes API: JSON).
    assert set(carriers) == {"AWS::Batch::JobDefinition", "Custom::AWSCDK-EKS-KubernetesResource"}, carriers
    setups = [p for p in written if p.suffix == ".sh" or "prolog" in p.name or p.name.endswith(".yaml")]
    assert setups and [p.name for p in setups if marker in p.read_text()] == ["job-pretrain.k8s.yaml"]


# -- `trn submit`: the Run Command script on the head node and on the development instance --------------------


def _stack_outputs(stack: str, **values: str) -> Any:
    import datetime as dt

    return lambda params: {"Stacks": [{
        "StackName": stack, "StackStatus": "CREATE_COMPLETE", "CreationTime": dt.datetime(2026, 11, 1),
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in values.items()]}]}


@pytest.fixture
def config_file(tmp_path) -> Path:
    from tests.unit.jobs.test_own_job import DEFAULT_YAML

    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    raw["backends"] = ["parallelcluster", "instance"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _env_flags() -> list[str]:
    return [flag for k, v in ENV.items() for flag in ("--env", f"{k}={v}")]


def test_trn_submit_to_slurm_queues_the_command_as_sbatch_arguments(aws, no_sleep, config_file, tmp_path):
    from tests.support.cli_support import run_cli
    from tests.support.ssm_host import Host, serve_run_command
    from trainium_cdk.app.config import load_config
    from trainium_cdk.app.parallelcluster.sbatch import head_node_files

    host = Host(tmp_path / "head-node", Stage(tmp_path / "nodes"))
    (host.home / "trainium").mkdir()
    for name, text in head_node_files(load_config(config_file)).items():
        (host.home / "trainium" / name).write_text(text)
    aws.fake("DescribeStacks", _stack_outputs("trainium-parallelcluster", HeadNodeInstanceId="i-0123456789abcdef0"))
    serve_run_command(aws, {"i-0123456789abcdef0": host})
    result = run_cli("submit", "--backend", "parallelcluster", "--config", str(config_file), "--name", "hostile",
                     *_env_flags(), "--", *COMMAND)
    assert result.code == 0, result.err
    (job,) = [json.loads(p.read_text()) for p in host.spool.glob("job-*.json")]
    assert job["args"] == COMMAND
    assert job["env"]["TRN_JOB_ENV"] == "\n".join(f"{k}={v}" for k, v in ENV.items())


def test_trn_submit_to_the_development_instance_runs_the_command_as_arguments(aws, no_sleep, config_file, tmp_path):
    """The unit's run script runs the launcher (the stage's systemd-run runs it in the foreground) up to torchrun."""
    from tests.support.cli_support import run_cli
    from tests.support.ssm_host import Host, serve_run_command

    host = Host(tmp_path / "dev-instance", Stage(tmp_path / "nodes"))
    recorded = tmp_path / "recorded.jsonl"
    recorder_standin.install(host.bin, ["torchrun"])
    aws.fake("DescribeStacks", _stack_outputs("trainium-instance", InstanceId="i-0fedcba9876543210"))
    serve_run_command(aws, {"i-0fedcba9876543210": host})
    # The instance's shell has the recorder's log and no Neuron driver (Host.environment is what it starts with).
    extra = {"RECORDER_LOG": str(recorded), "TRN_NEURON_VERSION_FILE": str(tmp_path / "no-neuron-driver")}
    base = Host.environment
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Host, "environment", property(lambda self: {**base.fget(self), **extra}))
        result = run_cli("submit", "--backend", "instance", "--config", str(config_file), "--name", "hostile",
                         *_env_flags(), "--", *COMMAND)
    assert result.code == 0, result.err
    (call,) = recorder_standin.calls(recorded, "torchrun")
    _the_command_arrived(call)
    assert {k: call["env"][k] for k in ENV} == ENV
