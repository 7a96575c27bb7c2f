"""`trn image init` and `trn image push`: a user's Dockerfile built on the track's Neuron image and pushed.

There is no Docker engine here: `docker` (and `finch`) on PATH is tests/support/container_engine_standin.py, which
records each call's arguments and stdin; they are asserted in full. ECR is moto's (the repository, the
authorization token, the images); the stack outputs are served at DescribeStacks, as in test_cli_jobs.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import shlex
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.support import container_engine_standin as engine
from tests.support.cli_support import (
    ACCOUNT,
    DEFAULT_YAML,
    NATIVE_TRN2,
    REGION,
    AwsCalls,
    assert_one_clean_line,
    client_error,
    run_cli,
)
from trainium_cdk.cli import image
from trainium_cdk.facts import versions
from trainium_cdk.facts.names import OUTPUT_TRAINING_IMAGE_REPOSITORY_URI, output_key

NOW = dt.datetime(2026, 11, 26, 15, 30, 12, tzinfo=dt.UTC)
TRACK = versions.XLA_TRACK  # the default config's track
BASE = f"public.ecr.aws/neuron/pytorch-training-neuronx:{TRACK.training_image_tag}"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"


def _config(tmp_path: Path, backends: list[str]) -> Path:
    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    raw["backends"] = backends
    path = tmp_path / f"{'-'.join(backends)}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture
def batch_config(tmp_path: Path) -> Path:
    return _config(tmp_path, ["batch"])


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`docker` and `finch` stand-ins first on PATH, recording into the returned log; the clock fixed."""
    bin_dir = tmp_path / "engine-bin"
    engine.install(bin_dir, "docker")
    engine.install(bin_dir, "finch")
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.delenv("CDK_DOCKER", raising=False)
    path = tmp_path / "engine.log"
    monkeypatch.setenv(engine.LOG, str(path))
    monkeypatch.setattr(image, "NOW", lambda: NOW)
    return path


def _stacks(repositories: dict[str, str]) -> Any:
    """DescribeStacks of each stack name -> its TrainingImageRepositoryUri output."""

    def answer(params: dict[str, Any]) -> Any:
        name = params["StackName"]
        if name not in repositories:
            return client_error("ValidationError", "DescribeStacks", f"Stack with id {name} does not exist")
        outputs = [{"OutputKey": output_key(OUTPUT_TRAINING_IMAGE_REPOSITORY_URI), "OutputValue": repositories[name]}]
        return {"Stacks": [{"StackName": name, "StackStatus": "UPDATE_COMPLETE",
                            "CreationTime": dt.datetime(2026, 11, 1), "Outputs": outputs}]}

    return answer


@pytest.fixture
def repositories(aws: AwsCalls) -> dict[str, str]:
    """The EKS and Batch stacks' training image repositories, in moto, published as their outputs."""
    ecr = boto3.client("ecr", region_name=REGION)
    uris = {
        stack: ecr.create_repository(repositoryName=name, imageTagMutability="IMMUTABLE")["repository"]["repositoryUri"]
        for stack, name in (("trainium-eks", "trainium-eks-workloadstrainingimages-a1"),
                            ("trainium-batch", "trainium-batch-trainingimagerepository-b2"))
    }
    aws.fake("DescribeStacks", _stacks(uris))
    return uris


def _password() -> str:
    token = boto3.client("ecr", region_name=REGION).get_authorization_token()["authorizationData"][0]
    return base64.b64decode(token["authorizationToken"]).decode().partition(":")[2]


def _my_job(root: Path) -> Path:
    """A user's project as `trn image init` starts it, with their script."""
    assert run_cli("image", "init", str(root / "my-job")).code == 0
    (root / "my-job" / "train.py").write_text("print('training')\n")
    return root / "my-job"


