"""`trn submit/status/logs`.

Batch: a real moto Batch queue, multi-node job definition and CloudWatch Logs; the stack outputs are
faked at DescribeStacks (moto's CloudFormation needs an extra that is not installed).
EKS: no cluster here, so the kubernetes client is replaced with unittest.mock at the API edge; what
`trn submit` sends through it is the real job chart's output, asserted whole. The EKS stack's image
output is faked at DescribeStacks.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
import yaml
from botocore.exceptions import EndpointConnectionError

from tests.support.cli_support import (
    REGION,
    ROOT,
    AwsCalls,
    assert_one_clean_line,
    client_error,
    run_cli,
)
from trainium_cdk.cli import batch_jobs, jobs
from trainium_cdk.cli._common import CliError
from trainium_cdk.facts.names import (
    BATCH_JOB_DEFINITION_ARN,
    BATCH_JOB_QUEUE_ARN,
    BATCH_LOG_GROUP_NAME,
    OUTPUT_BATCH_GROUPS,
    output_key,
)

STACK = "trainium-batch"
# The fields of group "train" in the batch stack's one JSON output.
QUEUE = BATCH_JOB_QUEUE_ARN
DEFINITION = BATCH_JOB_DEFINITION_ARN


@pytest.fixture
def config(default_config) -> Path:
    """The default config with the Batch backend first, and EKS (the EKS tests pass --backend eks: the CLI refuses a
    backend the config does not deploy)."""
    return default_config("batch", "eks", name="jobs.yaml")


def group_outputs(groups: dict[str, dict[str, str]]) -> dict[str, str]:
    """The batch stack's outputs for these groups' fields: one JSON output (names.OUTPUT_BATCH_GROUPS)."""
    return {output_key(OUTPUT_BATCH_GROUPS): json.dumps(groups)}


def stack_answer(fields: dict[str, str]) -> Any:
    """DescribeStacks of the batch stack, with group "train" of these fields."""
    outputs = group_outputs({"train": fields})

    def answer(params: dict[str, Any]) -> Any:
        if params["StackName"] != STACK:
            message = f"Stack with id {params['StackName']} does not exist"
            return client_error("ValidationError", "DescribeStacks", message)
        return {"Stacks": [{
            "StackName": STACK, "StackStatus": "UPDATE_COMPLETE", "CreationTime": dt.datetime(2026, 11, 1),
            "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
        }]}

    return answer


@pytest.fixture
def batch(aws: AwsCalls) -> dict[str, str]:
    """A moto Batch queue and multi-node job definition, published as the stack's outputs."""
    role = boto3.client("iam").create_role(RoleName="batch", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    client = boto3.client("batch", region_name=REGION)
    env = client.create_compute_environment(
        computeEnvironmentName="trainium-train", type="UNMANAGED", state="ENABLED", serviceRole=role
    )
    queue = client.create_job_queue(
        jobQueueName="trainium-train", state="ENABLED", priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env["computeEnvironmentArn"]}],
    )
    definition = client.register_job_definition(
        jobDefinitionName="trainium-train", type="multinode",
        nodeProperties={"numNodes": 2, "mainNode": 0, "nodeRangeProperties": [{
            "targetNodes": "0:", "container": {"image": "neuron", "vcpus": 1, "memory": 128, "command": ["train"]},
        }]},
    )
    # The fields the batch stack writes for each group (tests/meta/test_names.py checks them against the template).
    fields = {
        QUEUE: queue["jobQueueArn"],
        DEFINITION: definition["jobDefinitionArn"],
        BATCH_LOG_GROUP_NAME: "/aws/batch/job",
    }
    aws.fake("DescribeStacks", stack_answer(fields))
    return fields


def submitted(aws: AwsCalls) -> list[dict[str, Any]]:
    return aws.of("SubmitJob")


# -- Batch: submit ----------------------------------------------------------------------------------


def test_submit_sends_a_multinode_job_to_the_group_queue(aws, batch, config):
    result = run_cli("submit", "--config", str(config), "--nodes", "3", "--name", "bert-demo")
    assert result.code == 0, result.err
    assert submitted(aws) == [{
        "jobName": "bert-demo", "jobQueue": batch[QUEUE],
        "jobDefinition": batch[DEFINITION], "nodeOverrides": {"numNodes": 3},
    }]
    job_id = result.out.split("job id ")[1].split()[0]
    job = boto3.client("batch", region_name=REGION).describe_jobs(jobs=[job_id])["jobs"][0]
    assert job["jobName"] == "bert-demo" and job["jobQueue"] == batch[QUEUE]
    assert "(3 x trn1.32xlarge, group train)" in result.out
    flags = f"--backend batch --config {config}"
    assert f"trn status {job_id} {flags} --wait" in result.out and f"trn logs {job_id} {flags} --follow" in result.out
    assert aws.of("DescribeStacks") == [{"StackName": STACK}]


def test_printed_follow_ups_reach_the_same_job_with_the_same_flags(aws, batch, config):
    """`trn submit --config X -c k=v` printed `trn status ID --wait`, which read the default config: in a
    mixed eks+batch deployment it asked EKS for a Batch job id. Each follow-up, parsed by trn's own parser,
    now names the backend, the config and every override it was given."""
    import shlex

    from trainium_cdk.cli import build_parser

    result = run_cli("submit", "--config", str(config), "-c", "region=us-west-2", "--name", "flags-demo")
    assert result.code == 0, result.err
    job_id = result.out.split("job id ")[1].split()[0]
    follow_ups = [line.strip() for line in result.out.splitlines() if line.strip().startswith("trn ")]
    assert [line.split()[1] for line in follow_ups] == ["status", "logs"]
    for line in follow_ups:
        parsed = build_parser().parse_args(shlex.split(line)[1:])
        assert (parsed.job, parsed.backend, parsed.config, parsed.overrides) == (
            job_id, "batch", str(config), ["region=us-west-2"]
        ), line


def test_submit_defaults_nodes_and_name_from_the_group(aws, batch, config):
    result = run_cli("submit", "--config", str(config))
    assert result.code == 0, result.err
    request = submitted(aws)[0]
    assert request["nodeOverrides"] == {"numNodes": 2}
    assert request["jobName"].startswith("trainium-train-")


def test_submit_dry_run_prints_the_request_and_asks_aws_nothing(aws, batch, config):
    """A dry run needs no credentials and no deployed stack: the queue and definition by the names the stack
    gives them (submit sends their ARNs from its output), and no AWS call at all."""
    before = len(aws.calls)
    result = run_cli("submit", "--config", str(config), "--nodes", "4", "--name", "x", "--dry-run")
    assert result.code == 0, result.err
    assert aws.calls[before:] == []
    body = json.loads(result.out.split("SubmitJob:\n", 1)[1])
    assert body == {"jobName": "x", "jobQueue": "trainium-batch-train",
                    "jobDefinition": "trainium-batch-train", "nodeOverrides": {"numNodes": 4}}


