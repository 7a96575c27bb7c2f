"""Your own job on every backend, through `trn submit` as a user types it: `-- train.py --lr 3e-4`, `--env`,
`--image`, `--workdir`.

Dry runs need no AWS credentials and print what would be sent. Batch: moto's Batch, every request
asserted whole (a new job definition revision for a new image, reused for the same image). Slurm and the
development instance: SSM Run Command served by tests/support/ssm_host.py, which runs each script on a host stand-in
(tests/e2e/test_own_job_runs.py runs the jobs themselves).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.support.chart_helpers import as_run
from tests.support.cli_support import DEFAULT_YAML, REGION, assert_one_clean_line, run_cli
from tests.unit.cli.test_cli_jobs import DEFINITION, QUEUE
from trainium_cdk.runtime.batch_job import BASED_ON_TAG, register_request
from trainium_cdk.runtime.launcher import launch_command

COMMAND = ("--", "train.py", "--lr", "3e-4")
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/team/train:2"


@pytest.fixture
def config(default_config) -> Path:
    """The default config with every backend (each test names the one it submits to)."""
    return default_config("eks", "batch", "parallelcluster", "instance", name="all.yaml")


# -- dry runs: no credentials, exactly what would be sent ---------------------------------------------


def test_eks_dry_run_shows_image_env_and_command(no_credentials, config):
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "mine", "--dry-run",
                     "--image", IMAGE, "--env", "TEAM=vision", *COMMAND)
    assert result.code == 0, result.err
    (job,) = [o for o in yaml.safe_load_all(result.out) if o]
    # The group's 2 nodes: a gang-scheduled Volcano job, the launcher in front of the command on every pod.
    assert (job["apiVersion"], job["kind"], job["spec"]["minAvailable"]) == ("batch.volcano.sh/v1alpha1", "Job", 2)
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        assert container["image"] == IMAGE
        assert as_run(container) == launch_command(["train.py", "--lr", "3e-4"])
        assert {"name": "TEAM", "value": "vision"} in container["env"]


def test_batch_dry_run_shows_the_revision_and_the_overrides(no_credentials, config):
    result = run_cli("submit", "--backend", "batch", "--config", str(config), "--name", "mine", "--dry-run",
                     "--image", IMAGE, "--env", "TEAM=vision", *COMMAND)
    assert result.code == 0, result.err
    assert f"RegisterJobDefinition, unless an ACTIVE revision of trainium-batch-train already runs this image: the " \
           f"deployed revision's properties, with image {IMAGE} on every container" in result.out
    request = json.loads(result.out.split("SubmitJob:\n", 1)[1])
    assert request == {
        "jobName": "mine", "jobQueue": "trainium-batch-train", "jobDefinition": "trainium-batch-train",
        "nodeOverrides": {"numNodes": 2, "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {
            "command": launch_command(["train.py", "--lr", "3e-4"]),
            "environment": [{"name": "TEAM", "value": "vision"}],
        }}]},
    }


def test_slurm_dry_run_shows_the_sbatch_script(no_credentials, config):
    result = run_cli("submit", "--backend", "parallelcluster", "--config", str(config), "--name", "mine",
                     "--dry-run", "--env", "TEAM=vision", "--workdir", "/fsx/code/mine", *COMMAND)
    assert result.code == 0, result.err
    script = (
        "sudo -iu ubuntu bash -s <<'TRAINIUM_SLURM'\n"
        "set -euo pipefail\n"
        "cd ~\n"
        "export TRN_JOB_ENV='TEAM=vision\n"
        "TRN_WORKDIR=/fsx/code/mine'\n"
        "sbatch --parsable --nodes=2 --job-name=mine \"$HOME\"/trainium/train-train.sbatch train.py --lr 3e-4\n"
        "TRAINIUM_SLURM\n"
    )
    assert script in result.out
    request = json.loads(result.out.split("SendCommand:\n", 1)[1])
    assert request == {
        "InstanceIds": ["<HeadNodeInstanceId of trainium-parallelcluster>"], "DocumentName": "AWS-RunShellScript",
        "Comment": "trn submit mine",
        "Parameters": {"commands": script.splitlines(), "executionTimeout": ["300"]},
    }


def test_instance_dry_run_shows_the_unit_and_its_script(no_credentials, config):
    result = run_cli("submit", "--backend", "instance", "--config", str(config), "--name", "mine", "--dry-run",
                     "--env", "TEAM=vision", *COMMAND)
    assert result.code == 0, result.err
    assert "export TEAM=vision\n" in result.out
    # The job's own packages first (node/job_venv.sh: a requirements.txt where it starts), then the launcher.
    assert 'job_venv > "$dir/output.log" 2>&1 || code=$?' in result.out
    assert ('[ "$code" != 0 ] || /bin/sh "$dir/launch.sh" train.py --lr 3e-4 >> "$dir/output.log" 2>&1 || code=$?'
            in result.out)
    assert ('systemd-run --unit trn-mine --uid "$user" --working-directory "$home" -p RemainAfterExit=yes '
            '/bin/bash "$job/run.sh"') in result.out
    # trn1.2xlarge: its 2 NeuronCores, one node, the cache set of development jobs.
    assert "export NPROC_PER_NODE=2\n" in result.out and "export TRN_CACHE_DIR=/fsx/neuron-cache/instance\n" in result.out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--env", "A=B=C", "--env", "1X=2"), ("--env", "1X=2", "environment variable name")),
        (("--env", "NOVALUE"), ("--env", "KEY=VALUE")),
        (("--env", "A=1", "--env", "A=2"), ("--env", "each KEY once")),
        (("--workdir", "code/mine"), ("--workdir", "absolute directory")),
        (("--job", "mlp"), ("--job", "one or the other")),
    ],
)
def test_bad_job_arguments_are_one_line(no_credentials, config, argv, words):
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--dry-run", *argv, *COMMAND)
    assert_one_clean_line(result, *words)


@pytest.mark.parametrize("backend", ["parallelcluster", "instance"])
def test_an_image_on_a_backend_without_containers_is_one_line(no_credentials, config, backend):
    result = run_cli("submit", "--backend", backend, "--config", str(config), "--dry-run", "--image", IMAGE, *COMMAND)
    assert_one_clean_line(result, "--image", "not in a container")


# -- Batch: a revision for a new image, the command and environment as overrides ------------------------


def _batch_config(config: Path) -> Path:
    raw = yaml.safe_load(config.read_text())
    raw["backends"] = ["batch"]
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    return config


class JobDefinitions:
    """AWS Batch's job definition registry, as its API answers (moto 5.2.5's DescribeJobDefinitions leaves out a
    multi-node definition's nodeProperties): revisions per name, ACTIVE, tags and properties returned whole."""

    def __init__(self) -> None:
        self.revisions: list[dict[str, Any]] = []
        self.submitted: list[dict[str, Any]] = []

    def register(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params["jobDefinitionName"]
        revision = 1 + sum(1 for d in self.revisions if d["jobDefinitionName"] == name)
        arn = f"arn:aws:batch:{REGION}:123456789012:job-definition/{name}:{revision}"
        self.revisions.append({**json.loads(json.dumps(params)), "jobDefinitionArn": arn, "revision": revision,
                               "status": "ACTIVE", "containerOrchestrationType": "ECS"})
        return {"jobDefinitionName": name, "jobDefinitionArn": arn, "revision": revision}

    def describe(self, params: dict[str, Any]) -> dict[str, Any]:
        if "jobDefinitions" in params:
            found = [d for d in self.revisions if d["jobDefinitionArn"] in params["jobDefinitions"]]
        else:
            found = [d for d in self.revisions if d["jobDefinitionName"] == params["jobDefinitionName"]
                     and d["status"] == params.get("status", d["status"])]
        return {"jobDefinitions": json.loads(json.dumps(found))}

    def submit(self, params: dict[str, Any]) -> dict[str, Any]:
        self.submitted.append(params)
        return {"jobName": params["jobName"], "jobId": f"job-{len(self.submitted)}"}


@pytest.fixture
def definitions(aws: Any) -> dict[str, Any]:
    """The deployed stack: its multi-node job definition (as the template writes it) and queue, in the registry."""
    from tests.unit.cli.test_cli_jobs import stack_answer

    registry = JobDefinitions()
    deployed = registry.register({
        "jobDefinitionName": "trainium-batch-train", "type": "multinode",
        "parameters": {"script": "/opt/trainium-cdk/examples/mlp/train.py"},
        "nodeProperties": {"numNodes": 2, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:", "container": {
            "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/cdk-assets:example", "command": ["train"],
            "environment": [{"name": "NPROC_PER_NODE", "value": "32"}],
            "resourceRequirements": [{"type": "VCPU", "value": "128"}, {"type": "MEMORY", "value": "471859"}],
        }}]},
        "retryStrategy": {"attempts": 3}, "propagateTags": True, "timeout": {"attemptDurationSeconds": 604800},
        "platformCapabilities": ["EC2"],
    })
    aws.fake("RegisterJobDefinition", registry.register)
    aws.fake("DescribeJobDefinitions", registry.describe)
    aws.fake("SubmitJob", registry.submit)
    queue = f"arn:aws:batch:{REGION}:123456789012:job-queue/trainium-batch-train"
    aws.fake("DescribeStacks", stack_answer({QUEUE: queue, DEFINITION: deployed["jobDefinitionArn"]}))
    return {"registry": registry, QUEUE: queue, DEFINITION: deployed["jobDefinitionArn"]}