def test_init_writes_the_starter_files_and_never_overwrites(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli("image", "init", "my-job")
    assert result.code == 0, result
    assert result.out == (
        "wrote my-job/Dockerfile\nwrote my-job/requirements.txt\nwrote my-job/.dockerignore\n"
        "next: put your code beside it, then\n  trn image push --dockerfile my-job/Dockerfile\n"
    )
    dockerfile = (tmp_path / "my-job" / "Dockerfile").read_text()
    # A default base (the default config's track: xla): `docker build` alone builds it (it had no default).
    assert (f"ARG NEURON_BASE_IMAGE={versions.neuron_public_training_image('xla')}\nFROM ${{NEURON_BASE_IMAGE}}\n"
            in dockerfile)
    ignored = [line for line in (tmp_path / "my-job" / ".dockerignore").read_text().splitlines()
               if line and not line.startswith("#")]
    assert ignored[:4] == [".git", ".venv", "**/__pycache__", "**/*.pyc"]
    # Data, checkpoints and the rehearsal's /fsx stay out of the image (they were shipped in it).
    assert {".trn-rehearse/", "data/", "datasets/", "checkpoints/", "**/*.safetensors", "**/*.jsonl"} <= set(ignored)
    (tmp_path / "my-job" / "requirements.txt").write_text("datasets\n")
    again = run_cli("image", "init", "my-job")
    assert again.out.splitlines()[:3] == [
        "kept my-job/Dockerfile (it exists)", "kept my-job/requirements.txt (it exists)",
        "kept my-job/.dockerignore (it exists)"]
    assert (tmp_path / "my-job" / "requirements.txt").read_text() == "datasets\n"


def test_init_defaults_the_base_to_the_configs_track(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "native.yaml").write_text(yaml.safe_dump(NATIVE_TRN2))
    result = run_cli("image", "init", "my-job", "--config", "native.yaml")
    assert result.code == 0, result
    assert (f"ARG NEURON_BASE_IMAGE={versions.neuron_public_training_image('native')}\n"
            in (tmp_path / "my-job" / "Dockerfile").read_text())


def test_init_refuses_a_file_for_a_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-job").write_text("")
    assert_one_clean_line(run_cli("image", "init", "my-job"), "DIR", "a directory")


def test_push_builds_on_the_pinned_image_logs_in_on_stdin_and_pushes(aws, repositories, log, batch_config, tmp_path):
    _my_job(tmp_path)
    password = _password()
    aws.calls.clear()
    result = run_cli("image", "push", "--config", str(batch_config), "--dockerfile", "my-job/Dockerfile")
    assert result.code == 0, result
    uri = repositories["trainium-batch"]
    pushed = f"{uri}:my-job-20261126-153012"
    assert result.out == pushed + "\n"  # only the image on stdout: IMAGE=$(trn image push ...)
    assert engine.calls(log) == [
        {"program": "docker", "stdin": "", "argv": [
            "build", "--platform", "linux/amd64", "--file", "my-job/Dockerfile",
            "--build-arg", f"NEURON_BASE_IMAGE={BASE}", "--tag", pushed, "my-job"]},
        {"program": "docker", "stdin": password, "argv": ["login", "--username", "AWS", "--password-stdin", REGISTRY]},
        {"program": "docker", "stdin": "", "argv": ["push", pushed]},
    ]
    assert all(password not in " ".join(call["argv"]) for call in engine.calls(log))
    assert result.err == (
        f"trn image push: building my-job/Dockerfile on {BASE} (Neuron {TRACK.neuron_release}, xla track)\n"
        "docker build: done (stand-in)\n"
        f"trn image push: logging in to {REGISTRY}\n"
        "docker login: done (stand-in)\n"
        f"trn image push: pushing {pushed}\n"
        "docker push: done (stand-in)\n"
        f"pushed {pushed}\n"
        f"  trn submit --backend batch --config {batch_config} --image {pushed}\n"
    )
    assert [(op, params) for _, op, params in aws.calls] == [
        ("DescribeStacks", {"StackName": "trainium-batch"}),
        ("DescribeImages", {"repositoryName": uri.split("/", 1)[1], "imageIds": [{"imageTag": "my-job-20261126-153012"}]}),
        ("GetAuthorizationToken", {"registryIds": [ACCOUNT]}),
    ]


def test_push_goes_to_the_eks_repository_with_finch(aws, repositories, log, tmp_path, monkeypatch):
    _my_job(tmp_path)
    monkeypatch.setenv("CDK_DOCKER", "finch")
    (tmp_path / "src").mkdir()
    config = _config(tmp_path, ["eks", "batch"])
    result = run_cli("image", "push", "--config", str(config), "--dockerfile", "my-job/Dockerfile",
                     "--context", "src", "--tag", "v1")
    assert result.code == 0, result
    pushed = f"{repositories['trainium-eks']}:v1"  # the first image backend of the config
    assert result.out == pushed + "\n"
    assert [(c["program"], c["argv"][0], c["argv"][-1]) for c in engine.calls(log)] == [
        ("finch", "build", "src"), ("finch", "login", REGISTRY), ("finch", "push", pushed)]
    assert result.err.endswith(f"  trn submit --backend eks --config {config} --image {pushed}\n")


def test_an_example_dockerfile_gets_its_base_tag(aws, repositories, log, batch_config, tmp_path):
    """A Dockerfile copied from the examples (ARG BASE_TAG, FROM the public repository) builds as they do."""
    from trainium_cdk.constructs.eks_workloads import EXAMPLE_DIR

    result = run_cli("image", "push", "--config", str(batch_config), "--dockerfile", str(EXAMPLE_DIR / "Dockerfile"),
                     "--backend", "batch")
    assert result.code == 0, result
    (build, _, _) = engine.calls(log)
    assert build["argv"][5:7] == ["--build-arg", f"BASE_TAG={TRACK.training_image_tag}"]
    assert build["argv"][-1] == str(EXAMPLE_DIR)
    assert build["argv"][-2] == f"{repositories['trainium-batch']}:mlp-20261126-153012"


def test_a_dockerfile_on_another_base_is_built_with_a_warning(aws, repositories, log, batch_config, tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    result = run_cli("image", "push", "--config", str(batch_config))
    assert result.code == 0, result
    (build, _, _) = engine.calls(log)
    assert "--build-arg" not in build["argv"]
    assert result.err.splitlines()[0] == (
        "trn image push: warning: Dockerfile declares no ARG NEURON_BASE_IMAGE (nor BASE_TAG): it is not built on the "
        f"xla track's Neuron image ({BASE}), as the Dockerfile `trn image init` writes is"
    )


def test_dry_run_prints_the_commands_and_runs_none(aws, repositories, log, batch_config, tmp_path):
    _my_job(tmp_path)
    result = run_cli("image", "push", "--config", str(batch_config), "--dockerfile", "my-job/Dockerfile", "--dry-run")
    assert result.code == 0, result
    pushed = f"{repositories['trainium-batch']}:my-job-20261126-153012"
    assert result.out.splitlines() == [
        shlex.join(["docker", "build", "--platform", "linux/amd64", "--file", "my-job/Dockerfile", "--build-arg",
                    f"NEURON_BASE_IMAGE={BASE}", "--tag", pushed, "my-job"]),
        f"docker login --username AWS --password-stdin {REGISTRY}",
        f"docker push {pushed}",
        f"# the password on stdin: `aws ecr get-authorization-token` for {REGISTRY}; nothing was run",
    ]
    assert engine.calls(log) == []
    assert "GetAuthorizationToken" not in [op for _, op, _ in aws.calls]


def test_dry_run_without_credentials_prints_the_commands_offline(no_credentials, log, batch_config, tmp_path):
    """It exited 2 ("no usable AWS credentials"): the stack's repository is named by its output, nothing is asked."""
    _my_job(tmp_path)
    result = run_cli("image", "push", "--config", str(batch_config), "--dockerfile", "my-job/Dockerfile", "--dry-run")
    assert result.code == 0, result
    pushed = "${TRAINING_IMAGE_REPOSITORY}:my-job-20261126-153012"
    assert result.out.splitlines() == [
        shlex.join(["docker", "build", "--platform", "linux/amd64", "--file", "my-job/Dockerfile", "--build-arg",
                    f"NEURON_BASE_IMAGE={BASE}", "--tag", pushed, "my-job"]),
        shlex.join(["docker", "login", "--username", "AWS", "--password-stdin", "${TRAINING_IMAGE_REPOSITORY}"]),
        shlex.join(["docker", "push", pushed]),
        "# the password on stdin: `aws ecr get-authorization-token` for ${TRAINING_IMAGE_REPOSITORY}; nothing was run",
    ]
    assert ("no AWS credentials: ${TRAINING_IMAGE_REPOSITORY} stands for stack trainium-batch's output "
            "TrainingImageRepositoryUri") in result.err
    assert engine.calls(log) == []


def test_a_tag_in_the_repository_is_refused_before_building(aws, repositories, log, batch_config, tmp_path):
    _my_job(tmp_path)
    uri = repositories["trainium-batch"]
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "layers": [],
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 1,
                           "digest": "sha256:" + "a" * 64}}
    boto3.client("ecr", region_name=REGION).put_image(
        repositoryName=uri.split("/", 1)[1], imageManifest=json.dumps(manifest), imageTag="v1")
    result = run_cli("image", "push", "--config", str(batch_config), "--dockerfile", "my-job/Dockerfile", "--tag", "v1")
    assert_one_clean_line(result, f"{uri}:v1 exists", "immutable", "--tag")
    assert engine.calls(log) == []