def test_submit_dry_run_to_a_group_without_efa_sends_a_one_node_multinode_job(aws, batch, config):
    """trn1.2xlarge's jobs are one-node multi-node parallel jobs (awsvpc: no instance metadata for the job)."""
    raw = yaml.safe_load(config.read_text())
    raw["compute_groups"][0] |= {"instance_type": "trn1.2xlarge", "nodes": 1, "max_nodes": 2}
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = run_cli("submit", "--config", str(config), "--name", "one", "--dry-run", "--", "train.py", "--lr", "1")
    assert result.code == 0, result.err
    body = json.loads(result.out.split("SubmitJob:\n", 1)[1])
    assert body["nodeOverrides"]["numNodes"] == 1 and "containerOverrides" not in body
    (node_range,) = body["nodeOverrides"]["nodePropertyOverrides"]
    assert node_range["targetNodes"] == "0:" and "train.py" in node_range["containerOverrides"]["command"]


def test_submit_to_a_single_node_definition_sends_no_node_overrides(aws, batch, config):
    """A container job definition (deployed before every group's became multi-node parallel) still takes jobs."""
    definition = boto3.client("batch", region_name=REGION).register_job_definition(
        jobDefinitionName="single", type="container",
        containerProperties={"image": "neuron", "vcpus": 1, "memory": 128},
    )
    aws.fake("DescribeStacks", stack_answer({**batch, DEFINITION: definition["jobDefinitionArn"]}))
    assert run_cli("submit", "--config", str(config), "--nodes", "1", "--name", "one").code == 0
    assert "nodeOverrides" not in submitted(aws)[0]
    result = run_cli("submit", "--config", str(config), "--nodes", "2", "--name", "two")
    assert_one_clean_line(result, "--nodes", "single-node")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--nodes", "9"), ("--nodes", "max_nodes of group train (4)")),
        (("--nodes", "0"), ("--nodes",)),
        (("--group", "big"), ("--group", "allowed: train")),
        (("--name", "bad name!"), ("--name", "Batch job name")),
        (("-c", "nodes=lots"), ("configuration error", "nodes")),
        (("--image", "example.com/x y"), ("--image", "image URI")),
        (("--job", "bert-large-phase1"), ("--job", "give your command after --")),
    ],
)
def test_submit_rejects_bad_input_in_one_line(aws, batch, config, argv, words):
    result = run_cli("submit", "--config", str(config), *argv)
    assert_one_clean_line(result, *words)
    assert submitted(aws) == []


def test_submit_without_the_stack_says_to_deploy_it(aws, config):
    missing = client_error("ValidationError", "DescribeStacks", f"Stack with id {STACK} does not exist")
    aws.fake("DescribeStacks", missing)
    result = run_cli("submit", "--config", str(config))
    assert_one_clean_line(result, f"stack {STACK} does not exist in us-west-2", "then `make plan` and `make deploy`")


# -- Batch: finding the outputs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "expected"), [("train", "arn:q1"), ("train-big", "arn:q2")],
)
def test_outputs_are_read_by_their_exact_key(group, expected):
    """A longer group name that contains this one ("train" in "train-big") never claims its outputs."""
    outputs = group_outputs({
        "train": {QUEUE: "arn:q1", "JobQueueName": "q1"}, "train-big": {QUEUE: "arn:q2"},
    })
    found = batch_jobs.group_output_value(outputs, BATCH_JOB_QUEUE_ARN, group=group, stack=STACK)
    assert found == expected


def test_a_missing_output_names_the_key_and_what_is_there():
    with pytest.raises(CliError, match=r"has no output BatchGroups \(outputs: VpcId\)"):
        batch_jobs.group_output_value({"VpcId": "vpc-1"}, BATCH_JOB_QUEUE_ARN, group="train", stack=STACK)


def test_a_missing_group_names_the_groups_there():
    outputs = group_outputs({"big": {QUEUE: "arn:q"}, "small": {QUEUE: "arn:s"}})
    with pytest.raises(CliError, match=r"has no compute group train in its output BatchGroups \(groups: big, small\)"):
        batch_jobs.group_output_value(outputs, BATCH_JOB_QUEUE_ARN, group="train", stack=STACK)


# -- Batch: status ----------------------------------------------------------------------------------


def _submit(config: Path) -> str:
    result = run_cli("submit", "--config", str(config), "--name", "demo")
    assert result.code == 0, result.err
    return result.out.split("job id ")[1].split()[0]


def test_status_of_a_moto_job(aws, batch, config):
    job_id = _submit(config)
    result = run_cli("status", job_id, "--config", str(config))
    assert result.code == 0, result.err
    assert result.out.startswith(f"job {job_id}: SUCCEEDED (demo, 2 nodes")
    assert {"jobs": [job_id]} in aws.of("DescribeJobs")


def jobs_sequence(aws: AwsCalls, states: list[dict[str, Any]]) -> None:
    """DescribeJobs answers the next state per call for the job, nothing for its node ids."""
    remaining = list(states)

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        if any("#" in j for j in params["jobs"]):
            return {"jobs": []}
        state = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        return {"jobs": [{"jobId": params["jobs"][0], "jobName": "demo", **state}]}

    aws.fake("DescribeJobs", answer)


def test_status_wait_prints_transitions_with_backoff(aws, config, no_sleep):
    jobs_sequence(aws, [
        {"status": "SUBMITTED"}, {"status": "RUNNABLE"}, {"status": "RUNNABLE"}, {"status": "RUNNING"},
        {"status": "FAILED", "statusReason": "Essential container in task exited", "container": {"exitCode": 1}},
    ])
    result = run_cli("status", "abc", "--wait", "--config", str(config))
    assert result.code == 1
    transitions = [line.split(" ", 1)[1] for line in result.out.splitlines()]
    assert transitions == [
        "job abc: SUBMITTED (demo)",
        "job abc: SUBMITTED -> RUNNABLE (demo)",
        "job abc: RUNNABLE -> RUNNING (demo)",
        "job abc: RUNNING -> FAILED (demo, Essential container in task exited, exit code 1)",
    ]
    assert no_sleep == [2.0, 2.0, 3.0, 2.0]  # grows while nothing changes, resets on a transition


def test_status_wait_gives_up_at_the_timeout(aws, config, no_sleep):
    jobs_sequence(aws, [{"status": "RUNNING"}])
    result = run_cli("status", "abc", "--wait", "--timeout", "0", "--config", str(config))
    assert result.code == 1
    assert "still RUNNING" in result.err and "Traceback" not in result.err


def test_status_of_an_unknown_job(aws, config):
    result = run_cli("status", "no-such-job", "--config", str(config))
    assert_one_clean_line(result, "no AWS Batch job no-such-job in us-west-2")


# -- Batch: logs ------------------------------------------------------------------------------------


def _put_log(stream: str, *messages: str) -> None:
    logs = boto3.client("logs", region_name=REGION)
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName="/aws/batch/job")
    logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    now = int(dt.datetime.now().timestamp() * 1000)
    logs.put_log_events(
        logGroupName="/aws/batch/job", logStreamName=stream,
        logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(messages)],
    )


