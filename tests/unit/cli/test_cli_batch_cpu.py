"""`trn submit --backend batch --job <recipe>-data` on the Batch CPU queue (issue 44 item 8): a recipe's data job is
CPU work; it goes to the CPU queue's job definition (one general-purpose node), never to a Trainium group's queue,
with the recipe's whole environment (the CPU definition sets none). AWS is moto's Batch; the stack's outputs are
DescribeStacks' answer."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli_support import NATIVE_TRN2, AwsCalls, run_cli
from tests.support.helpers import build_config
from tests.unit.jobs.test_own_job import JobDefinitions
from trainium_cdk.cli.batch_jobs import recipe_job
from trainium_cdk.cli.jobs import UserJob
from trainium_cdk.facts.names import (
    BATCH_JOB_DEFINITION_ARN,
    BATCH_JOB_QUEUE_ARN,
    BATCH_LOG_GROUP_NAME,
    OUTPUT_BATCH_CPU,
    OUTPUT_BATCH_GROUPS,
    output_key,
)
from trainium_cdk.runtime.batch_job import BASED_ON_TAG
from trainium_cdk.runtime.jobs import JOB_NAME_VARIABLE

REGION = NATIVE_TRN2["region"]
STACK = "trainium-batch"
IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/trainium-batch-trainingimages:recipe-titan-llama3-20261208-000000"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "native.yaml"
    path.write_text(yaml.safe_dump({"project": "trainium", **NATIVE_TRN2}, sort_keys=False))
    return path


def _queue(registry: JobDefinitions, name: str, vcpus: int) -> dict[str, str]:
    """A queue and its one-node multi-node definition as the stack writes them, in the registry."""
    definition = registry.register({
        "jobDefinitionName": name, "type": "multinode", "parameters": {}, "propagateTags": True,
        "nodeProperties": {"numNodes": 1, "mainNode": 0, "nodeRangeProperties": [{"targetNodes": "0:0", "container": {
            "image": "public.ecr.aws/neuron/train:1", "command": ["true"], "environment": [],
            "resourceRequirements": [{"type": "VCPU", "value": str(vcpus)}, {"type": "MEMORY", "value": "29491"}]}}]},
    })
    return {BATCH_JOB_QUEUE_ARN: f"arn:aws:batch:{REGION}:123456789012:job-queue/{name}",
            BATCH_JOB_DEFINITION_ARN: definition["jobDefinitionArn"], BATCH_LOG_GROUP_NAME: f"/aws/batch/{name}"}


@pytest.fixture
def registry(aws: AwsCalls) -> JobDefinitions:
    """AWS Batch's job definitions and submits (tests/unit/jobs/test_own_job.py: moto leaves nodeProperties out)."""
    registry = JobDefinitions()
    aws.fake("RegisterJobDefinition", registry.register)
    aws.fake("DescribeJobDefinitions", registry.describe)
    aws.fake("SubmitJob", registry.submit)
    return registry


@pytest.fixture
def deployed(aws: AwsCalls, registry: JobDefinitions) -> dict[str, dict[str, str]]:
    """The group's queue and the CPU queue, published as the batch stack's two outputs."""
    queues = {"train": _queue(registry, "trainium-batch-train", 192), "cpu": _queue(registry, "trainium-batch_cpu", 8)}
    outputs = {output_key(OUTPUT_BATCH_GROUPS): json.dumps({"train": queues["train"]}),
               output_key(OUTPUT_BATCH_CPU): json.dumps(queues["cpu"])}
    aws.fake("DescribeStacks", {"Stacks": [{
        "StackName": STACK, "StackStatus": "UPDATE_COMPLETE", "CreationTime": dt.datetime(2026, 12, 1),
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]}]})
    return queues


