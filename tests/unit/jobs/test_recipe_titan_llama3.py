"""Recipes titan-llama3 and titan-llama3-data (trainium_cdk/recipes/titan_llama3) through the verbs a user types.

`trn rehearse --job titan-llama3-data` and `--job titan-llama3` run the recipe's real code on the CPU as 2 nodes x
2 processes: TorchTitan's Llama 3 model at a tiny size, FSDP2 over the two nodes and tensor parallel within each,
DCP checkpoints on the stand-in /fsx, with a tokenizer and texts this test makes (nothing downloaded). `trn submit
--job ... --dry-run` renders each job for EKS and Batch, the backends of the native track; the job's TOML config
carries the parallel sizes of the compute group.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import paths
from tests.support.chart_helpers import validate_all
from tests.support.cli_support import NATIVE_TRN2, assert_one_clean_line, batch_dry_run_request, run_cli
from tests.support.tiny_titan import WORDS, make_tokenizer_and_texts
from tests.unit.jobs.test_job_metrics_push import gateway  # noqa: F401  (a fixture: the Pushgateway stand-in)
from trainium_cdk.facts import versions
from trainium_cdk.recipes.titan_llama3 import DATA_DIR, FOLDER, fit_plan, parallel_sizes
from trainium_cdk.recipes.titan_llama3.knobs import FLAVORS

IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/trainium-eks-trainingimages:recipe-titan-llama3-20261126-000000"
NATIVE = NATIVE_TRN2
# What the test's runs pass as a user would (`--env TITAN_<SECTION>_<KEY>`): the tiny model, short windows.
TINY = ("--env", "TITAN_MODEL_FLAVOR=tiny", "--env", "TITAN_TRAINING_SEQ_LEN=32", "--env",
        "TITAN_TRAINING_LOCAL_BATCH_SIZE=2", "--env", "TITAN_TRAINING_LR=0.003", "--env",
        "TITAN_TRAINING_WARMUP_STEPS=2", "--env", "TITAN_CHECKPOINT_INTERVAL=3")
def _config(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "native.yaml"
    path.write_text(yaml.safe_dump({**NATIVE, **changes}, sort_keys=False))
    return path


def records(text: str) -> list[dict[str, Any]]:
    """The recipe's reports (rank 0's), in order."""
    return [json.loads(line.split("TITAN ", 1)[1]) for line in text.splitlines() if "TITAN {" in line]


def _prepared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, backend: str = "batch") -> tuple[Path, str, dict]:
    """A project folder to work in, the config, and `trn rehearse --job titan-llama3-data` run on ``backend`` over a
    tokenizer and texts of the test's making: (the stand-in /fsx, the config's path, the data job's report)."""
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    fsx = work / ".trn-rehearse" / "fsx"
    tokenizer, dataset = make_tokenizer_and_texts(fsx / "team")
    config = str(_config(tmp_path))
    data = run_cli("rehearse", "--backend", backend, "--config", config, "--job", "titan-llama3-data",
                   "--env", f"TITAN_DATA_TOKENIZER={tokenizer}", "--env", f"TITAN_DATA_DATASET={dataset}")
    assert data.code == 0, data.out[-4000:] + data.err
    (prepared,) = [r["prepared"] for r in records(data.out) if "prepared" in r]
    return fsx, config, prepared


# -- trn rehearse: the recipe's code on the CPU, 2 nodes x 2 processes -----------------------------------


