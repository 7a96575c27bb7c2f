"""`trn sync`: a user's code directory onto /fsx through the storage stack's S3 data repository.

S3 is moto's (the bucket, the objects, their metadata); the storage stack's outputs are served at
DescribeStacks, as in test_cli_jobs. Each run is `trn sync` as a user types it, on a directory written as
a user's project is: code, a script with its executable bit, a .git, caches, a virtualenv, and data that
its .trnignore keeps out.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.support.cli_support import DEFAULT_YAML, REGION, AwsCalls, assert_one_clean_line, client_error, run_cli
from trainium_cdk.cli import sync
from trainium_cdk.facts.names import OUTPUT_DATA_BUCKET_NAME, OUTPUT_FILE_SYSTEM_ID, output_key

BUCKET = "trainium-storage-storagedatabucket-1a2b3c4d5e6f"
FILE_SYSTEM = "fs-0123456789abcdef0"
TRAIN = "import torch\nprint('training')\n"
UTIL = "def lr():\n    return 3e-4\n"
RUN = "#!/bin/sh\nexec torchrun train.py \"$@\"\n"


def _config(tmp_path: Path, **storage: Any) -> Path:
    """The default config (which has a data repository), with these storage settings on top."""
    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    raw["storage"].update(storage)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _stack(outputs: dict[str, str]) -> Any:
    def answer(params: dict[str, Any]) -> Any:
        if params["StackName"] != "trainium-storage":
            return client_error("ValidationError", "DescribeStacks", f"Stack with id {params['StackName']} does not exist")
        return {"Stacks": [{
            "StackName": "trainium-storage", "StackStatus": "UPDATE_COMPLETE", "CreationTime": dt.datetime(2026, 11, 1),
            "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
        }]}

    return answer


@pytest.fixture
def bucket(aws: AwsCalls) -> Any:
    """The storage stack's data bucket in moto, named by its outputs."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    aws.fake("DescribeStacks", _stack({output_key(OUTPUT_DATA_BUCKET_NAME): BUCKET,
                                      output_key(OUTPUT_FILE_SYSTEM_ID): FILE_SYSTEM}))
    aws.calls.clear()
    return s3


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "my-job"
    files = {
        "train.py": TRAIN, "lib/util.py": UTIL, "run.sh": RUN, ".trnignore": "# local only\ndata/\n*.log\n",
        ".git/HEAD": "ref: refs/heads/main\n", "__pycache__/train.cpython-311.pyc": "x", "lib/__pycache__/u.pyc": "x",
        ".venv/bin/python": "x", "data/shard-0.bin": "0" * 100, "debug.log": "noise\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "run.sh").chmod(0o755)
    (root / "train.py").chmod(0o644)
    (root / "lib" / "util.py").chmod(0o644)
    return root


def _objects(s3: Any) -> dict[str, tuple[str, dict[str, str]]]:
    found = {}
    for item in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        got = s3.get_object(Bucket=BUCKET, Key=item["Key"])
        found[item["Key"]] = (got["Body"].read().decode(), got["Metadata"])
    return found


def _meta(text: str, mode: str) -> dict[str, str]:
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "file-permissions": mode}


def _operations(aws: AwsCalls) -> list[str]:
    return [op for _, op, _ in aws.calls]


def test_sync_uploads_the_code_and_prints_where_it_is(aws, bucket, project, tmp_path):
    result = run_cli("sync", "my-job", "--config", str(_config(tmp_path)))
    assert result.code == 0, result
    assert result.out == "/fsx/s3/my-job\n"  # only the path on stdout: CODE=$(trn sync my-job)
    operations = _operations(aws)
    puts = sorted((p["Bucket"], p["Key"], p["Metadata"]) for p in aws.of("PutObject"))
    assert _objects(bucket) == {
        "my-job/lib/util.py": (UTIL, _meta(UTIL, "0100644")),
        "my-job/run.sh": (RUN, _meta(RUN, "0100755")),  # FSx makes it executable on /fsx
        "my-job/train.py": (TRAIN, _meta(TRAIN, "0100644")),
    }
    assert result.err == (
        "new  lib/util.py  (26 B)\nnew  run.sh  (38 B)\nnew  train.py  (31 B)\n"
        f"uploaded 3 files (95 B) to s3://{BUCKET}/my-job/; 0 unchanged, 7 skipped (.git, .venv, __pycache__, "
        ".trnignore)\n"
        "on every node at /fsx/s3/my-job once FSx has imported them (automatic import; the content loads from S3 on "
        "first read)\n"
    )
    assert sorted(operations) == ["DescribeStacks", "ListObjectsV2", "PutObject", "PutObject", "PutObject"]
    assert puts == [(BUCKET, key, metadata) for key, (_, metadata) in sorted(_objects(bucket).items())]
    assert aws.of("ListObjectsV2")[0] == {"Bucket": BUCKET, "Prefix": "my-job/", "EncodingType": "url"}  # botocore decodes


