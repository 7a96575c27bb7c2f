"""Recipes hf-lora and hf-lora-data (trainium_cdk/recipes/hf_lora) through the verbs a user types.

`trn rehearse --job hf-lora-data` and `--job hf-lora` run the recipe's real code (transformers, PEFT, datasets)
on the CPU, as 2 nodes x 2 processes: a tiny Llama model built from a config and a tokenizer and texts this test
makes on the stand-in /fsx (nothing downloaded). The data job reads its texts from S3 and the Hugging Face token
from Secrets Manager (a moto server both). `trn submit --job ... --dry-run` renders each job for EKS and Batch,
the backends of the native track; the stacks grant the token's secret to the jobs' role, that secret only.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chart_helpers import validate_all
from tests.support.cli_support import NATIVE_TRN2, assert_one_clean_line, batch_dry_run_request, run_cli
from tests.support.helpers import resources, template_text
from tests.support.reachability import manifest_objects
from tests.support.tiny_llama import DATASET, MODEL, jsonl, make_all, make_tiny_model
from trainium_cdk.facts.names import HF_TOKEN_SERVICE_ACCOUNT
from trainium_cdk.recipes.hf_lora import DATA_DIR, FOLDER

SECRET = "hf-token"
TOKEN = "hf_TheTokenOfThisTestNeverInATemplate"  # noqa: S105 (a test's stand-in)
IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/trainium-eks-trainingimages:recipe-hf-lora-20261126-000000"
# A native-track deployment as a user writes it (trn2 in us-east-2), with the token's secret named.
NATIVE = {**NATIVE_TRN2, "hugging_face": {"token_secret": SECRET}}
# What the test's runs pass as a user would (`--env`): the tiny model on /fsx, short blocks, a few steps.
TINY = ("--env", f"HF_LORA_MODEL={MODEL}", "--env", "HF_LORA_SEQ_LEN=16")


def _config(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "native.yaml"
    path.write_text(yaml.safe_dump({**NATIVE, **changes}, sort_keys=False))
    return path


def records(text: str) -> list[dict[str, Any]]:
    """The recipe's reports (rank 0's), in order."""
    return [json.loads(line.split("HF-LORA ", 1)[1]) for line in text.splitlines() if "HF-LORA {" in line]


# -- trn rehearse: the recipe's code on the CPU, 2 nodes x 2 processes -----------------------------------


@pytest.fixture
def moto_server() -> Any:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.mark.e2e
def test_rehearse_the_data_job_reads_s3_and_the_token_from_secrets_manager(tmp_path, monkeypatch, moto_server):
    import boto3

    aws = {"endpoint_url": moto_server, "region_name": "us-east-2", "aws_access_key_id": "testing",
           "aws_secret_access_key": "testing"}
    boto3.client("secretsmanager", **aws).create_secret(Name=SECRET, SecretString=json.dumps({"HF_TOKEN": TOKEN}))
    s3 = boto3.client("s3", **aws)
    s3.create_bucket(Bucket="team-corpus", CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
    lines = jsonl().splitlines(keepends=True)
    s3.put_object(Bucket="team-corpus", Key="notes/part-0.jsonl", Body="".join(lines[:120]).encode())
    s3.put_object(Bucket="team-corpus", Key="notes/part-1.jsonl", Body="".join(lines[120:]).encode())
    s3.put_object(Bucket="team-corpus", Key="notes/README.md", Body=b"not data")
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    make_tiny_model(work / ".trn-rehearse" / "fsx")
    # The node's credentials (EKS Pod Identity) and AWS's endpoint: here, the moto server's. The region is the
    # job's own (the config's), not given here.
    result = run_cli("rehearse", "--backend", "eks", "--config", str(_config(tmp_path)), "--job", "hf-lora-data",
                     *TINY, "--env", "HF_LORA_DATASET=s3://team-corpus/notes",
                     "--env", f"AWS_ENDPOINT_URL={moto_server}",
                     "--env", "AWS_ACCESS_KEY_ID=testing", "--env", "AWS_SECRET_ACCESS_KEY=testing")
    assert result.code == 0, result.out[-4000:] + result.err
    found = records(result.out)
    assert found[0] == {"token": {"secret": SECRET, "characters": len(TOKEN)}}
    assert TOKEN not in result.out + result.err
    prepared = found[-1]["prepared"]
    fsx = work / ".trn-rehearse" / "fsx"
    assert (prepared["texts"], prepared["seq_len"], prepared["data_dir"]) == (200, 16, str(fsx / "datasets/hf-lora"))
    assert prepared["blocks"] == prepared["tokens"] // 16 > 100
    manifest = json.loads((fsx / "datasets" / "hf-lora" / "prepared.json").read_text())
    assert manifest["model"] == str(fsx / "models" / "tiny-llama") and manifest["dataset"] == "s3://team-corpus/notes"
    assert sorted(p.name for p in (fsx / "datasets" / "hf-lora" / "raw").iterdir()) == ["part-0.jsonl", "part-1.jsonl"]


@pytest.mark.e2e
def test_rehearse_trains_saves_is_stopped_and_resumes_where_it_was(tmp_path, monkeypatch):
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    fsx = work / ".trn-rehearse" / "fsx"
    make_all(fsx)
    config = str(_config(tmp_path, hugging_face={}))
    data = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "hf-lora-data", *TINY,
                   "--env", f"HF_LORA_DATASET={DATASET}")
    assert data.code == 0, data.out[-4000:] + data.err
    # A learning rate and dropout at which the adapters soon weigh in the loss: a resumed run that drew other
    # dropout masks than the run it continues would print other losses.
    steps = ("--env", "HF_LORA_SAVE_EVERY=3", "--env", "HF_LORA_LOG_EVERY=1", "--env", "HF_LORA_WARMUP_STEPS=2",
             "--env", "HF_LORA_LR=0.02", "--env", "HF_LORA_DROPOUT=0.3")

    first = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "hf-lora", *TINY, *steps,
                    "--env", "HF_LORA_MAX_STEPS=6")
    assert first.code == 0, first.out[-4000:] + first.err
    assert "node 0 exit 0, node 1 exit 0" in first.out
    ran = records(first.out)
    start = ran[0]["start"]
    assert (start["world"], start["device"], start["backend"], start["first_step"]) == (4, "cpu", "gloo", 1)
    losses = {r["step"]: r["loss"] for r in ran if "loss" in r and "resumed_from" not in r}
    assert sorted(losses) == [1, 2, 3, 4, 5, 6] and losses[6] < losses[1]
    # Each step line's throughput: tokens a second per node, which `trn logs` sums up (no MFU for LoRA).
    assert all(r["tokens_per_s_per_node"] > 0 and r["mfu"] is None for r in ran if "loss" in r and "step" in r
               and "resumed_from" not in r)
    checkpoints = fsx / "checkpoints" / "rehearsal"
    assert [r["checkpoint"] for r in ran if "checkpoint" in r] == [
        str(checkpoints / "step-00000003"), str(checkpoints / "step-00000006")]
    assert (checkpoints / "step-00000006" / "adapter" / "adapter_model.safetensors").is_file()

    # Stopped after its checkpoint of step 3: the run that follows finds that one as the newest.

    shutil.rmtree(checkpoints / "step-00000006")
    second = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "hf-lora", *TINY, *steps,
                     "--env", "HF_LORA_MAX_STEPS=8")
    assert second.code == 0, second.out[-4000:] + second.err
    again = records(second.out)
    assert again[0] == {"resumed_from": str(checkpoints / "step-00000003"), "step": 3, "loss": losses[3]}
    assert again[1]["start"]["first_step"] == 4
    resumed = {r["step"]: r["loss"] for r in again if "loss" in r and "resumed_from" not in r}
    assert sorted(resumed) == [4, 5, 6, 7, 8]
    # The same steps, the same data and dropout, the same adapter and optimizer state: the same losses.
    for step in (4, 5, 6):
        assert resumed[step] == pytest.approx(losses[step], abs=1e-5), (step, resumed, losses)
    assert again[-1] == {"done": {"step": 8, "adapter": str(checkpoints / "step-00000008" / "adapter")}}


@pytest.mark.e2e
def test_trn_fits_plan_is_what_a_rehearsed_step_holds(tmp_path, monkeypatch):
    """`trn fit`'s figures of hf-lora (fit_plan) against one rehearsed step's (HF_LORA_REPORT_MEMORY): the base model,
    the adapters and AdamW's state exactly, what the forward saves for the backward within 5%; without and with
    gradient checkpointing, which keeps a block's input only."""
    from trainium_cdk.recipes.hf_lora import fit_plan, model_config

    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    make_all(work / ".trn-rehearse" / "fsx")
    config = str(_config(tmp_path, hugging_face={}))
    data = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "hf-lora-data", *TINY,
                   "--env", f"HF_LORA_DATASET={DATASET}")
    assert data.code == 0, data.out[-4000:] + data.err
    # What `trn fit --job hf-lora` reads for this model: its config.json where the rehearsal keeps /fsx.
    found = model_config(MODEL)
    assert found == Path(".trn-rehearse/fsx/models/tiny-llama/config.json")
    shape = fit_plan.Shape.of(json.loads(found.read_text()))
    activations = {}
    for checkpointing in ("0", "1"):
        # A fresh run each (the one before left a checkpoint of its last step, which this one would resume at).
        shutil.rmtree(work / ".trn-rehearse" / "fsx" / "checkpoints", ignore_errors=True)
        run = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "hf-lora", *TINY,
                      "--env", "HF_LORA_MAX_STEPS=1", "--env", "HF_LORA_REPORT_MEMORY=1",
                      "--env", f"HF_LORA_GRADIENT_CHECKPOINTING={checkpointing}")
        assert run.code == 0, run.out[-4000:] + run.err
        (measured,) = [r["memory"] for r in records(run.out) if "memory" in r]
        job = fit_plan.Job(seq_len=16, batch=1, rank=16, targets=("q_proj", "k_proj", "v_proj", "o_proj"),
                           checkpointing=checkpointing == "1")
        assert {k: measured[k] for k in ("base", "adapters", "optimizer")} == fit_plan.state_bytes(shape, job)
        planned = fit_plan.saved_activations(shape, job)
        assert measured["saved_activations"] == pytest.approx(planned, rel=0.05), (checkpointing, measured, planned)
        activations[checkpointing] = measured["saved_activations"]
    assert activations["1"] < activations["0"] / 2