@pytest.mark.e2e
def test_rehearse_prepares_trains_saves_is_stopped_and_resumes_where_it_was(tmp_path, monkeypatch):
    began = time.monotonic()
    fsx, config, prepared = _prepared(tmp_path, monkeypatch, backend="eks")
    assert (prepared["documents"], prepared["vocab_size"], prepared["end_of_text"]) == (600, len(set(WORDS)) + 2, 1)
    made = fsx / "datasets" / "titan-llama3"
    assert (made / "tokens.bin").stat().st_size == 4 * prepared["tokens"]
    assert (made / "tokenizer" / "tokenizer.json").is_file()

    first = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "titan-llama3", *TINY,
                    "--env", "TITAN_TRAINING_STEPS=6")
    assert first.code == 0, first.out[-4000:] + first.err
    assert "node 0 exit 0, node 1 exit 0" in first.out
    ran = records(first.out)
    (start,) = [r["start"] for r in ran if "start" in r]
    # 4 processes: TP 2 within each node (the config's 4, capped at the node's 2 processes), FSDP across the 2.
    assert (start["world"], start["tensor_parallel_degree"], start["data_parallel_shard_degree"]) == (4, 2, 2)
    assert (start["device"], start["backend"], start["compile"], start["first_step"]) == ("cpu", "gloo", "eager", 1)
    # bf16 compute, every second block recomputed (of the tiny model's 2), by default.
    assert (start["param_dtype"], start["activation_checkpoint"], start["checkpointed_blocks"]) == (
        "bfloat16", "selective", 1)
    losses = {r["step"]: r["loss"] for r in ran if "loss" in r and "resumed_from" not in r}
    assert sorted(losses) == [1, 2, 3, 4, 5, 6] and losses[6] < losses[1]
    # Each step's throughput: the step's tokens (FSDP 2 x batch 2 x 32) a second, per node, and MFU against a
    # trn2.48xlarge's 10,672 dense BF16 TFLOPS (the catalog's; on this CPU a tiny fraction, but the same sum).
    flops = fit_plan.Shape.of(FLAVORS["tiny"], prepared["vocab_size"]).flops_per_token(32)
    for r in (r for r in ran if "tokens_per_s_per_node" in r):
        assert r["tokens_per_s_per_node"] == pytest.approx(2 * 2 * 32 / r["seconds"] / 2, rel=0.01)
        assert r["mfu"] == pytest.approx(r["tokens_per_s_per_node"] * flops / 10672e12, rel=0.01)
    checkpoints = fsx / "checkpoints" / "rehearsal"
    assert [r["checkpoint"] for r in ran if "checkpoint" in r] == [
        str(checkpoints / "step-00000003"), str(checkpoints / "step-00000006")]
    # Sharded: every rank wrote its own part (DCP's __<rank>_0.distcp), beside its metadata.
    assert sorted(p.name for p in (checkpoints / "step-00000003").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp", "trainer.json"]

    # Stopped after its checkpoint of step 3: the run that follows finds that one as the newest.
    shutil.rmtree(checkpoints / "step-00000006")
    second = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "titan-llama3", *TINY,
                     "--env", "TITAN_TRAINING_STEPS=6")
    assert second.code == 0, second.out[-4000:] + second.err
    again = [r for r in records(second.out) if "built" not in r]
    assert again[0] == {"resumed_from": str(checkpoints / "step-00000003"), "step": 3, "loss": losses[3]}
    assert again[1]["start"]["first_step"] == 4
    resumed = {r["step"]: r["loss"] for r in again if "loss" in r and "resumed_from" not in r and "step" in r}
    assert sorted(resumed) == [4, 5, 6]
    # The same steps, the same data, the same sharded weights and optimizer state: the same losses.
    for step in (4, 5, 6):
        assert resumed[step] == pytest.approx(losses[step], abs=1e-4), (step, resumed, losses)
    assert again[-1] == {"done": {"step": 6, "checkpoint": str(checkpoints / "step-00000006")}}
    # The rate: 2 warm-up steps to 0.003, then a cosine decay over the job's 6 steps towards a tenth of it.
    rates = [r["lr"] for r in ran if "lr" in r]
    assert rates == pytest.approx([0.0015, 0.003, 0.003, 0.00260459, 0.00165, 0.000695406], rel=1e-4), rates
    print(f"rehearsal of titan-llama3-data and titan-llama3 twice: {time.monotonic() - began:.0f} s")


