"""`trn image push` and `trn sync` against the stacks `make deploy` leaves, as the README walkthroughs have them.

The default config with the Batch backend is synthesized, and every stack of its cloud assembly is made in
moto by tests/support/deployed.py (outputs resolved from the templates' own expressions, the repository and the
bucket made for real): so the CLI reads the output keys and values the stacks write, not a test's copy.
`docker` is tests/support/container_engine_standin.py.
"""

from __future__ import annotations

import boto3
import pytest
import yaml

from tests.support import container_engine_standin as engine
from tests.support.cli_support import ACCOUNT, DEFAULT_YAML, REGION, run_cli
from tests.support.deployed import Account, assembly_stacks
from tests.support.helpers import synth
from trainium_cdk.app.config import build_config

# The harness's stand-in stack body (deployed.py): moto's CloudFormation says it does not model it, which is fine.
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS.*WaitConditionHandle")


@pytest.fixture(scope="module")
def assembly():
    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    raw["backends"] = ["batch"]
    return synth(build_config(raw), nag=False).outdir


@pytest.fixture
def deployed(aws, assembly, tmp_path, monkeypatch):
    account = Account(REGION, lambda service: boto3.client(service, region_name=REGION))
    for name, template in assembly_stacks(assembly):
        account.deploy_stack(name, template)
    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    raw["backends"] = ["batch"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("TRN_CONFIG", str(tmp_path / "config.yaml"))
    return account


def test_push_reaches_the_deployed_batch_repository(deployed, tmp_path, monkeypatch):
    engine.install(tmp_path / "bin", "docker")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv(engine.LOG, str(tmp_path / "engine.log"))
    assert run_cli("image", "init", "my-job").code == 0
    result = run_cli("image", "push", "--dockerfile", "my-job/Dockerfile", "--backend", "batch")
    assert result.code == 0, result
    (repository,) = boto3.client("ecr", region_name=REGION).describe_repositories()["repositories"]
    assert repository["repositoryName"].startswith("trainium-batch-trainingimagerepository-")
    assert repository["imageTagMutability"] == "IMMUTABLE"
    assert result.out.startswith(f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{repository['repositoryName']}:my-job-")
    assert [call["argv"][0] for call in engine.calls(tmp_path / "engine.log")] == ["build", "login", "push"]


def test_sync_reaches_the_deployed_data_bucket(deployed, tmp_path):
    (tmp_path / "my-job").mkdir()
    (tmp_path / "my-job" / "train.py").write_text("print('training')\n")
    result = run_cli("sync", "my-job")
    assert result.code == 0, result
    assert result.out == "/fsx/s3/my-job\n"
    buckets = boto3.client("s3", region_name=REGION).list_buckets()["Buckets"]
    # The data bucket, and the bucket the checkpoints are exported to (it holds nothing of the sync's).
    assert sorted(b["Name"].split("-")[2] for b in buckets) == ["checkpointbucket", "datarepositorybucket"]
    (bucket,) = [b for b in buckets if b["Name"].startswith("trainium-storage-datarepositorybucket-")]
    objects = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket["Name"])["Contents"]
    assert [o["Key"] for o in objects] == ["my-job/train.py"]
