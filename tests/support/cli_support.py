"""Shared pieces of the `trn` CLI tests (no tests here): a moto account, a recorder of AWS calls, running the CLI.

moto 5.2.5 does not implement some calls the CLI makes (ec2 DescribeCapacityReservations,
service-quotas for ec2, CloudFormation without the moto[cloudformation] extra). ``AwsCalls`` answers
those from a test's fakes at botocore's ``_make_api_call`` (the pattern moto's docs give for
unsupported calls) and lets every other call through to moto, recording all of them.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.client
import botocore.loaders
import botocore.session
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.support import paths
from trainium_cdk.cli import jobs, main

ROOT = paths.ROOT
DEFAULT_YAML = ROOT / "config" / "default.yaml"
REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's account


@dataclass
class Result:
    code: int
    out: str
    err: str


# A native-track deployment as a user writes it (trn2 in us-east-2): the recipes' and `trn fit`'s tests start from it.
NATIVE_TRN2: dict[str, Any] = {
    "backends": ["eks", "batch"],
    "region": "us-east-2",
    "network": {"az_ids": ["use2-az3", "use2-az2"]},
    "neuron": {"track": "native"},
    "instance_offerings": {"trn2.48xlarge": {"us-east-2": ["use2-az3", "use2-az2"]}},
    "compute_groups": [{"name": "train", "instance_type": "trn2.48xlarge", "nodes": 2, "az_ids": "use2-az3"}],
}


def run_cli(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return Result(code, out.getvalue(), err.getvalue())


def client_error(code: str, operation: str, message: str = "test") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


@dataclass
class AwsCalls:
    """Records (service, operation, params); ``fakes[operation]`` answers instead of moto."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    fakes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)

    def fake(self, operation: str, answer: dict[str, Any] | BaseException | Callable[[dict[str, Any]], Any]) -> None:
        def respond(params: dict[str, Any]) -> dict[str, Any]:
            value = answer(params) if callable(answer) and not isinstance(answer, BaseException) else answer
            if isinstance(value, BaseException):
                raise value
            return value

        self.fakes[operation] = respond

    def of(self, operation: str) -> list[dict[str, Any]]:
        return [params for _, op, params in self.calls if op == operation]


def _service(client: Any) -> str:
    return client.meta.service_model.service_name


# One botocore data loader for every session of a test process. Each `trn` command makes its own boto3 session, and
# each session's loader parsed the service models and endpoints.json again (about 1.5 s of JSON per command; the
# loader caches per instance: botocore/loaders.py, instance_cache). The files are botocore's own, read only.
_LOADERS: dict[str | None, botocore.loaders.Loader] = {}


def _shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    if search_path_string not in _LOADERS:
        _LOADERS[search_path_string] = botocore.loaders.create_loader(search_path_string)
    return _LOADERS[search_path_string]


def fake_aws_environment(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Fake credentials and a region, and no shared config that could point anywhere real; ``folder`` the working
    directory (no cdk.json or config/ of the repo: tests pass --config)."""
    monkeypatch.setattr(botocore.session, "create_loader", _shared_loader)
    # moto's EC2 otherwise creates its ~1,300 public AMIs, each with a volume and a snapshot, in every region a test
    # touches (moto settings.ec2_load_default_amis): a test's AMIs are the ones it registers or fakes.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(folder / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(folder / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(folder)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials and a region, and no shared config that could point anywhere real."""
    fake_aws_environment(monkeypatch, tmp_path)


@pytest.fixture
def moto_public_amis(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's copy of AWS's public AMIs, for a test that reads one through AWS's public parameters (before ``aws``)."""
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "true")


@pytest.fixture
def no_credentials(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")


@contextmanager
def recorded_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsCalls]:
    """moto for every AWS call (Batch without Docker), recorded; fakes win over moto (after fake_aws_environment)."""
    recorder = AwsCalls()
    original = botocore.client.BaseClient._make_api_call

    def make_api_call(self: Any, operation: str, params: dict[str, Any]) -> Any:
        recorder.calls.append((_service(self), operation, params))
        if operation in recorder.fakes:
            return recorder.fakes[operation](params)
        return original(self, operation, params)

    with mock_aws(config={"batch": {"use_docker": False}}):
        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", make_api_call)
        yield recorder


@pytest.fixture
def aws(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsCalls]:
    """moto for every AWS call (Batch without Docker), recorded; fakes win over moto."""
    with recorded_aws(monkeypatch) as recorder:
        yield recorder


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The wait loops' sleeps, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(jobs.CLOCK, "sleep", slept.append)
    return slept


def copy_default_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    shutil.copy(DEFAULT_YAML, path)
    return path


def write_config(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def readme_transcript(first: str) -> list[tuple[str, list[str]]]:
    """(command, printed lines) of each `$ ...` line of the docs' console block that starts with ``first``."""
    from tests.support.readme import site_text

    text = site_text()
    block = text.split(f"```console\n{first}\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[str, list[str]]] = [(first.removeprefix("$ "), [])]
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line.removeprefix("$ "), []))
        elif line:
            steps[-1][1].append(line)
    return steps


def run_transcript(steps: list[tuple[str, list[str]]], printed: Callable[[Result], list[str]]) -> None:
    """Run each step as typed (a `trn` command in process, any other in bash) and compare what it printed, as
    ``printed`` reads a result, with the transcript. The test sets TRN_CONFIG, as a reader's checkout has it."""
    import shlex
    import subprocess

    for command, expected in steps:
        if command.startswith("trn "):
            result = run_cli(*shlex.split(command)[1:])
            assert result.code == 0, (command, result)
            assert printed(result) == expected, command
        else:
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
            assert done.stdout.splitlines() == expected, command


def assert_one_clean_line(result: Result, *words: str) -> None:
    """A user error: exit 2, one line on stderr naming the problem, no traceback."""
    assert result.code == 2, result
    assert "Traceback" not in result.err + result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    for word in words:
        assert word in lines[0], (word, lines[0])


def batch_dry_run_request(config: str, job: str) -> tuple[dict[str, Any], str]:
    """`trn submit --backend batch --job JOB --dry-run`: the SubmitJob request it prints, validated against Batch's
    own API model (raises on a field or type Batch would refuse), and the whole output."""
    import json

    import botocore.session
    from botocore.validate import validate_parameters

    result = run_cli("submit", "--backend", "batch", "--config", config, "--job", job, "--dry-run")
    assert result.code == 0, result.err
    request = json.loads(result.out.split("SubmitJob:\n", 1)[1])
    submit_job = botocore.session.get_session().get_service_model("batch").operation_model("SubmitJob")
    validate_parameters(request, submit_job.input_shape)
    return request, result.out