@pytest.mark.e2e
def test_what_each_rank_holds_is_what_trn_fit_plans_and_no_rank_builds_the_whole_model(tmp_path, monkeypatch):
    """The plan of `trn fit` (fit_plan) against a CPU rehearsal of 2 nodes x 2 processes: every rank's shard bytes
    (parameters, gradients, AdamW state) after its first step, and what its forward saved for the backward without
    checkpointing, within 5%. Then the 1B flavor, built and not trained: no rank's peak host memory comes near the
    model's 3.9 GB of fp32 at the rehearsal's vocabulary (each builds on the meta device and materializes its own shards only)."""
    fsx, config, prepared = _prepared(tmp_path, monkeypatch)

    measured = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "titan-llama3", *TINY,
                       "--env", "TITAN_TRAINING_STEPS=1", "--env", "TITAN_CHECKPOINT_ENABLE=false",
                       "--env", "TITAN_ACTIVATION_CHECKPOINT_MODE=none", "--env", "TITAN_METRICS_REPORT_MEMORY=true")
    assert measured.code == 0, measured.out[-4000:] + measured.err
    ran = records(measured.out)
    (start,) = [r["start"] for r in ran if "start" in r]
    (memory,) = [r["memory"]["per_rank"] for r in ran if "memory" in r]
    shape = fit_plan.Shape.of(FLAVORS["tiny"], prepared["vocab_size"])
    layout = fit_plan.Layout(dp=start["data_parallel_shard_degree"], tp=start["tensor_parallel_degree"], seq_len=32,
                             local_batch_size=2, ac_mode="none")
    planned = fit_plan.shard_bytes(shape, layout)
    assert len(memory) == 4
    for rank in memory:
        for part in ("parameters", "gradients", "optimizer"):
            assert rank[part] == pytest.approx(planned[part], rel=0.05), (part, rank, planned)
        assert rank["activations"] == pytest.approx(fit_plan.saved_activations(shape, layout), rel=0.05), rank
    # Rank 0 holds the first (largest) chunk of every split: the plan's figure exactly.
    assert {part: memory[0][part] for part in planned} == planned

    # Precompile on the native track: a warm-up of real steps (no graph extraction), no checkpoint; then the run.
    warmed = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "titan-llama3", *TINY,
                     "--env", "TITAN_TRAINING_STEPS=2", "--env", "TRN_PRECOMPILE=1", "--env", "TRN_PRECOMPILE_STEPS=1")
    assert warmed.code == 0, warmed.out[-4000:] + warmed.err
    events = [next(iter(r)) for r in records(warmed.out) if set(r) & {"warm_up", "step", "checkpoint", "done"}]
    assert events == ["step", "warm_up", "step", "step", "checkpoint", "done"], events
    assert "precompile: warm-up, 1 training step(s) into the compile cache" in warmed.out
    saved = (fsx / "checkpoints" / "rehearsal").glob("step-*")
    assert [p.name for p in saved] == ["step-00000002"]  # none of the warm-up's

    # Another flavor finds the tiny model's checkpoint of the same job: one line, before DCP's size mismatch.
    other = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "titan-llama3",
                    "--env", "TITAN_MODEL_FLAVOR=debugmodel", "--env", "TITAN_TRAINING_SEQ_LEN=32")
    assert other.code == 1
    assert ("step-00000002 holds {'flavor': 'tiny', 'vocab_size': 26}, this job trains {'flavor': 'debugmodel', "
            "'vocab_size': 26}: give it another job name") in other.out
    assert "Size mismatch" not in other.out

    built = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "titan-llama3",
                    "--env", "TITAN_MODEL_FLAVOR=1B", "--env", "TITAN_TRAINING_SEQ_LEN=32",
                    "--env", "TITAN_TRAINING_STEPS=0", "--env", "TITAN_CHECKPOINT_ENABLE=false")
    assert built.code == 0, built.out[-4000:] + built.err
    (report,) = [r["built"] for r in records(built.out) if "built" in r]
    full = report["full_model_fp32"]
    assert full == fit_plan.full_model_bytes(fit_plan.Shape.of(FLAVORS["1B"], prepared["vocab_size"])) > 3.8e9
    for rank in report["per_rank"]:
        # A quarter of the model (FSDP 2 x TP 2) and the process itself: well under half the whole.
        assert rank["parameters"] == pytest.approx(full / 4, rel=0.01)
        assert rank["peak_rss"] < full / 2, (rank, full)