def test_logs_print_the_main_node_stream(aws, batch, config):
    job_id = _submit(config)
    _put_log(f"trainium-train/default/{job_id}", "rank 0: step 1 loss 9.1", "rank 0: step 2 loss 8.7")
    result = run_cli("logs", job_id, "--config", str(config))
    assert result.code == 0, result.err
    assert result.out == "rank 0: step 1 loss 9.1\nrank 0: step 2 loss 8.7\n"
    assert {"jobs": [f"{job_id}#0"]} in aws.of("DescribeJobs")  # the main node first
    first = aws.of("GetLogEvents")[0]
    assert first == {"logGroupName": "/aws/batch/job", "logStreamName": f"trainium-train/default/{job_id}",
                     "startFromHead": True}


def test_logs_follow_a_finished_job_drains_and_exits(aws, batch, config, no_sleep):
    job_id = _submit(config)
    _put_log(f"trainium-train/default/{job_id}", "done")
    result = run_cli("logs", job_id, "--follow", "--config", str(config))
    assert result.code == 0, result.err
    assert result.out == "done\n"
    assert result.err == f"job {job_id} SUCCEEDED\n"


def test_logs_follow_waits_for_the_stream_pages_and_ends_with_the_job(aws, config, no_sleep):
    container = {"logStreamName": "s", "logConfiguration": {"logDriver": "awslogs", "options": {"awslogs-group": "/t"}}}
    jobs_sequence(aws, [
        {"status": "RUNNABLE"}, {"status": "RUNNING", "container": container},
        {"status": "RUNNING", "container": container}, {"status": "FAILED", "container": container},
    ])
    pages = {None: (["a"], "t1"), "t1": (["b"], "t2"), "t2": ([], "t2")}
    late = iter([([], "t2"), (["c"], "t3")])

    def events(params: dict[str, Any]) -> dict[str, Any]:
        token = params.get("nextToken")
        found, nxt = next(late) if token == "t2" else pages.get(token, ([], token))
        return {"events": [{"timestamp": 1, "message": m + "\n"} for m in found], "nextForwardToken": nxt}

    aws.fake("GetLogEvents", events)
    result = run_cli("logs", "abc", "--follow", "--config", str(config))
    assert result.out == "a\nb\nc\n"
    assert result.code == 1  # the job FAILED
    assert "waiting for job abc to start (RUNNABLE)" in result.err and "job abc FAILED" in result.err
    assert {p["logGroupName"] for p in aws.of("GetLogEvents")} == {"/t"}


def test_logs_say_the_compile_caches_hits_and_misses_the_launcher_counted(aws, batch, config, tmp_path):
    """The node's log as its launcher wrote it (torchrun's lines, then the launcher's compile-cache line): `trn logs`
    prints it unchanged and says the counts on stderr."""
    from tests.unit.jobs.test_compile_cache import launcher_output

    job_id = _submit(config)
    printed = launcher_output(tmp_path, job=job_id)
    _put_log(f"trainium-train/default/{job_id}", *printed.splitlines())
    result = run_cli("logs", job_id, "--config", str(config))
    assert result.code == 0, result.err
    assert result.out == printed
    assert result.err == "compile cache, node 0: 2 hit(s) (graphs loaded from the Neuron compile cache), 1 miss(es) " \
        "(graphs compiled)\n"


def test_logs_say_the_native_tracks_new_graphs_and_that_its_hits_were_not_logged(aws, batch, config, tmp_path):
    """The native track without TorchNeuron's debug lines: the launcher counted the NEFFs new in the cache."""
    from tests.unit.jobs.test_compile_cache import launch, native_torchrun

    job_id = _submit(config)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    native_torchrun(bin_dir, lines=["step 1 loss 9.1"], new_neffs=3)
    proc = launch(bin_dir, {"TRN_NEURON_TRACK": "native", "TRN_CACHE_DIR": str(tmp_path / "cache"),
                            "TRN_JOB_NAME": job_id})
    out, err = proc.communicate(timeout=30)
    _put_log(f"trainium-train/default/{job_id}", *(out + err).splitlines())
    result = run_cli("logs", job_id, "--config", str(config))
    assert result.code == 0, result.err
    assert result.err == "compile cache, node 0: 3 new graph(s) in the cache (compiled by the job); hits not logged " \
        "(TorchNeuron logs them at TORCH_NEURONX_LOG_LEVEL=3)\n"


def test_logs_say_the_throughput_of_the_recipes_step_lines(aws, batch, config, monkeypatch):
    """titan-llama3's step lines, printed by its own reporter (knobs.say, as node 0 prints them): `trn logs` passes
    them through and says their median after the first step, which compiles."""
    import contextlib
    import io
    import sys

    from trainium_cdk.recipes.titan_llama3 import FOLDER

    monkeypatch.syspath_prepend(str(FOLDER))
    monkeypatch.delitem(sys.modules, "knobs", raising=False)
    import knobs

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        knobs.say(start={"flavor": "8B"})
        for step, (tokens, mfu) in enumerate([(900.0, 0.01), (12000.0, 0.41), (12400.0, 0.43), (11800.0, 0.4)], 1):
            knobs.say(step=step, loss=3.0, lr=3e-4, seconds=1.0, tokens_per_s_per_node=tokens, mfu=mfu)
    job_id = _submit(config)
    _put_log(f"trainium-train/default/{job_id}", *printed.getvalue().splitlines())
    result = run_cli("logs", job_id, "--config", str(config))
    assert result.code == 0, result.err
    assert result.out == printed.getvalue()
    assert result.err == ("throughput, node 0's log: 4 step(s), median 12,000 tokens/s per node, MFU 41.0% (steps "
                          "2-4; the first step, which compiles, left out)\n")


def test_logs_before_the_job_starts(aws, config):
    jobs_sequence(aws, [{"status": "RUNNABLE"}])
    result = run_cli("logs", "abc", "--config", str(config))
    assert result.code == 1
    assert "no log stream yet" in result.err and "--follow" in result.err


# -- errors: one line, exit 2, never a traceback -----------------------------------------------------


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (client_error("AccessDeniedException", "DescribeJobs", "not authorized"), ("access denied to DescribeJobs",)),
        (client_error("UnauthorizedOperation", "DescribeJobs"), ("access denied", "UnauthorizedOperation")),
        (client_error("ThrottlingException", "DescribeJobs", "Rate exceeded"), ("throttled DescribeJobs", "wait")),
        (client_error("ExpiredTokenException", "DescribeJobs"), ("credentials were rejected", "aws sso login")),
        (EndpointConnectionError(endpoint_url="https://batch.us-west-2.amazonaws.com"), ("cannot reach AWS",)),
    ],
)
def test_aws_errors_become_one_line(aws, config, error, words):
    aws.fake("DescribeJobs", error)
    assert_one_clean_line(run_cli("status", "abc", "--config", str(config)), *words)


def test_no_credentials_is_one_line(no_credentials, config):
    assert_one_clean_line(run_cli("status", "abc", "--config", str(config)), "no usable AWS credentials")


def test_missing_config_file_is_one_line(aws, tmp_path):
    result = run_cli("submit", "--config", str(tmp_path / "missing.yaml"))
    assert_one_clean_line(result, "configuration error", "missing.yaml")


def test_the_real_entry_point_prints_no_traceback(tmp_path, config):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "trainium_cdk.cli", "status", "abc", "--config", str(config)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("trn status: no usable AWS credentials") and done.stderr.count("\n") == 1