def test_a_second_sync_uploads_only_what_changed(aws, bucket, project, tmp_path):
    config = str(_config(tmp_path))
    assert run_cli("sync", "my-job", "--config", config).code == 0
    aws.calls.clear()
    again = run_cli("sync", "my-job", "--config", config)
    assert again.code == 0 and again.out == "/fsx/s3/my-job\n"
    assert _operations(aws) == ["DescribeStacks", "ListObjectsV2"]  # same sizes, same MD5s: no HeadObject
    assert again.err.splitlines()[0] == f"nothing to upload to s3://{BUCKET}/my-job/: 3 files unchanged, 7 skipped " \
        "(.git, .venv, __pycache__, .trnignore)"

    (project / "train.py").write_text(TRAIN.replace("training", "Training"))  # same size, other content
    (project / "lib" / "new.py").write_text("X = 1\n")
    aws.calls.clear()
    third = run_cli("sync", "my-job", "--config", config)
    assert third.err.splitlines()[:3] == ["new  lib/new.py  (6 B)", "changed  train.py  (31 B)",
                                          f"uploaded 2 files (37 B) to s3://{BUCKET}/my-job/; 2 unchanged, 7 skipped "
                                          "(.git, .venv, __pycache__, .trnignore)"]
    assert sorted(_operations(aws)) == ["DescribeStacks", "HeadObject", "ListObjectsV2", "PutObject", "PutObject"]
    assert _objects(bucket)["my-job/train.py"][0] == TRAIN.replace("training", "Training")


def test_an_object_uploaded_in_other_parts_is_compared_by_its_sha256(aws, bucket, tmp_path):
    """Another uploader's part size gives another ETag: the SHA-256 trn stored decides, one HeadObject."""
    (tmp_path / "data").mkdir()
    shard = tmp_path / "data" / "shard.bin"
    shard.write_bytes(bytes(range(256)) * (6 * 4096))  # 6 MiB
    body = shard.read_bytes()
    upload = bucket.create_multipart_upload(Bucket=BUCKET, Key="data/shard.bin",
                                            Metadata={"sha256": hashlib.sha256(body).hexdigest()})
    parts = [bucket.upload_part(Bucket=BUCKET, Key="data/shard.bin", UploadId=upload["UploadId"], PartNumber=n,
                                Body=chunk)["ETag"] for n, chunk in ((1, body[:5 << 20]), (2, body[5 << 20:]))]
    bucket.complete_multipart_upload(Bucket=BUCKET, Key="data/shard.bin", UploadId=upload["UploadId"], MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(parts, 1)]})
    aws.calls.clear()
    result = run_cli("sync", "data", "--config", str(_config(tmp_path)))
    assert result.code == 0, result
    assert _operations(aws) == ["DescribeStacks", "ListObjectsV2", "HeadObject"]
    assert result.err.startswith(f"nothing to upload to s3://{BUCKET}/data/: 1 file unchanged")


def test_large_files_go_in_parts_whose_etag_trn_knows(aws, bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(sync, "PART_SIZE", 5 << 20)  # S3's smallest part, to keep the test small
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "shard.bin").write_bytes(b"\x01" * ((11 << 20) + 3))  # 3 parts
    config = str(_config(tmp_path))
    assert run_cli("sync", "data", "--config", config).code == 0
    assert "CompleteMultipartUpload" in _operations(aws)
    aws.calls.clear()
    assert run_cli("sync", "data", "--config", config).err.startswith("nothing to upload")
    assert _operations(aws) == ["DescribeStacks", "ListObjectsV2"]  # the multipart ETag matched: no HeadObject


def test_dry_run_lists_and_uploads_nothing(aws, bucket, project, tmp_path):
    result = run_cli("sync", "my-job", "--to", "code/exp1", "--dry-run", "--config", str(_config(tmp_path)))
    assert result.code == 0, result
    assert result.out.splitlines() == [
        "new  lib/util.py  (26 B)", "new  run.sh  (38 B)", "new  train.py  (31 B)",
        f"# would upload 3 of 3 files (95 B) to s3://{BUCKET}/code/exp1/, for /fsx/s3/code/exp1; nothing was uploaded",
    ]
    assert _operations(aws) == ["DescribeStacks", "ListObjectsV2"]
    assert _objects(bucket) == {}