def test_a_failed_build_pushes_nothing(aws, repositories, log, batch_config, tmp_path, monkeypatch):
    _my_job(tmp_path)
    monkeypatch.setenv(engine.FAIL, "build")
    result = run_cli("image", "push", "--config", str(batch_config), "--dockerfile", "my-job/Dockerfile")
    assert result.code == 1 and result.out == ""
    assert result.err.splitlines()[-2:] == [
        "docker build: failed (stand-in)", "trn image: `docker build` failed (exit 1): its output is above"]
    assert [c["argv"][0] for c in engine.calls(log)] == ["build"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--dockerfile", "nowhere/Dockerfile"], ["--dockerfile", "trn image init"]),
        (["--tag", "v1:latest"], ["--tag", "an image tag"]),
        (["--context", "nowhere"], ["--context", "a directory"]),
    ],
)
def test_bad_arguments_are_one_line(aws, repositories, log, batch_config, tmp_path, argv, words):
    (tmp_path / "Dockerfile").write_text("ARG NEURON_BASE_IMAGE\nFROM ${NEURON_BASE_IMAGE}\n")
    assert_one_clean_line(run_cli("image", "push", "--config", str(batch_config), *argv), *words)
    assert engine.calls(log) == []


def test_a_stack_without_the_repository_output_says_redeploy(aws, log, batch_config, tmp_path):
    aws.fake("DescribeStacks", {"Stacks": [{"StackName": "trainium-batch", "StackStatus": "UPDATE_COMPLETE",
                                            "CreationTime": dt.datetime(2026, 11, 1), "Outputs": []}]})
    (tmp_path / "Dockerfile").write_text("ARG NEURON_BASE_IMAGE\nFROM ${NEURON_BASE_IMAGE}\n")
    result = run_cli("image", "push", "--config", str(batch_config))
    assert_one_clean_line(result, "stack trainium-batch has no output TrainingImageRepositoryUri", "make deploy")