def test_importing_the_cli_is_cheap_and_synth_never_imports_it():
    heavy = ("boto3", "kubernetes", "cdk8s", "aws_cdk")
    code = f"import sys, trainium_cdk.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    package = ROOT / "trainium_cdk"
    synth_side = [ROOT / "app.py", package / "__init__.py", *(package / "app" / "stacks").glob("*.py")]
    for path in synth_side:
        assert "trainium_cdk.cli" not in path.read_text(), path


# -- EKS (unittest.mock in place of the kubernetes client; no cluster here) ---------------------------

NAMESPACE = "ml"


EKS_STACK = "trainium-eks"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets-123456789012-us-west-2:abc123"
BERT_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets-123456789012-us-west-2:bert456"


def eks_stack_answer(params: dict[str, Any]) -> Any:
    """The deployed EKS stack's outputs, as DescribeStacks returns them."""
    if params["StackName"] != EKS_STACK:
        return client_error("ValidationError", "DescribeStacks", f"Stack with id {params['StackName']} does not exist")
    return {"Stacks": [{
        "StackName": EKS_STACK, "StackStatus": "CREATE_COMPLETE", "CreationTime": dt.datetime(2026, 11, 1),
        "Outputs": [{"OutputKey": "ExampleImageUri", "OutputValue": IMAGE},
                    {"OutputKey": "BertImageUri", "OutputValue": BERT_IMAGE},
                    {"OutputKey": "ClusterName", "OutputValue": "trainium"}],
    }]}


@pytest.fixture
def eks_stack(aws: AwsCalls) -> None:
    aws.fake("DescribeStacks", eks_stack_answer)


def _in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}


def expected_job(config_path: Path, *, name: str, nodes: int | None, image: str = IMAGE, job: str | None = None,
                 command: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Any:
    """What the job chart renders for these arguments: the object the API must receive, whole."""
    from trainium_cdk.app.config import load_config
    from trainium_cdk.app.workloads import render_job

    (obj,) = render_job(load_config(config_path), name=name, image=image, nodes=nodes, group="train", job=job,
                        command=command, env=env or {})
    return obj


@pytest.fixture
def kube(monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]) -> Any:
    from kubernetes import client

    context = {"name": "eks", "context": {"cluster": "eks", "namespace": NAMESPACE}}
    with (
        mock.patch("kubernetes.config.load_kube_config") as load,
        mock.patch("kubernetes.config.list_kube_config_contexts", return_value=([context], context)),
        mock.patch("kubernetes.client.ApiClient") as api_client,
        mock.patch("kubernetes.client.CoreV1Api") as core,
        mock.patch("kubernetes.client.BatchV1Api") as batch_api,
        mock.patch("kubernetes.client.CustomObjectsApi") as custom_api,
        mock.patch("kubernetes.dynamic.DynamicClient") as dynamic,
    ):
        from kubernetes.client.exceptions import ApiException

        custom_api.return_value.get_namespaced_custom_object.side_effect = ApiException(status=404, reason="Not Found")
        yield types.SimpleNamespace(
            load=load, api_client=api_client, core=core.return_value, batch=batch_api.return_value,
            custom=custom_api.return_value, dyn=dynamic.return_value, client=client,
            sleeps=no_sleep,
        )


def pod(
    name: str, rank: int, phase: str, *, created: int = 0, unschedulable: str | None = None,
    job_label: str = "trainium-cdk/job",
) -> Any:
    from kubernetes import client

    scheduled = client.V1PodCondition(type="PodScheduled", status="False", message=unschedulable)
    conditions = [scheduled] if unschedulable else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, labels={job_label: "demo", "trainium-cdk/rank": str(rank)},
            creation_timestamp=dt.datetime(2026, 11, 1, 0, created, tzinfo=dt.UTC),
        ),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="train")], node_name=None if unschedulable else "ip-10-0-1-5"
        ),
        status=client.V1PodStatus(phase=phase, conditions=conditions),
    )


def pods(*items: Any) -> Any:
    from kubernetes import client

    return client.V1PodList(items=list(items))


def job(condition: str | None = None, reason: str | None = None) -> Any:
    from kubernetes import client

    conditions = [client.V1JobCondition(type=condition, status="True", reason=reason)] if condition else None
    return client.V1Job(status=client.V1JobStatus(conditions=conditions))


def test_eks_submit_sends_the_rendered_job_with_the_stack_image(aws, eks_stack, kube, config):
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo", "--nodes", "2")
    assert result.code == 0, result.err
    assert aws.of("DescribeStacks") == [{"StackName": EKS_STACK}]
    kube.load.assert_called_once_with(config_file=None, context=None)
    kube.dyn.resources.get.assert_called_once_with(api_version="batch.volcano.sh/v1alpha1", kind="Job")
    resource = kube.dyn.resources.get.return_value
    expected = _in_namespace(expected_job(config, name="demo", nodes=2), NAMESPACE)
    kube.dyn.create.assert_called_once_with(resource, body=expected, namespace=NAMESPACE)
    body = kube.dyn.create.call_args.kwargs["body"]
    assert body["metadata"]["name"] == "demo" and body["spec"]["minAvailable"] == 2
    images = {t["template"]["spec"]["containers"][0]["image"] for t in body["spec"]["tasks"]}
    assert images == {IMAGE}
    # No dist/ placeholder (${TRAINING_IMAGE}, ...) reaches the cluster.
    assert not re.search(r"\$\{[A-Z_]+\}", json.dumps(body))
    assert f"created Job {NAMESPACE}/demo" in result.out
    assert f"trn logs demo --backend eks --config {config} --namespace {NAMESPACE} --follow" in result.out