def test_dry_run_without_credentials_lists_every_file_offline(no_credentials, project, tmp_path):
    """It exited 2 ("no usable AWS credentials"): without them it compares nothing, and says so."""
    result = run_cli("sync", "my-job", "--to", "code/exp1", "--dry-run", "--config", str(_config(tmp_path)))
    assert result.code == 0, result
    assert result.out.splitlines() == [
        "compare  lib/util.py  (26 B)", "compare  run.sh  (38 B)", "compare  train.py  (31 B)",
        "# no AWS credentials: would compare 3 files (95 B) with s3://${DATA_BUCKET}/code/exp1/ (stack trainium-storage's "
        "output DataBucketName) and upload the new and changed ones, for /fsx/s3/code/exp1; nothing was uploaded",
    ]


def test_the_association_prefix_and_path_are_the_configs(aws, bucket, project, tmp_path):
    config = _config(tmp_path, data_repository={"s3_prefix": "datasets/", "file_system_path": "/data"})
    result = run_cli("sync", "my-job", "--to", "code/", "--config", str(config))
    assert result.code == 0, result
    assert result.out == "/fsx/data/code\n"
    assert sorted(_objects(bucket)) == ["datasets/code/lib/util.py", "datasets/code/run.sh", "datasets/code/train.py"]


def test_without_automatic_import_it_says_how_to_import(aws, bucket, project, tmp_path):
    config = _config(tmp_path, data_repository={"auto_import": False})
    result = run_cli("sync", "my-job", "--config", str(config))
    assert result.code == 0, result
    assert result.err.splitlines()[-1] == (
        "automatic import is off (storage.data_repository.auto_import): to see them at /fsx/s3/my-job, aws fsx "
        f"create-data-repository-task --file-system-id {FILE_SYSTEM} --type IMPORT_METADATA_FROM_REPOSITORY --paths "
        f"s3://{BUCKET}/my-job/ --report Enabled=false"
    )


def test_a_deployment_without_a_data_repository_is_told_what_to_set(aws, project, tmp_path):
    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    del raw["storage"]["data_repository"]
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(raw))
    result = run_cli("sync", "my-job", "--config", str(tmp_path / "plain.yaml"))
    assert_one_clean_line(result, "no S3 data repository", "storage.data_repository: {}", "make deploy")
    assert aws.calls == []


def test_a_storage_stack_deployed_without_it_says_deploy(aws, project, tmp_path):
    aws.fake("DescribeStacks", _stack({output_key(OUTPUT_FILE_SYSTEM_ID): FILE_SYSTEM}))
    result = run_cli("sync", "my-job", "--config", str(_config(tmp_path)))
    assert_one_clean_line(result, "stack trainium-storage has no output DataBucketName", "make deploy")


@pytest.mark.parametrize(("argv", "words"), [
    (["my-job", "--to", "../elsewhere"], ["--to", "no . or .. parts"]),
    (["my-job", "--to", "a b"], ["--to", "a relative path"]),
    (["nowhere"], ["LOCAL_DIR", "a directory"]),
])
def test_bad_arguments_are_one_line(aws, project, tmp_path, argv, words):
    assert_one_clean_line(run_cli("sync", *argv, "--config", str(_config(tmp_path))), *words)
    assert aws.calls == []


# -- the README's transcript is what the CLI prints -------------------------------------------------

README_BUCKET = "trainium-storage-datarepositorybucket-1q2w3e4r5t6y"


def test_readme_transcript_is_what_the_cli_prints(aws, tmp_path, monkeypatch):
    from tests.support.cli_support import readme_transcript, run_transcript

    boto3.client("s3", region_name=REGION).create_bucket(
        Bucket=README_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    aws.fake("DescribeStacks", _stack({output_key(OUTPUT_DATA_BUCKET_NAME): README_BUCKET,
                                      output_key(OUTPUT_FILE_SYSTEM_ID): FILE_SYSTEM}))
    # The project of the image transcript: `trn image init my-job` and a train.py.
    assert run_cli("image", "init", "my-job").code == 0
    (tmp_path / "my-job" / "train.py").write_text("print('training')\n")
    steps = readme_transcript("$ trn sync my-job --dry-run")
    assert [command.split()[0] for command, _ in steps] == ["trn", "trn", "echo", "trn"]
    monkeypatch.setenv("TRN_CONFIG", str(_config(tmp_path)))
    run_transcript(steps, lambda result: (result.err + result.out).splitlines())