def test_no_engine_is_one_line_before_any_aws_call(aws, repositories, batch_config, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CDK_DOCKER", "finch")
    (tmp_path / "Dockerfile").write_text("ARG NEURON_BASE_IMAGE\nFROM ${NEURON_BASE_IMAGE}\n")
    aws.calls.clear()
    result = run_cli("image", "push", "--config", str(batch_config))
    assert_one_clean_line(result, "finch not found (CDK_DOCKER=finch)", "trn doctor")
    assert aws.calls == []


def test_a_config_without_a_repository_backend_points_at_sync(aws, log, tmp_path):
    (tmp_path / "Dockerfile").write_text("ARG NEURON_BASE_IMAGE\nFROM ${NEURON_BASE_IMAGE}\n")
    config = _config(tmp_path, ["parallelcluster", "instance"])
    result = run_cli("image", "push", "--config", str(config))
    assert_one_clean_line(result, "no backend with a training image repository", "trn sync")


# -- the README's transcript is what the CLI prints -------------------------------------------------

README_REPOSITORY = "trainium-batch-trainingimagerepository-x1y2z3a4b5c6"
ENGINE_OUTPUT = "[docker's output]"


def test_readme_transcript_is_what_the_cli_prints(aws, log, tmp_path, monkeypatch):
    from tests.support.cli_support import readme_transcript, run_transcript

    ecr = boto3.client("ecr", region_name=REGION)
    uri = ecr.create_repository(repositoryName=README_REPOSITORY)["repository"]["repositoryUri"]
    aws.fake("DescribeStacks", _stacks({"trainium-batch": uri}))
    times = iter([NOW, NOW + dt.timedelta(seconds=50)])
    monkeypatch.setattr(image, "NOW", lambda: next(times))

    def printed(result: Any) -> list[str]:
        lines = (result.err + result.out).splitlines()
        return [ENGINE_OUTPUT if line.endswith(": done (stand-in)") else line for line in lines]

    steps = readme_transcript("$ trn image init my-job")
    assert [command.split()[:3] for command, _ in steps] == [
        ["trn", "image", "init"], ["echo", "\"print('training')\"", ">"], ["trn", "image", "push"],
        ["trn", "image", "push"]]
    monkeypatch.setenv("TRN_CONFIG", str(_config(tmp_path, ["eks", "batch"])))
    run_transcript(steps, printed)
    assert [call["argv"][0] for call in engine.calls(log)] == ["build", "login", "push"]


def test_push_of_a_recipe_builds_its_folder_under_a_recipe_tag(aws, repositories, log, batch_config, tmp_path):
    """`trn image push --recipe NAME`: the recipe's folder is the Dockerfile's and the context; the tag
    recipe-NAME-<time> is what `trn submit --job NAME` looks for."""
    from trainium_cdk import recipes
    from trainium_cdk.app.config import TrainingJobSettings

    folder = tmp_path / "toy_recipe"
    folder.mkdir()
    (folder / "Dockerfile").write_text("ARG NEURON_BASE_IMAGE\nFROM ${NEURON_BASE_IMAGE}\nCOPY . /opt/trainium-cdk/recipes/toy_recipe/\n")
    recipes.register(recipes.Recipe(name="toy", summary="toy", tracks=("xla",), folder=folder,
                                    job=lambda ctx: TrainingJobSettings(name="toy", command=("x.py",))))
    try:
        result = run_cli("image", "push", "--config", str(batch_config), "--recipe", "toy")
    finally:
        recipes.unregister("toy")
    assert result.code == 0, result.err
    (build, *_) = engine.calls(log)
    image = f"{repositories['trainium-batch']}:recipe-toy-20261126-153012"
    assert build["argv"][-3:] == ["--tag", image, str(folder)]
    assert build["argv"][build["argv"].index("--file") + 1] == str(folder / "Dockerfile")
    assert result.out == image + "\n"


def test_push_of_a_recipe_that_shares_files_builds_from_the_recipes_folder(aws, repositories, log, batch_config,
                                                                             tmp_path):
    """A recipe that imports another's file (titan-llama3 uses hf_lora/hf_token.py: one home, no copy) is built
    with the package's recipes folder as the context and its own Dockerfile, which copies both folders."""
    from trainium_cdk import recipes
    from trainium_cdk.app.config import TrainingJobSettings

    folder = tmp_path / "toy_recipe"
    folder.mkdir()
    (folder / "Dockerfile").write_text("ARG NEURON_BASE_IMAGE\nFROM ${NEURON_BASE_IMAGE}\n")
    recipes.register(recipes.Recipe(name="toy", summary="toy", tracks=("xla",), folder=folder,
                                    shares=(recipes.FOLDER / "hf_lora" / "hf_token.py",),
                                    job=lambda ctx: TrainingJobSettings(name="toy", command=("x.py",))))
    try:
        result = run_cli("image", "push", "--config", str(batch_config), "--recipe", "toy")
    finally:
        recipes.unregister("toy")
    assert result.code == 0, result.err
    (build, *_) = engine.calls(log)
    assert build["argv"][-1] == str(recipes.FOLDER)
    assert build["argv"][build["argv"].index("--file") + 1] == str(folder / "Dockerfile")