def test_eks_submit_one_node_is_a_kubernetes_job_and_image_flag_wins(aws, eks_stack, kube, config):
    image = "example.com/team/train:7"
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "one", "--nodes", "1",
                     "--image", image)
    assert result.code == 0, result.err
    assert aws.of("DescribeStacks") == []  # --image: the stack is not asked
    body = kube.dyn.create.call_args.kwargs["body"]
    assert body == _in_namespace(expected_job(config, name="one", nodes=1, image=image), NAMESPACE)
    assert (body["apiVersion"], body["kind"]) == ("batch/v1", "Job")
    assert body["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_eks_submit_namespace_kubeconfig_and_context_flags(aws, eks_stack, kube, config, tmp_path):
    argv = ("--namespace", "team", "--kubeconfig", str(tmp_path / "kc"), "--context", "eks")
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo", *argv)
    assert result.code == 0, result.err
    kube.load.assert_called_once_with(config_file=str(tmp_path / "kc"), context="eks")
    assert kube.dyn.create.call_args.kwargs["namespace"] == "team"
    # No --nodes: the workload's (the mlp example: 1 node), in the namespace asked for.
    body = kube.dyn.create.call_args.kwargs["body"]
    assert body["metadata"]["namespace"] == "team"
    assert body == _in_namespace(expected_job(config, name="demo", nodes=None), "team")


def test_eks_submit_dry_run_renders_without_a_cluster_or_the_stack(aws, eks_stack, kube, config):
    """Without --image, the stack's image is the dist/ placeholder: a dry run asks neither AWS nor the cluster."""
    before = len(aws.calls)
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo", "--dry-run")
    assert result.code == 0, result.err
    expected = expected_job(config, name="demo", nodes=None, image="${TRAINING_IMAGE}")
    # In the namespace a submit would use: the kubeconfig context's (no --namespace).
    assert [o for o in yaml.safe_load_all(result.out) if o] == [_in_namespace(expected, NAMESPACE)]
    assert "# image:       ${TRAINING_IMAGE} (the eks stack's image output at submit time, or pass --image)" in result.out
    assert aws.calls[before:] == []
    kube.load.assert_not_called()
    kube.dyn.create.assert_not_called()


def test_eks_dry_run_names_the_namespace_a_submit_uses_and_sums_the_job_up_first(aws, eks_stack, kube, config):
    """It always said `namespace: training`, whatever --namespace said, and its 640 lines began with the manifest."""
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo", "--dry-run",
                     "--namespace", "team-a", "--nodes", "2", "--image", "example.com/team/train:7",
                     "--env", "LR=3e-4", "--", "train.py", "--epochs", "2")
    assert result.code == 0, result.err
    (body,) = [o for o in yaml.safe_load_all(result.out) if o]
    assert body["metadata"]["namespace"] == "team-a"
    assert body == _in_namespace(expected_job(config, name="demo", nodes=2, image="example.com/team/train:7",
                                              command=("train.py", "--epochs", "2"), env={"LR": "3e-4"}), "team-a")
    head = result.out[:result.out.index("apiVersion:")].splitlines()
    assert head == [
        "# dry run: would create 1 object(s) in namespace team-a of your kubeconfig's cluster",
        "# job:         demo, a Job (batch.volcano.sh/v1alpha1) of 2 node(s) x 32 processes, group train "
        "(trn1.32xlarge)",
        "# image:       example.com/team/train:7",
        "# command:     train.py --epochs 2",
        "# your env:    LR=3e-4",
        "# mounts:      /fsx (data), /dev/shm (dshm)",
        "# starts in:   the image's working directory",
        "# checkpoints: /fsx/checkpoints/demo",
        "# (every $ in the command and env is written $$: Kubernetes passes it as written, as the other backends do)",
        "# (the launcher once: each task after the first runs the same command, a YAML alias: *id001)",
    ]
    # The launcher once (it was embedded in each task): the workers' command is an alias of the leader's.
    assert result.out.count("PEER_LOST_EXIT=75") == 1 and result.out.count("command: &id001") == 1
    kube.load.assert_not_called()


def test_eks_passes_dollar_signs_as_written_as_every_other_backend(aws, eks_stack, kube, config):
    """Kubernetes expands $(VAR) in a container's command, args and env values and turns $$ into $ (the Container
    API): a user's `$(HOSTNAME)` became the pod's name, and the launcher's `$$` (its PID) a lone `$`. Every $ is now
    written $$; Kubernetes' expansion (the rehearsal's model of it) gives back what was given."""
    from trainium_cdk.rehearsal.schedulers import container_env, expand
    from trainium_cdk.runtime.launcher import launch_command

    words = ("train.py", "--tag", "$(HOSTNAME)", "--cost", "$$5", "--shell", "$(date)")
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo", "--dry-run",
                     "--image", "example.com/team/train:7", "--env", "NOTE=$(HOSTNAME) costs $$5", "--", *words)
    assert result.code == 0, result.err
    (body,) = [o for o in yaml.safe_load_all(result.out) if o]
    for task in body["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        env = {**container_env(container), "HOSTNAME": "demo-leader-0"}
        assert [expand(word, env) for word in container["command"]] == launch_command(words)
        assert container_env(container)["NOTE"] == "$(HOSTNAME) costs $$5"
        assert "$$(HOSTNAME)" in container["command"]


@pytest.mark.parametrize("text, expanded", [
    # The Container API's words: "Double $$ are reduced to a single $, which allows for escaping the $(VAR_NAME)
    # syntax: i.e. "$$(VAR_NAME)" will produce the string literal "$(VAR_NAME)"", and "If a variable cannot be
    # resolved, the reference in the input string will be unchanged".
    ("$$(VAR_NAME)", "$(VAR_NAME)"), ("$(VAR_NAME)", "value"), ("$(UNSET)", "$(UNSET)"), ("a$(VAR_NAME)b", "avalueb"),
    ("$$", "$"), ("$", "$"), ("$x", "$x"), ("$(VAR_NAME", "$(VAR_NAME"), ("$$$(VAR_NAME)", "$value"),
])
def test_the_rehearsals_kubernetes_expansion_is_the_apis(text, expanded):
    from trainium_cdk.rehearsal.schedulers import expand

    assert expand(text, {"VAR_NAME": "value"}) == expanded


@pytest.mark.parametrize("own_image", [False, True], ids=["example-image", "workloads.image-set"])
def test_eks_submit_bert_runs_in_the_stacks_bert_image(aws, eks_stack, kube, config, own_image):
    """The BERT-large example runs in the image that holds its script (output BertImageUri), not in the
    MLP example image, nor in a workloads.image of the config (made for the user's own jobs). Only with the
    example images built (eks.example_images)."""
    raw = yaml.safe_load(config.read_text())
    raw.setdefault("eks", {})["example_images"] = True
    if own_image:
        raw["workloads"] = {"image": "example.com/team/train:7"}
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "bert", "--job",
                     "bert-large-phase1")
    assert result.code == 0, result.err
    body = kube.dyn.create.call_args.kwargs["body"]
    expected = expected_job(config, name="bert", nodes=None, image=BERT_IMAGE, job="bert-large-phase1")
    assert body == _in_namespace(expected, NAMESPACE)
    tasks = body["spec"]["tasks"]
    assert {t["template"]["spec"]["containers"][0]["image"] for t in tasks} == {BERT_IMAGE}
    command = tasks[0]["template"]["spec"]["containers"][0]["command"]
    assert "/opt/trainium-cdk/examples/bert/dp_bert_large_hf_pretrain_hdf5.py" in command
    # --image still wins.
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "bert", "--job",
                     "bert-large-phase1", "--dry-run", "--image", "example.com/mine:1")
    (body,) = [o for o in yaml.safe_load_all(result.out) if o]
    assert {t["template"]["spec"]["containers"][0]["image"] for t in body["spec"]["tasks"]} == {"example.com/mine:1"}


def test_eks_submit_bert_without_the_bert_image_output_says_what_to_do(aws, kube, config):
    def answer(params: dict[str, Any]) -> Any:
        stacks = eks_stack_answer(params)
        stacks["Stacks"][0]["Outputs"] = [o for o in stacks["Stacks"][0]["Outputs"] if o["OutputKey"] != "BertImageUri"]
        return stacks

    aws.fake("DescribeStacks", answer)
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "bert", "--job",
                     "bert-large-phase1")
    assert_one_clean_line(result, f"stack {EKS_STACK} has no BertImageUri output", "--image")
    kube.dyn.create.assert_not_called()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--nodes", "0"), ("--nodes = 0", "between 1 and max_nodes of group train (4)")),
        (("--nodes", "5"), ("--nodes = 5", "between 1 and max_nodes of group train (4)")),
        (("--job", "gpt5"), ("--job = 'gpt5'", "mlp-distributed")),
        (("--image", "${TRAINING_IMAGE}"), ("--image = '${TRAINING_IMAGE}'", "a real image URI")),
        # What Batch refuses, refused here too (they were accepted).
        (("--image", "x; rm -rf /"), ("--image = 'x; rm -rf /'", "a real image URI")),
        (("--image", "https://example.com/train:1"), ("--image = 'https://example.com/train:1'", "a real image URI")),
        (("--group", "big"), ("--group = 'big'", "allowed: train")),
    ],
)
def test_eks_submit_bad_input_is_one_line_and_sends_nothing(aws, eks_stack, kube, config, argv, words):
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo", *argv)
    assert_one_clean_line(result, *words)
    kube.dyn.create.assert_not_called()