@pytest.mark.e2e
def test_a_hugging_face_llama_goes_in_trains_and_comes_out_as_transformers_loads_it(tmp_path, monkeypatch, gateway):
    """A tiny Llama 3 in Hugging Face's format (transformers' LlamaForCausalLM, saved as safetensors) is the start of
    `trn rehearse --job titan-llama3` (2 nodes x 2 processes, fp32 for an exact comparison): its first step's loss is
    what transformers computes on the same batches (the weights, the q/k permutation and RoPE came across). Three
    steps later the recipe writes the trained model as safetensors and config.json; transformers loads it and gives
    the held-out loss the recipe's last eval reported. Each step's throughput reaches the Pushgateway (a local HTTP
    server) and the node's textfile folder, as the jobs dashboard reads them."""
    import sys

    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    fsx, config, prepared = _prepared(tmp_path, monkeypatch)
    size = FLAVORS["tiny"]
    torch.manual_seed(7)
    start = LlamaForCausalLM(LlamaConfig(
        hidden_size=size["dim"], intermediate_size=fit_plan.ffn_hidden(size["dim"], size["ffn_multiple_of"], None),
        num_hidden_layers=size["n_layers"], num_attention_heads=size["n_heads"], num_key_value_heads=size["n_kv_heads"],
        vocab_size=prepared["vocab_size"], rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=8192,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}, tie_word_embeddings=False))
    hf_in = fsx / "models" / "tiny-llama"
    start.save_pretrained(hf_in, safe_serialization=True)
    metrics = tmp_path / "node-metrics"
    metrics.mkdir()

    ran = run_cli("rehearse", "--backend", "batch", "--config", config, "--job", "titan-llama3", *TINY,
                  "--env", "TITAN_TRAINING_STEPS=3", "--env", "TITAN_TRAINING_MIXED_PRECISION_PARAM=float32",
                  "--env", f"TITAN_CHECKPOINT_INITIAL_LOAD_PATH={hf_in}", "--env", "TITAN_CHECKPOINT_LAST_SAVE_IN_HF=true",
                  "--env", "TITAN_VALIDATION_FREQ=3", "--env", "TITAN_VALIDATION_STEPS=2",
                  "--env", f"TRN_METRICS_PUSH_URL=http://127.0.0.1:{gateway.server_address[1]}",
                  "--env", f"TRN_METRICS_DIR={metrics}")
    assert ran.code == 0, ran.out[-4000:] + ran.err
    # Node 0's rank 0 after each step: its own group on the gateway, its own file; labelled as the launcher labels.
    pushed = [(m, p, b) for m, p, b in gateway.requests if p.endswith("/source/throughput")]
    assert [(m, p) for m, p, _ in pushed] == [("PUT", "/metrics/job/rehearsal/node/0/source/throughput")] * 3
    for _, _, body in pushed:
        assert re.fullmatch(r'# TYPE trn_job_tokens_per_second_per_node gauge\ntrn_job_tokens_per_second_per_node'
                            r'\{job="rehearsal",node="0"\} [\d.]+\n# TYPE trn_job_model_flops_utilization_ratio gauge\n'
                            r'trn_job_model_flops_utilization_ratio\{job="rehearsal",node="0"\} [\d.e-]+\n', body), body
    assert (metrics / "rehearsal-throughput.prom").read_text() == pushed[-1][2]
    reports = records(ran.out)
    assert {"loaded_hf": str(hf_in)} in reports
    (begun,) = [r["start"] for r in reports if "start" in r]
    steps = {r["step"]: r["loss"] for r in reports if "loss" in r and "step" in r}
    (last_eval,) = [r["eval"] for r in reports if "eval" in r]
    (exported,) = [Path(r["exported_hf"]) for r in reports if "exported_hf" in r]
    assert last_eval["step"] == 3 and exported.name == "hf-step-00000003"

    # The recipe's own windows (its token_data module), as its 2 data-parallel ranks read them.
    monkeypatch.syspath_prepend(str(FOLDER))
    for name in ("knobs", "token_data"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import numpy as np
    from token_data import TokenWindows

    tokens = np.memmap(fsx / "datasets" / "titan-llama3" / "tokens.bin", dtype="<u4", mode="r")
    dp = begun["data_parallel_shard_degree"]
    windows = TokenWindows(tokens, seq_len=32, seed=0, dp=dp, batch_size=2, held_out=2 * dp * 2)

    def loss_of(model, rows) -> float:  # noqa: ANN001
        with torch.no_grad():
            logits = model(rows[:, :-1]).logits
        return float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten()))

    first = [loss_of(start, windows.batch(0, dp_rank=r)) for r in range(dp)]
    assert steps[1] == pytest.approx(sum(first) / dp, abs=1e-4), (steps, first)

    trained = AutoModelForCausalLM.from_pretrained(exported)
    assert sorted(p.name for p in exported.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    held_out = [loss_of(trained, rows) for r in range(dp) for rows in windows.validation(dp_rank=r)]
    assert last_eval["loss"] == pytest.approx(sum(held_out) / len(held_out), abs=1e-4), (last_eval, held_out)
    untrained = [loss_of(start, rows) for r in range(dp) for rows in windows.validation(dp_rank=r)]
    assert sum(held_out) < sum(untrained)  # it learned


# -- the job's config: parallel sizes from the compute group ------------------------------------------------


@pytest.mark.parametrize(("instance_type", "nodes", "dp", "tp"), [
    # trn2.48xlarge: 64 NeuronCores at the default LNC=2 (the catalog's neuron_cores); TP 4 (one Trainium2's logical
    # cores, Neuron's reference layout for 8B), FSDP over the rest.
    ("trn2.48xlarge", 1, 16, 4), ("trn2.48xlarge", 2, 32, 4), ("trn2.48xlarge", 16, 256, 4),
    ("trn2u.48xlarge", 4, 64, 4),
    # 2 NeuronCores a node: TP 2 within it, FSDP across.
    ("trn1.2xlarge", 1, 1, 2),
])
def test_parallel_sizes_per_instance_type(instance_type, nodes, dp, tp):
    sizes = parallel_sizes(instance_type, nodes)
    assert sizes == {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": dp,
                     "tensor_parallel_degree": tp}


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_eks_renders_both_jobs_and_they_validate(no_credentials, tmp_path):
    config = str(_config(tmp_path, compute_groups=[
        {"name": "train", "instance_type": "trn2.48xlarge", "nodes": 4, "az_ids": "use2-az3"}]))
    train = run_cli("submit", "--backend", "eks", "--config", config, "--job", "titan-llama3", "--name", "pt",
                    "--dry-run", "--image", IMAGE)
    assert train.code == 0, train.err
    (job,) = [o for o in yaml.safe_load_all(train.out) if o]
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["spec"]["minAvailable"] == 4
    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        validate_all([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": pod}])
        (container,) = pod["containers"]
        assert container["image"] == IMAGE
        assert container["command"][-1] == "/opt/trainium-cdk/recipes/titan_llama3/train.py"
        env = _container_env(container)
        assert (env["TRN_TORCH_DEVICE"], env["TRN_DIST_BACKEND"], env["TRN_COMPILE_BACKEND"]) == ("neuron",) * 3
        # Its own compile cache set on /fsx, and precompile's graph extraction capped at the recipe's 3 steps.
        assert (env["TRN_CACHE_DIR"], env["TRN_PRECOMPILE_STEPS"]) == ("/fsx/neuron-cache/titan-llama3", "3")
        # The launcher makes TRN_CHECKPOINT_DIR of the root and the job's name: /fsx/checkpoints/<job>.
        assert env["TRN_CHECKPOINT_ROOT"] == "/fsx/checkpoints"
        toml = tomllib.loads(env["TITAN_JOB_CONFIG"])
        # 4 nodes x 64 NeuronCores: TP 4 within a node, FSDP over the other 64.
        assert toml["parallelism"] == {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 64,
                                       "tensor_parallel_degree": 4}
        assert toml["training"]["mixed_precision_param"] == "bfloat16"
        assert toml["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
        assert toml["metrics"]["peak_bf16_tflops_per_node"] == 16 * 667.0
        assert toml["model"] == {"name": "llama3", "flavor": "8B"}
        assert (toml["training"]["dataset_path"], toml["checkpoint"]["enable"]) == (DATA_DIR, True)

    data = run_cli("submit", "--backend", "eks", "--config", config, "--job", "titan-llama3-data", "--name",
                   "pt-data", "--dry-run", "--image", IMAGE)
    assert data.code == 0, data.err
    (job,) = [o for o in yaml.safe_load_all(data.out) if o]
    validate_all([job])
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = _container_env(container)
    assert (env["TITAN_DATA_DIR"], env["AWS_DEFAULT_REGION"], env["NPROC_PER_NODE"]) == (DATA_DIR, "us-east-2", "1")
    assert container["command"][-1] == "/opt/trainium-cdk/recipes/titan_llama3/prepare.py"
    # CPU work on the system nodes (issue 44 item 8): no Neuron device asked for, no Trainium node's taint tolerated,
    # no compute group selected; said before the YAML.
    pod = job["spec"]["template"]["spec"]
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"},
                                      "limits": {"cpu": "2", "memory": "4Gi"}}
    assert "tolerations" not in pod and "nodeSelector" not in pod
    assert data.err == "trn submit --job titan-llama3-data: CPU work, on the system nodes (m7i.large), no Trainium node\n"
    assert "the system nodes (CPU work: no Neuron device)" in data.out


def test_batch_submits_both_jobs_as_batch_takes_them(no_credentials, tmp_path):
    config = str(_config(tmp_path))
    for name, script, nodes in (("titan-llama3", "train.py", 2), ("titan-llama3-data", "prepare.py", 1)):
        request, out = batch_dry_run_request(config, name)
        assert request["nodeOverrides"]["numNodes"] == nodes
        (node,) = request["nodeOverrides"]["nodePropertyOverrides"]
        overrides = node["containerOverrides"]
        assert overrides["command"][-1] == f"/opt/trainium-cdk/recipes/titan_llama3/{script}"
        env = {e["name"]: e["value"] for e in overrides["environment"]}
        assert env["TRN_CACHE_DIR"] == f"/fsx/neuron-cache/{name}"
        if name == "titan-llama3":
            assert tomllib.loads(env["TITAN_JOB_CONFIG"])["parallelism"]["data_parallel_shard_degree"] == 32
        assert "${RECIPE_IMAGE}" in out


def test_a_gated_tokenizer_token_is_read_by_secret_name_only(no_credentials, tmp_path):
    config = str(_config(tmp_path, hugging_face={"token_secret": "hf-token"}))
    request, _ = batch_dry_run_request(config, "titan-llama3-data")
    (node,) = request["nodeOverrides"]["nodePropertyOverrides"]
    env = {e["name"]: e["value"] for e in node["containerOverrides"]["environment"]}
    assert env["HF_TOKEN_SECRET"] == "hf-token"


def test_the_xla_track_does_not_offer_it(no_credentials, tmp_path):
    config = _config(tmp_path, neuron={"track": "xla"}, region="us-west-2", network={"az_ids": ["usw2-az4", "usw2-az3"]},
                     instance_offerings={}, compute_groups=[{"name": "train", "instance_type": "trn1.32xlarge"}])
    result = run_cli("submit", "--backend", "batch", "--config", str(config), "--job", "titan-llama3", "--dry-run")
    assert_one_clean_line(result, "--job", "titan-llama3 runs on native")


# -- pieces the rehearsal does not reach ------------------------------------------------------------------


def _recipe_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe's folder first on the path, and no other recipe's knobs or train module (hf_lora has both)."""
    import sys

    monkeypatch.syspath_prepend(str(FOLDER))
    for name in ("knobs", "train", "sharding", "fit_plan", "checkpoints", "token_data", "hf_format", "job_metrics"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_export_copies_a_checkpoint_folder_to_s3(aws_env, tmp_path, monkeypatch):
    import boto3
    from moto import mock_aws

    _recipe_modules(monkeypatch)
    from checkpoints import export_to_s3  # the recipe's own module (its image runs train.py as a script)

    step = tmp_path / "step-00000500"
    (step / "sub").mkdir(parents=True)
    for name in (".metadata", "__0_0.distcp", "trainer.json", "sub/x"):
        (step / name).write_text(name)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-2")
        s3.create_bucket(Bucket="team-ckpt", CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        assert export_to_s3(step, "s3://team-ckpt/llama3/run-1/", client=s3) == 4
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="team-ckpt")["Contents"])
    assert keys == [f"llama3/run-1/step-00000500/{n}" for n in (".metadata", "__0_0.distcp", "sub/x", "trainer.json")]


def test_the_launchers_warm_up_sets_the_steps_and_nothing_of_pytorch_xla_is_read(monkeypatch):
    _recipe_modules(monkeypatch)
    import knobs

    from trainium_cdk.runtime.launcher import WARMUP_STEPS_VARIABLE

    monkeypatch.delenv(WARMUP_STEPS_VARIABLE, raising=False)
    monkeypatch.setenv("NEURON_EXTRACT_GRAPHS_ONLY", "1")  # PyTorch/XLA's: not the native track's
    assert knobs.warmup_steps() is None
    monkeypatch.setenv(WARMUP_STEPS_VARIABLE, "3")  # the launcher's warm-up run (precompile on the native track)
    assert knobs.WARMUP_STEPS_ENV == WARMUP_STEPS_VARIABLE and knobs.warmup_steps() == 3
    for folder in (FOLDER, FOLDER.parent / "hf_lora"):  # the native track's recipes: no module reads the variable
        for module in folder.glob("*.py"):
            assert '"NEURON_EXTRACT_GRAPHS_ONLY"' not in module.read_text(), module


def test_the_throughput_gauges_are_the_dashboards_and_a_failed_push_stops_pushing(monkeypatch, tmp_path, capsys):
    _recipe_modules(monkeypatch)
    import job_metrics

    from trainium_cdk.facts import names

    assert (job_metrics.TOKENS_METRIC, job_metrics.MFU_METRIC) == (names.JOB_TOKENS_PER_SECOND_METRIC,
                                                                     names.JOB_MFU_METRIC)
    assert (job_metrics.JOB_VARIABLE, job_metrics.DIR_VARIABLE, job_metrics.PUSH_VARIABLE) == (
        names.METRICS_JOB_VARIABLE, names.METRICS_DIR_VARIABLE, names.METRICS_PUSH_URL_VARIABLE)
    nowhere = job_metrics.Throughput({"TRN_METRICS_JOB": "j", "TRN_METRICS_PUSH_URL": "http://127.0.0.1:9",
                                      "TRN_METRICS_DIR": str(tmp_path), "NODE_RANK": "0"})
    nowhere.publish(10.0, None)
    nowhere.publish(11.0, None)
    assert capsys.readouterr().err.count("cannot push the throughput") == 1
    assert (tmp_path / "j-throughput.prom").read_text() == (
        '# TYPE trn_job_tokens_per_second_per_node gauge\ntrn_job_tokens_per_second_per_node{job="j",node="0"} 11.0\n')
    # No job label (a job name Prometheus cannot take) or no folder: nothing written, nothing pushed.
    assert job_metrics.Throughput({"TRN_METRICS_DIR": str(tmp_path), "TRN_METRICS_PUSH_URL": "http://x"}).push is None
    assert job_metrics.Throughput({"TRN_METRICS_JOB": "j", "TRN_METRICS_DIR": str(tmp_path / "no")}).file is None


def test_the_image_and_versions_pin_the_same_torchtitan_neuron():
    pins = dict(line.split("==", 1) for line in (FOLDER / "requirements.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert pins["torchtitan"] == versions.TORCHTITAN_NEURON_VERSION == "0.2.2+neuron.2"
    # What the Dockerfile installs from Neuron's repository alone (tests/unit/node/test_package_repositories.py): the same pin.
    neuron = [line for line in (FOLDER / "neuron-requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    assert neuron == [f"torchtitan=={versions.TORCHTITAN_NEURON_VERSION}"]
    rehearsal = (paths.ROOT / "requirements-rehearsal.txt").read_text()
    assert f"torchtitan=={versions.TORCHTITAN_REHEARSAL_VERSION}\n" in rehearsal
    dockerfile = (FOLDER / "Dockerfile").read_text()
    # Its build context is the recipes folder: the shared hf_token.py has one home, the hf-lora recipe's.
    assert "COPY hf_lora/hf_token.py /opt/trainium-cdk/recipes/hf_lora/hf_token.py" in dockerfile
    assert not (FOLDER / "hf_token.py").exists()