def test_the_data_job_goes_to_the_cpu_queue_with_the_recipe_s_whole_environment(aws, registry, deployed, config):
    result = run_cli("submit", "--backend", "batch", "--config", str(config), "--job", "titan-llama3-data",
                     "--name", "tokenize", "--image", IMAGE)
    assert result.code == 0, result.err
    assert result.err.startswith("trn submit --job titan-llama3-data: CPU work, on the Batch CPU queue (m7i.2xlarge), "
                                 "no Trainium node\n")
    # The recipe's image on a revision of the CPU definition, the rest of it as deployed.
    (registered,) = [r for r in aws.of("RegisterJobDefinition") if BASED_ON_TAG in r.get("tags", {})]
    (deployed_cpu,) = [d for d in registry.revisions if d["jobDefinitionArn"] == deployed["cpu"][BATCH_JOB_DEFINITION_ARN]]
    (node_range,) = registered["nodeProperties"]["nodeRangeProperties"]
    assert node_range == {**deployed_cpu["nodeProperties"]["nodeRangeProperties"][0],
                          "container": {**deployed_cpu["nodeProperties"]["nodeRangeProperties"][0]["container"], "image": IMAGE}}
    assert registered["jobDefinitionName"] == "trainium-batch_cpu"
    (request,) = aws.of("SubmitJob")
    assert request["jobQueue"] == deployed["cpu"][BATCH_JOB_QUEUE_ARN]
    assert request["jobDefinition"] == deployed["cpu"][BATCH_JOB_DEFINITION_ARN].rsplit(":", 1)[0] + ":2"
    assert request["nodeOverrides"]["numNodes"] == 1
    (node,) = request["nodeOverrides"]["nodePropertyOverrides"]
    env = {e["name"]: e["value"] for e in node["containerOverrides"]["environment"]}
    # The launcher's variables and the Neuron pins it prints, which the group's definition carries and the CPU one
    # does not, with the recipe's own: one process, its own compile cache set, the dataset folder.
    assert JOB_NAME_VARIABLE not in env
    assert {k: env[k] for k in ("NPROC_PER_NODE", "MASTER_PORT", "TRN_CACHE_DIR", "TRN_CHECKPOINT_ROOT",
                                "TRN_NEURON_TRACK", "TRN_NEURON_DRIVER", "HF_HOME", "TITAN_DATA_DIR",
                                "AWS_DEFAULT_REGION")} == {
        "NPROC_PER_NODE": "1", "MASTER_PORT": "29500", "TRN_CACHE_DIR": "/fsx/neuron-cache/titan-llama3-data",
        "TRN_CHECKPOINT_ROOT": "/fsx/checkpoints", "TRN_NEURON_TRACK": "native", "TRN_NEURON_DRIVER": "2.32.6.0",
        "HF_HOME": "/fsx/huggingface", "TITAN_DATA_DIR": "/fsx/datasets/titan-llama3", "AWS_DEFAULT_REGION": "us-east-2"}
    assert node["containerOverrides"]["command"][-1].endswith("/titan_llama3/prepare.py")
    assert "(1 x m7i.2xlarge, the CPU queue)" in result.out
    # The training job still goes to its group's queue.
    trained = run_cli("submit", "--backend", "batch", "--config", str(config), "--job", "titan-llama3", "--name", "pt",
                      "--image", IMAGE, "--skip-fit")
    assert trained.code == 0, trained.err
    assert aws.of("SubmitJob")[-1]["jobQueue"] == deployed["train"][BATCH_JOB_QUEUE_ARN]


def test_without_a_cpu_queue_the_data_job_takes_a_node_of_its_group(aws, deployed, config, tmp_path):
    """``batch.cpu_instance_type: null``: no CPU queue; the data job goes to its group's queue, as before."""
    raw = {**yaml.safe_load(config.read_text()), "batch": {"cpu_instance_type": None}}
    config.write_text(yaml.safe_dump(raw))
    result = run_cli("submit", "--backend", "batch", "--config", str(config), "--job", "titan-llama3-data",
                     "--name", "tokenize", "--image", IMAGE)
    assert result.code == 0, result.err
    assert "CPU work" not in result.err
    assert aws.of("SubmitJob")[0]["jobQueue"] == deployed["train"][BATCH_JOB_QUEUE_ARN]


def test_a_stack_without_the_cpu_queue_is_one_line_naming_the_way_out(aws, config):
    """A stack deployed before the CPU queue existed: one line, redeploy or opt out."""
    outputs = {output_key(OUTPUT_BATCH_GROUPS): json.dumps({"train": {BATCH_JOB_QUEUE_ARN: "q", BATCH_JOB_DEFINITION_ARN: "d"}})}
    aws.fake("DescribeStacks", {"Stacks": [{
        "StackName": STACK, "StackStatus": "UPDATE_COMPLETE", "CreationTime": dt.datetime(2026, 12, 1),
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]}]})
    result = run_cli("submit", "--backend", "batch", "--config", str(config), "--job", "titan-llama3-data",
                     "--image", IMAGE)
    # The notice of where CPU work runs, then the error: one line, no traceback.
    assert result.code == 2 and "Traceback" not in result.err
    notice, line = result.err.splitlines()
    assert notice.endswith("CPU work, on the Batch CPU queue (m7i.2xlarge), no Trainium node")
    assert "has no CPU queue" in line and "batch.cpu_instance_type: null" in line and aws.of("SubmitJob") == []


def test_the_dry_run_names_the_cpu_queue(no_credentials, config):
    result = run_cli("submit", "--backend", "batch", "--config", str(config), "--job", "titan-llama3-data", "--dry-run")
    assert result.code == 0, result.err
    request = json.loads(result.out.split("SubmitJob:\n", 1)[1])
    assert (request["jobQueue"], request["jobDefinition"]) == ("trainium-batch_cpu", "trainium-batch_cpu")
    assert request["nodeOverrides"]["numNodes"] == 1