def test_eks_submit_without_the_stack_says_to_deploy_it_or_pass_an_image(aws, kube, config):
    aws.fake("DescribeStacks", client_error("ValidationError", "DescribeStacks", f"Stack with id {EKS_STACK} does not exist"))
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo")
    assert_one_clean_line(result, f"stack {EKS_STACK} does not exist in us-west-2", "then `make plan` and `make deploy`")
    kube.dyn.create.assert_not_called()


def test_eks_submit_existing_job_is_one_line(aws, eks_stack, kube, config):
    from kubernetes.client.exceptions import ApiException

    kube.dyn.create.side_effect = ApiException(status=409, reason="Conflict")
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo")
    assert_one_clean_line(result, f"Job {NAMESPACE}/demo already exists", "kubectl delete job demo")


def test_eks_submit_unknown_kind_is_one_line(aws, eks_stack, kube, config):
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    kube.dyn.resources.get.side_effect = ResourceNotFoundError("No matches found for {'kind': 'Job'}")
    result = run_cli("submit", "--backend", "eks", "--config", str(config), "--name", "demo")
    assert_one_clean_line(result, "the cluster does not know Job (batch/v1)")


def expected_fabric_job(config_path: Path, *, name: str, nodes: int, image: str = IMAGE) -> Any:
    """The fabric check's Volcano job for these arguments: the object the API must receive, whole."""
    from trainium_cdk.app.config import load_config
    from trainium_cdk.cli.check import eks_job

    (obj,) = eks_job(load_config(config_path), name=name, nodes=nodes, group_name="train", image=image)
    return obj