def test_batch_submit_registers_a_revision_for_a_new_image_and_reuses_it(aws, definitions, config):
    config = _batch_config(config)
    registry = definitions["registry"]
    (deployed,) = registry.describe({"jobDefinitions": [definitions[DEFINITION]]})["jobDefinitions"]
    argv = ("--config", str(config), "--image", IMAGE, "--env", "TEAM=vision", *COMMAND)

    first = run_cli("submit", "--name", "one", *argv)
    assert first.code == 0, first.err
    (registered,) = aws.of("RegisterJobDefinition")
    assert registered == register_request(deployed, image=IMAGE)
    (node_range,) = registered["nodeProperties"]["nodeRangeProperties"]
    # Everything of the deployed revision but its image, tagged with the revision it copies.
    assert node_range == {"targetNodes": "0:", "container": {
        **deployed["nodeProperties"]["nodeRangeProperties"][0]["container"], "image": IMAGE}}
    assert {k: registered[k] for k in ("parameters", "retryStrategy", "propagateTags", "timeout", "type")} == {
        k: deployed[k] for k in ("parameters", "retryStrategy", "propagateTags", "timeout", "type")}
    assert registered["tags"] == {BASED_ON_TAG: definitions[DEFINITION]}
    new_arn = "arn:aws:batch:us-west-2:123456789012:job-definition/trainium-batch-train:2"
    overrides = {"targetNodes": "0:", "containerOverrides": {
        "command": launch_command(["train.py", "--lr", "3e-4"]), "environment": [{"name": "TEAM", "value": "vision"}],
    }}
    assert aws.of("SubmitJob") == [{
        "jobName": "one", "jobQueue": definitions[QUEUE], "jobDefinition": new_arn,
        "nodeOverrides": {"numNodes": 2, "nodePropertyOverrides": [overrides]},
    }]
    assert f"registered job definition trainium-batch-train:2 with image {IMAGE}" in first.out

    second = run_cli("submit", "--name", "two", *argv)
    assert second.code == 0, second.err
    assert len(aws.of("RegisterJobDefinition")) == 1  # the same image: the same revision
    assert aws.of("SubmitJob")[1]["jobDefinition"] == new_arn
    assert f"job definition trainium-batch-train:2 runs {IMAGE}: reused" in second.out

    third = run_cli("submit", "--config", str(config), "--name", "three", "--image", IMAGE.replace(":2", ":3"),
                    *COMMAND)
    assert third.code == 0, third.err
    assert len(aws.of("RegisterJobDefinition")) == 2
    assert aws.of("SubmitJob")[2]["jobDefinition"].endswith("/trainium-batch-train:3")