# -- trn submit --dry-run: the jobs as EKS and Batch run them --------------------------------------------


def test_eks_renders_both_jobs_and_they_validate(no_credentials, tmp_path):
    config = str(_config(tmp_path))
    train = run_cli("submit", "--backend", "eks", "--config", config, "--job", "hf-lora", "--name", "ft",
                    "--dry-run", "--image", IMAGE)
    assert train.code == 0, train.err
    (job,) = [o for o in yaml.safe_load_all(train.out) if o]
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["spec"]["minAvailable"] == 2
    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        validate_all([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": pod}])
        (container,) = pod["containers"]
        assert container["image"] == IMAGE
        assert container["command"][-1] == "/opt/trainium-cdk/recipes/hf_lora/train.py"
        env = {e["name"]: e["value"] for e in container["env"]}
        assert (env["TRN_TORCH_DEVICE"], env["TRN_DIST_BACKEND"], env["HF_HUB_OFFLINE"]) == ("neuron", "neuron", "1")
        assert (env["HF_LORA_DATA_DIR"], env["TRN_CACHE_DIR"]) == (DATA_DIR, "/fsx/neuron-cache/hf-lora")
        # Training calls nothing in AWS: no service account, no token.
        assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
        assert "HF_TOKEN_SECRET" not in env

    data = run_cli("submit", "--backend", "eks", "--config", config, "--job", "hf-lora-data", "--name", "ft-data",
                   "--dry-run", "--image", IMAGE)
    assert data.code == 0, data.err
    (job,) = [o for o in yaml.safe_load_all(data.out) if o]
    validate_all([job])
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == HF_TOKEN_SERVICE_ACCOUNT
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["HF_TOKEN_SECRET"], env["AWS_DEFAULT_REGION"], env["NPROC_PER_NODE"]) == (SECRET, "us-east-2", "1")
    assert container["command"][-1] == "/opt/trainium-cdk/recipes/hf_lora/prepare.py"
    assert TOKEN not in train.out + data.out
    # CPU work on the system nodes (issue 44 item 8), the training job on its group's Trainium nodes.
    assert "aws.amazon.com/neuron" not in container["resources"]["limits"]
    assert "tolerations" not in pod and "nodeSelector" not in pod
    assert "CPU work, on the system nodes" in data.err and "CPU work" not in train.err


def test_batch_submits_both_jobs_as_batch_takes_them(no_credentials, tmp_path):
    config = str(_config(tmp_path))
    for name, script, nodes in (("hf-lora", "train.py", 2), ("hf-lora-data", "prepare.py", 1)):
        request, out = batch_dry_run_request(config, name)
        assert request["nodeOverrides"]["numNodes"] == nodes
        (node,) = request["nodeOverrides"]["nodePropertyOverrides"]
        overrides = node["containerOverrides"]
        assert overrides["command"][-1] == f"/opt/trainium-cdk/recipes/hf_lora/{script}"
        env = {e["name"]: e["value"] for e in overrides["environment"]}
        assert env["TRN_CACHE_DIR"] == f"/fsx/neuron-cache/{name}"
        assert ("HF_TOKEN_SECRET" in env) == (name == "hf-lora-data")
        assert TOKEN not in out
        # The recipe's image, found at submit (`trn image push --recipe hf-lora` pushed it): both jobs run it.
        assert "${RECIPE_IMAGE}" in out


def test_slurm_is_not_a_backend_of_the_native_track(no_credentials, tmp_path):
    config = _config(tmp_path, backends=["parallelcluster"])
    result = run_cli("submit", "--backend", "parallelcluster", "--config", str(config), "--job", "hf-lora",
                     "--dry-run")
    assert_one_clean_line(result, "neuron.track", "use eks or batch for the native track")


def test_the_xla_track_offers_neither_recipe(no_credentials, tmp_path):
    config = _config(tmp_path, neuron={"track": "xla"}, region="us-west-2", network={"az_ids": ["usw2-az4", "usw2-az3"]},
                     instance_offerings={}, compute_groups=[{"name": "train", "instance_type": "trn1.32xlarge"}])
    result = run_cli("submit", "--backend", "batch", "--config", str(config), "--job", "hf-lora", "--dry-run")
    assert_one_clean_line(result, "--job", "hf-lora runs on native")


# -- the token: read at run time, by the job's role, that secret only ----------------------------------------


def test_hf_token_reads_the_secret_as_a_string_or_json(aws):
    import sys

    import boto3

    sys.path.insert(0, str(FOLDER))
    try:
        from hf_token import token_from_secret
    finally:
        sys.path.remove(str(FOLDER))
    secrets = boto3.client("secretsmanager", region_name="us-east-2")
    secrets.create_secret(Name="plain", SecretString=f"{TOKEN}\n")
    secrets.create_secret(Name="as-json", SecretString=json.dumps({"token": TOKEN}))
    secrets.create_secret(Name="other-json", SecretString=json.dumps({"password": TOKEN}))
    assert token_from_secret("plain", client=secrets) == TOKEN
    assert token_from_secret("as-json", client=secrets) == TOKEN
    for name, said in (("other-json", "JSON without a HF_TOKEN, token, hf_token key"),
                       ("missing", "ResourceNotFoundException")):
        with pytest.raises(SystemExit) as failed:
            token_from_secret(name, client=secrets)
        assert said in str(failed.value) and TOKEN not in str(failed.value)
    assert [c[2]["SecretId"] for c in aws.calls if c[1] == "GetSecretValue"] == [
        "plain", "as-json", "other-json", "missing"]


@pytest.fixture(scope="module")
def deployed() -> Any:
    from tests.support.helpers import synth
    from trainium_cdk.app.config import build_config

    return synth(build_config(NATIVE), nag=True)


def _names_secrets_manager(statement: dict[str, Any]) -> bool:
    """Whether a statement grants a Secrets Manager action or on a Secrets Manager ARN."""
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    arns = statement.get("Resource", [])
    return any(a.startswith("secretsmanager:") for a in actions) or any(
        ":secretsmanager:" in template_text(arn) for arn in (arns if isinstance(arns, list) else [arns]))


def _secret_statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(policy id, statement) of every IAM statement that names Secrets Manager."""
    found = []
    for rid, res in template["Resources"].items():
        if res["Type"] == "AWS::IAM::Policy":
            docs = [res["Properties"]["PolicyDocument"]]
        elif res["Type"] == "AWS::IAM::Role":
            docs = [p["PolicyDocument"] for p in res["Properties"].get("Policies", [])]
        else:
            continue
        for doc in docs:
            found += [(rid, s) for s in doc["Statement"] if _names_secrets_manager(s)]
    return found


@pytest.mark.parametrize("backend", ["batch", "eks"])
def test_the_jobs_role_reads_that_secret_only(deployed, backend):
    template = deployed.template_json(backend)
    ((policy, statement),) = _secret_statements(template)
    assert statement["Effect"] == "Allow" and statement["Action"] == "secretsmanager:GetSecretValue"
    parts = statement["Resource"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)
    # Secrets Manager's ARN of a secret ends in "-" and six random characters: that secret, no other named hf-token*.
    assert text == ('arn:{"Ref": "AWS::Partition"}:secretsmanager:us-east-2:{"Ref": "AWS::AccountId"}:secret:'
                    f"{SECRET}-??????")
    roles = template["Resources"][policy]["Properties"]["Roles"]
    (role,) = [r["Ref"] for r in roles]
    if backend == "batch":
        trust = template["Resources"][role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert [s["Principal"] for s in trust] == [{"Service": "ecs-tasks.amazonaws.com"}]
    else:
        associations = [a["Properties"] for a in template["Resources"].values()
                        if a["Type"] == "AWS::EKS::PodIdentityAssociation"
                        and a["Properties"]["ServiceAccount"] == HF_TOKEN_SERVICE_ACCOUNT]
        (association,) = associations
        assert association["Namespace"] == "training"
        assert association["RoleArn"] == {"Fn::GetAtt": [role, "Arn"]}


def test_no_template_or_manifest_holds_the_token(deployed):
    # Synth is offline: it knows the secret's name only. Every file of the cloud assembly (templates, with the EKS
    # manifests inside) names the secret and its service account, and holds no token.
    texts = [p.read_text() for p in deployed.outdir.rglob("*") if p.is_file() and p.suffix in (".json", ".yaml")]
    # (A Hugging Face token is "hf_" and 34 letters and digits.)
    assert texts and not [t for t in texts if TOKEN in t or re.search(r"\bhf_[A-Za-z0-9]{30,}", t)]
    objects = [o for r in resources(deployed.template_json("eks"), "Custom::AWSCDK-EKS-KubernetesResource").values()
               for o in manifest_objects(r["Properties"]["Manifest"])]
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"].count(HF_TOKEN_SERVICE_ACCOUNT) == 1


# -- the image's pins are the rehearsal's ------------------------------------------------------------------


def test_the_image_pins_the_libraries_the_rehearsal_runs():
    from tests.support.helpers import ROOT

    def pins(path: Path) -> dict[str, str]:
        lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
        return dict(line.split("==") for line in lines if "==" in line)

    image, dev = pins(FOLDER / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    constraints = pins(ROOT / "constraints.txt")
    hugging_face = {k: v for k, v in image.items() if k != "boto3"}
    assert {"transformers", "peft", "accelerate", "datasets", "tokenizers"} <= set(hugging_face)
    assert {k: dev.get(k) for k in hugging_face} == hugging_face
    assert {k: constraints.get(k) for k in image} == image