def test_eks_fabric_check_creates_its_job_through_the_api(aws, eks_stack, kube, config):
    result = run_cli("check", "fabric", "--backend", "eks", "--config", str(config), "--name", "fab", "--nodes", "2")
    assert result.code == 0, result.err
    assert aws.of("DescribeStacks") == [{"StackName": EKS_STACK}]  # the image, as `trn submit`
    kube.load.assert_called_once_with(config_file=None, context=None)
    kube.dyn.resources.get.assert_called_once_with(api_version="batch.volcano.sh/v1alpha1", kind="Job")
    expected = _in_namespace(expected_fabric_job(config, name="fab", nodes=2), NAMESPACE)
    kube.dyn.create.assert_called_once_with(kube.dyn.resources.get.return_value, body=expected, namespace=NAMESPACE)
    body = kube.dyn.create.call_args.kwargs["body"]
    assert body["spec"]["minAvailable"] == 2
    for task in body["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        assert container["image"] == IMAGE
        # One process per NeuronCore on TorchNeuron's device and process group (trainium_cdk/cli/check.py).
        assert {"name": "TRN_DIST_BACKEND", "value": "neuron"} in container["env"]
    assert f"created Job {NAMESPACE}/fab" in result.out
    assert f"trn logs fab --backend eks --config {config} --namespace {NAMESPACE} > fabric.log" in result.out


def test_eks_fabric_check_namespace_and_context_flags(aws, eks_stack, kube, config, tmp_path):
    argv = ("--namespace", "team", "--kubeconfig", str(tmp_path / "kc"), "--context", "eks", "--image", "example.com/t:1")
    result = run_cli("check", "fabric", "--backend", "eks", "--config", str(config), "--name", "fab", *argv)
    assert result.code == 0, result.err
    assert aws.of("DescribeStacks") == []
    kube.load.assert_called_once_with(config_file=str(tmp_path / "kc"), context="eks")
    expected = _in_namespace(expected_fabric_job(config, name="fab", nodes=2, image="example.com/t:1"), "team")
    kube.dyn.create.assert_called_once_with(kube.dyn.resources.get.return_value, body=expected, namespace="team")


@pytest.mark.parametrize("flag", ["--print", "--dry-run"])
def test_eks_fabric_check_print_renders_without_a_cluster(aws, eks_stack, kube, config, flag):
    result = run_cli("check", "fabric", "--backend", "eks", "--config", str(config), "--name", "fab", "--nodes", "2",
                     "--image", IMAGE, flag)
    assert result.code == 0, result.err
    assert [o for o in yaml.safe_load_all(result.out) if o] == [expected_fabric_job(config, name="fab", nodes=2)]
    assert "# kubectl apply -f -" in result.out
    kube.load.assert_not_called()
    kube.dyn.create.assert_not_called()


def test_eks_fabric_check_existing_job_is_one_line(aws, eks_stack, kube, config):
    from kubernetes.client.exceptions import ApiException

    kube.dyn.create.side_effect = ApiException(status=409, reason="Conflict")
    result = run_cli("check", "fabric", "--backend", "eks", "--config", str(config), "--name", "fab")
    assert_one_clean_line(result, f"Job {NAMESPACE}/fab already exists", "kubectl delete job fab")


def test_eks_status_reads_the_job_and_its_pods(kube, config):
    kube.batch.read_namespaced_job_status.return_value = job("Complete")
    kube.core.list_namespaced_pod.return_value = pods(pod("demo-1", 1, "Succeeded"), pod("demo-0", 0, "Succeeded"))
    result = run_cli("status", "demo", "--backend", "eks", "--config", str(config))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == f"job {NAMESPACE}/demo: SUCCEEDED (2 pod(s): 2 succeeded)"
    assert lines[1].split() == ["demo-0", "rank", "0", "Succeeded", "node", "ip-10-0-1-5"]
    kube.batch.read_namespaced_job_status.assert_called_once_with("demo", NAMESPACE)
    kube.core.list_namespaced_pod.assert_called_once_with(NAMESPACE, label_selector="trainium-cdk/job=demo")


def test_eks_status_shows_why_a_pod_is_pending(kube, config):
    kube.batch.read_namespaced_job_status.return_value = job()
    kube.core.list_namespaced_pod.return_value = pods(
        pod("demo-0", 0, "Pending", unschedulable="0/3 nodes are available: 3 Insufficient aws.amazon.com/neuron.")
    )
    result = run_cli("status", "demo", "--backend", "eks", "--config", str(config))
    assert result.code == 0
    assert "PENDING" in result.out.splitlines()[0]
    assert "unschedulable: 0/3 nodes are available: 3 Insufficient aws.amazon.com/neuron." in result.out


def test_eks_status_wait_follows_transitions_to_failed(kube, config):
    kube.batch.read_namespaced_job_status.side_effect = [job(), job(), job("Failed", "BackoffLimitExceeded")]
    kube.core.list_namespaced_pod.side_effect = [
        pods(pod("demo-0", 0, "Pending"), pod("demo-1", 1, "Pending")),
        pods(pod("demo-0", 0, "Running"), pod("demo-1", 1, "Running")),
        pods(pod("demo-0", 0, "Failed"), pod("demo-1", 1, "Running")),
    ]
    result = run_cli("status", "demo", "--backend", "eks", "--wait", "--config", str(config))
    assert result.code == 1
    heads = [line.split(" ", 1)[1] for line in result.out.splitlines() if not line.startswith("  ")]
    assert heads == [
        f"job {NAMESPACE}/demo: PENDING (2 pod(s): 2 pending)",
        f"job {NAMESPACE}/demo: PENDING -> RUNNING (2 pod(s): 2 running)",
        f"job {NAMESPACE}/demo: RUNNING -> FAILED (2 pod(s): 1 failed, 1 running; BackoffLimitExceeded)",
    ]
    assert kube.sleeps == [2.0, 2.0]


def test_eks_status_of_a_missing_job(kube, config):
    from kubernetes.client.exceptions import ApiException

    kube.batch.read_namespaced_job_status.side_effect = ApiException(status=404, reason="Not Found")
    kube.core.list_namespaced_pod.return_value = pods()
    result = run_cli("status", "demo", "--backend", "eks", "--config", str(config))
    assert_one_clean_line(result, f"no job demo in namespace {NAMESPACE}")
    kube.custom.get_namespaced_custom_object.assert_called_once_with(
        "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs", "demo"
    )


def test_eks_status_of_a_volcano_job(kube, config):
    from kubernetes.client.exceptions import ApiException

    kube.batch.read_namespaced_job_status.side_effect = ApiException(status=404, reason="Not Found")
    kube.custom.get_namespaced_custom_object.side_effect = None
    kube.custom.get_namespaced_custom_object.return_value = {
        "kind": "Job", "status": {"state": {"phase": "Aborted", "reason": "PodFailed"}},
    }
    kube.core.list_namespaced_pod.return_value = pods(
        pod("demo-leader-0", 0, "Failed"), pod("demo-worker-0", 1, "Running")
    )
    result = run_cli("status", "demo", "--backend", "eks", "--config", str(config))
    assert result.code == 1
    assert result.out.splitlines()[0] == f"job {NAMESPACE}/demo: FAILED (2 pod(s): 1 failed, 1 running; PodFailed)"


def test_eks_status_finds_pods_by_the_kubernetes_job_name_label(kube, config):
    kube.batch.read_namespaced_job_status.return_value = job()
    found = pods(pod("demo-0", 0, "Running", job_label="job-name"))
    kube.core.list_namespaced_pod.side_effect = (
        lambda ns, label_selector: found if label_selector == "job-name=demo" else pods()
    )
    result = run_cli("status", "demo", "--backend", "eks", "--config", str(config))
    assert result.code == 0, result.err
    assert "RUNNING (1 pod(s): 1 running)" in result.out


def test_the_pod_labels_are_the_training_charts():
    from trainium_cdk.charts import training
    from trainium_cdk.cli import eks_jobs

    assert eks_jobs.RANK_LABEL == training.RANK_LABEL
    assert eks_jobs.JOB_NAME_LABELS[0] == training.JOB_LABEL


def test_eks_logs_of_the_rank0_pod(kube, config):
    kube.core.list_namespaced_pod.return_value = pods(
        pod("demo-0-old", 0, "Failed", created=1), pod("demo-0", 0, "Running", created=5)
    )
    kube.core.read_namespaced_pod_log.return_value = "step 1\nstep 2\n"
    result = run_cli("logs", "demo", "--backend", "eks", "--config", str(config))
    assert result.code == 0, result.err
    assert result.out == "step 1\nstep 2\n"
    kube.core.list_namespaced_pod.assert_called_once_with(
        NAMESPACE, label_selector="trainium-cdk/rank=0,trainium-cdk/job=demo"
    )
    kube.core.read_namespaced_pod_log.assert_called_once_with(name="demo-0", namespace=NAMESPACE, container="train")


def test_eks_logs_follow_waits_for_the_pod_and_streams(kube, config):
    nothing = [pods()] * 3  # one empty answer per job-name label
    kube.core.list_namespaced_pod.side_effect = [
        *nothing, pods(pod("demo-0", 0, "Pending")), pods(pod("demo-0", 0, "Running"))
    ]
    stream = mock.Mock()
    stream.stream.return_value = iter([b"step 1\n", b"step 2\n"])
    kube.core.read_namespaced_pod_log.return_value = stream
    kube.core.read_namespaced_pod.return_value = pod("demo-0", 0, "Succeeded")
    result = run_cli("logs", "demo", "--backend", "eks", "--follow", "--config", str(config))
    assert result.code == 0, result.err
    assert result.out == "step 1\nstep 2\n"
    kube.core.read_namespaced_pod_log.assert_called_once_with(
        name="demo-0", namespace=NAMESPACE, container="train", follow=True, _preload_content=False
    )
    stream.release_conn.assert_called_once()
    assert kube.sleeps == [2.0, 3.0]
    assert "waiting for the rank-0 pod" in result.err and "pod demo-0 Succeeded" in result.err


def test_eks_logs_of_node_1_say_its_compile_cache_counts(kube, config, tmp_path):
    from tests.unit.jobs.test_compile_cache import launcher_output

    kube.core.list_namespaced_pod.return_value = pods(pod("demo-worker-0", 1, "Succeeded"))  # Volcano's worker 0
    kube.core.read_namespaced_pod_log.return_value = launcher_output(tmp_path, job="demo", node=1)
    result = run_cli("logs", "demo", "--rank", "1", "--backend", "eks", "--config", str(config))
    assert result.code == 0, result.err
    assert '"compile_cache": {"job": "demo", "node": 1, "hits": 2, "misses": 1}' in result.out
    assert result.err.splitlines()[-1] == (
        "compile cache, node 1: 2 hit(s) (graphs loaded from the Neuron compile cache), 1 miss(es) (graphs compiled)"
    )


def test_eks_logs_without_a_pod_is_one_line(kube, config):
    kube.core.list_namespaced_pod.return_value = pods()
    result = run_cli("logs", "demo", "--backend", "eks", "--config", str(config))
    assert_one_clean_line(result, "no pod labelled trainium-cdk/rank=0,trainium-cdk/job=demo")
    selectors = [c.kwargs["label_selector"] for c in kube.core.list_namespaced_pod.call_args_list]
    assert selectors == [
        "trainium-cdk/rank=0,trainium-cdk/job=demo", "trainium-cdk/rank=0,job-name=demo",
        "trainium-cdk/rank=0,volcano.sh/job-name=demo",
    ]


def test_eks_forbidden_is_one_line(kube, config):
    from kubernetes.client.exceptions import ApiException

    kube.batch.read_namespaced_job_status.side_effect = ApiException(status=403, reason="Forbidden")
    result = run_cli("status", "demo", "--backend", "eks", "--config", str(config))
    assert_one_clean_line(result, "Kubernetes API refused the request (403 Forbidden)", "access entry")


def test_eks_without_kubeconfig_is_one_line(kube, config):
    from kubernetes.config import ConfigException

    kube.load.side_effect = ConfigException("Invalid kube-config file. No configuration found.")
    result = run_cli("status", "demo", "--backend", "eks", "--config", str(config))
    assert_one_clean_line(result, "no usable kubeconfig", "trn connect")


# -- the wait loop's output ---------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _fetcher(*states: str) -> Any:
    remaining = list(states)
    return lambda: jobs.JobState(remaining.pop(0) if len(remaining) > 1 else remaining[0])


def test_watch_draws_a_progress_line_on_a_terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    out = _Tty()
    clock = jobs.Clock(sleep=lambda s: None, monotonic=iter(range(0, 1000, 7)).__next__)
    final = jobs.watch(_fetcher("RUNNING", "RUNNING", "SUCCEEDED"), out=out, wait=True, label="job x", clock=clock)
    assert final.state == "SUCCEEDED"
    text = out.getvalue()
    assert "\r\033[Kjob x: RUNNING for 0m" in text and "next check in 2s" in text
    assert text.endswith("job x: RUNNING -> SUCCEEDED\n")


def test_watch_prints_a_heartbeat_when_not_a_terminal():
    out = io.StringIO()
    ticks = iter(range(0, 100_000, 200))
    clock = jobs.Clock(sleep=lambda s: None, monotonic=lambda: next(ticks))
    jobs.watch(_fetcher("RUNNING", "RUNNING", "RUNNING", "SUCCEEDED"), out=out, wait=True, label="job x", clock=clock)
    lines = out.getvalue().splitlines()
    assert any("job x: still RUNNING" in line for line in lines)
    assert "\r" not in out.getvalue()


def test_eks_dry_run_renders_the_real_job_chart(capsys: pytest.CaptureFixture[str]) -> None:
    """No fake: the CLI renders the actual chart (a Volcano job across nodes) without a cluster."""
    import yaml

    from trainium_cdk.cli import main

    code = main(["submit", "--backend", "eks", "--job", "mlp-distributed", "--nodes", "2", "--name", "run-1", "--dry-run",
                 "--image", IMAGE])
    assert code == 0
    objects = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]
    (job,) = objects
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("batch.volcano.sh/v1alpha1", "Job", "run-1")
    assert job["spec"]["minAvailable"] == 2
    leader = job["spec"]["tasks"][0]["template"]
    assert leader["metadata"]["labels"]["trainium-cdk/rank"] == "0"
    assert leader["spec"]["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"] == "8"