def test_batch_submit_without_an_image_or_command_sends_only_overrides_given(aws, definitions, config):
    config = _batch_config(config)
    result = run_cli("submit", "--config", str(config), "--name", "plain", "--env", "TEAM=vision")
    assert result.code == 0, result.err
    assert aws.of("RegisterJobDefinition") == []
    assert aws.of("SubmitJob") == [{
        "jobName": "plain", "jobQueue": definitions[QUEUE], "jobDefinition": definitions[DEFINITION],
        "nodeOverrides": {"numNodes": 2, "nodePropertyOverrides": [{"targetNodes": "0:", "containerOverrides": {
            "environment": [{"name": "TEAM", "value": "vision"}]}}]},
    }]


def test_batch_image_of_the_deployed_definition_registers_nothing(aws, definitions, config):
    config = _batch_config(config)
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/cdk-assets:example"
    result = run_cli("submit", "--config", str(config), "--name", "same", "--image", image, *COMMAND)
    assert result.code == 0, result.err
    assert aws.of("RegisterJobDefinition") == []
    assert aws.of("SubmitJob")[0]["jobDefinition"] == definitions[DEFINITION]


def test_every_job_backend_can_be_rehearsed():
    """`trn rehearse --backend B` for every backend `trn submit` takes."""
    from trainium_cdk.app import backends
    from trainium_cdk.cli.rehearse import RUNNERS

    assert set(RUNNERS) == set(backends.job_backends())


def test_a_rehearsals_rendezvous_port_is_one_no_outgoing_connection_can_take(monkeypatch, tmp_path):
    """The rendezvous port was the kernel's pick in its ephemeral range, which outgoing connections of every other
    process also take: in CI a concurrent rehearsal's connection took one before torchrun bound it ("Connection
    reset by peer" at the store, node 1 killed). It now comes from below that range, and is free."""
    import socket

    from trainium_cdk.rehearsal import stage

    low = stage.ephemeral_low()
    ports = {stage.free_port() for _ in range(20)}
    assert all(stage.PORT_FLOOR <= p < low for p in ports), (ports, low)
    assert len(ports) > 1  # random: two rehearsals at once pick apart
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
    # A kernel whose range starts at the floor leaves no room: the kernel's pick, as before.
    narrow = tmp_path / "range"
    narrow.write_text(f"{stage.PORT_FLOOR + 10}\t60999\n")
    monkeypatch.setattr(stage, "EPHEMERAL_RANGE", narrow)
    assert stage.free_port() >= stage.PORT_FLOOR + 10


def test_rehearse_prints_a_failed_nodes_output_last(config, tmp_path, monkeypatch):
    """The lines that say why a node failed sit next to the summary (a terminal's last screen, a log's tail), whatever
    its rank. The nodes' results are the runner's (the processes are not what this test is about)."""
    from trainium_cdk.cli import rehearse
    from trainium_cdk.rehearsal import NodeResult

    def runner(args, config, stage, cwd):
        return "job x", [NodeResult(0, 1, "node 0: bad data\n"), NodeResult(1, 0, "node 1: fine\n")]

    monkeypatch.setitem(rehearse.RUNNERS, "eks", runner)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")  # a script that is there (rehearse refuses one that is not)
    result = run_cli("rehearse", "--backend", "eks", "--config", str(config), "--", "train.py")
    assert result.code == 1
    assert result.out.index("node 1: fine") < result.out.index("node 0: bad data") < result.out.index("\nrehearsed job x")