def test_eks_unknown_workload_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from trainium_cdk.cli import main

    assert main(["submit", "--backend", "eks", "--job", "gpt5", "--dry-run", "--image", IMAGE]) == 2
    err = capsys.readouterr().err
    assert "--job = 'gpt5'" in err and "mlp-distributed" in err and "Traceback" not in err


# -- the README's transcript is what the CLI prints -------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _readme_transcript() -> list[tuple[list[str], list[str]]]:
    """(argv, printed lines) of each `$ trn ...` command in the README's CLI console block."""
    from tests.support.readme import page

    text = page("guide/operations.md")
    block = text.split("```console\n$ trn submit", 1)[1].split("```", 1)[0]
    steps: list[tuple[list[str], list[str]]] = []
    for line in ("$ trn submit" + block).splitlines():
        if line.startswith("$ trn "):
            steps.append((line.removeprefix("$ trn ").split(), []))
        elif line:
            steps[-1][1].append(line)
    return steps


def test_readme_transcript_is_what_the_cli_prints(aws, batch, config, monkeypatch):
    from kubernetes import client

    batch_answer = stack_answer(batch)
    aws.fake("DescribeStacks", lambda p: eks_stack_answer(p) if p["StackName"] == EKS_STACK else batch_answer(p))

    steps = _readme_transcript()
    assert [argv[0] for argv, _ in steps] == ["submit", "status", "submit"]
    times = iter(dt.datetime(2026, 11, 23, 10, 52, s) for s in (9, 11, 14, 15, 16))
    monkeypatch.setattr(jobs.CLOCK, "now", lambda: next(times))
    monkeypatch.setattr(jobs.CLOCK, "sleep", lambda s: None)

    def pod_of(task: str, phase: str) -> Any:
        return client.V1Pod(
            metadata=client.V1ObjectMeta(name=f"mlp-1-{task}-0", labels={
                "trainium-cdk/job": "mlp-1", "trainium-cdk/rank": "0" if task == "leader" else "worker"}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="train")], node_name="ip-10-0-1-5"),
            status=client.V1PodStatus(phase=phase),
        )

    phases = ["Pending", "Running", "Succeeded"]
    volcano = {"Pending": "Pending", "Running": "Running", "Succeeded": "Completed"}
    context = {"name": "eks", "context": {"cluster": "eks"}}  # no namespace: the training namespace
    from kubernetes.client.exceptions import ApiException

    with (
        mock.patch("kubernetes.config.load_kube_config"),
        mock.patch("kubernetes.config.list_kube_config_contexts", return_value=([context], context)),
        mock.patch("kubernetes.client.ApiClient"),
        mock.patch("kubernetes.client.CoreV1Api") as core,
        mock.patch("kubernetes.client.BatchV1Api") as batch_api,
        mock.patch("kubernetes.client.CustomObjectsApi") as custom_api,
        mock.patch("kubernetes.dynamic.DynamicClient"),
    ):
        batch_api.return_value.read_namespaced_job_status.side_effect = ApiException(status=404)
        custom_api.return_value.get_namespaced_custom_object.side_effect = [
            {"status": {"state": {"phase": volcano[p]}}} for p in phases
        ]
        core.return_value.list_namespaced_pod.side_effect = [
            client.V1PodList(items=[pod_of("leader", p), pod_of("worker", p)]) for p in phases
        ]
        for argv, expected in steps:
            result = run_cli(*argv, "--config", str(config))
            assert result.code == 0, result.err
            # The test's own --config (the README's reader has none) is in the printed follow-ups too.
            printed = _UUID.sub("ID", result.out.replace(f" --config {config}", "")).splitlines()
            assert printed == [_UUID.sub("ID", line) for line in expected], (argv, result.out)


def test_each_run_reads_kubeconfig_as_it_is_then(tmp_path, monkeypatch):
    """The kubernetes client reads $KUBECONFIG once, at its first import; a process that runs trn twice (a notebook,
    a test session) got the first cluster the second time. Seen in e2e: `trn submit` of one test reached the stopped
    API server of an earlier test's kubeconfig ("connection refused")."""
    import argparse

    from trainium_cdk.cli.eks_jobs import Kube

    def kubeconfig(name: str, port: int) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": f"https://localhost:{port}"}}],
            "users": [{"name": "me", "user": {"token": "t"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": "me", "namespace": f"ns-{name}"}}],
        }))
        return path

    args = argparse.Namespace(kubeconfig=None, context=None, namespace=None)
    for name, port in (("first", 40001), ("second", 40002)):
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(name, port)))
        kube = Kube(args)
        assert kube.api.configuration.host == f"https://localhost:{port}" and kube.namespace == f"ns-{name}"
