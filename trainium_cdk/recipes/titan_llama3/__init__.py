"""Recipe titan-llama3: Llama 3 pretraining with TorchTitan's Llama 3 model on TorchNeuron (the native track, trn2):
FSDP2 across nodes, tensor parallel within a node, sharded checkpoints (torch.distributed.checkpoint) on /fsx with
resume, optionally copied to S3; and titan-llama3-data, its data preparation (a tokenizer and a dataset from S3 or
the Hugging Face hub, tokenized onto /fsx; a gated tokenizer's token from Secrets Manager).

This module builds their jobs, and the job's TOML config (TorchTitan's sections) with the parallel sizes of the
compute group: the NeuronCores of a node (the catalog) times the nodes. The code the nodes run (train.py,
prepare.py, knobs.py) and the Dockerfile are beside it; both jobs run in the image `trn image push --recipe
titan-llama3` builds.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.app.config import TrainingJobSettings
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import (
    COMPILE_BACKEND_VARIABLE,
    DIST_BACKEND_VARIABLE,
    NEURON_DEVICE,
    SHARED_MOUNT,
    TORCH_DEVICE_VARIABLE,
)
from trainium_cdk.recipes import FOLDER as RECIPES_FOLDER
from trainium_cdk.recipes import Recipe, RecipeContext, register
from trainium_cdk.recipes.titan_llama3.knobs import CONFIG_ENV, FLAVORS

FOLDER = Path(__file__).resolve().parent
NAME = "titan-llama3"
DATA_NAME = "titan-llama3-data"
# Where the data job leaves the tokenizer and the token stream and the training job reads them.
DATA_DIR = f"{SHARED_MOUNT}/datasets/{NAME}"
# The model: Llama 3 8B, TorchTitan's registry sizes (knobs.FLAVORS).
FLAVOR = "8B"
# Tensor parallel within a node, at most 8: Llama 3 (8B and 70B) has 8 key/value heads, and TP splits them (a
# degree above that would have to replicate them). The data-parallel shard degree is every other process.
TENSOR_PARALLEL = 8
# The job's settings besides the parallel sizes; each is a `--env TITAN_<SECTION>_<KEY>=...` away (knobs.py).
TRAINING = {"dataset_path": DATA_DIR, "local_batch_size": 1, "seq_len": 8192, "steps": 1000, "lr": 3e-4,
            "warmup_steps": 200, "max_norm": 1.0, "seed": 0}
# Precompile's graph extraction (a job with precompile: neuron_parallel_compile, TRN_PRECOMPILE_STEPS): every step
# after the first runs the same graphs (the same shapes: fixed seq_len windows), so 3 steps trace them all; Neuron's
# guide says to keep the trial run to a few steps. train.py trains those steps and neither reads nor writes a
# checkpoint.
PRECOMPILE_STEPS = 3
CHECKPOINT = {"enable": True, "interval": 500, "keep_latest_k": 2, "export_s3": ""}


def parallel_sizes(instance_type: str, nodes: int, *, tensor_parallel: int = TENSOR_PARALLEL,
                   kv_heads: int = FLAVORS[FLAVOR]["n_kv_heads"]) -> dict[str, int]:
    """TorchTitan's [parallelism] of ``nodes`` nodes of ``instance_type``: one process per NeuronCore (the
    catalog's, at the type's default logical NeuronCore size), TP within a node (the largest degree that divides
    the NeuronCores of a node, the key/value heads and ``tensor_parallel``), FSDP over the rest."""
    cores = DEFAULT_CATALOG.get(instance_type).neuron_cores
    tp = math.gcd(math.gcd(cores, kv_heads), tensor_parallel)
    return {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": nodes * cores // tp,
            "tensor_parallel_degree": tp}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def job_config(instance_type: str, nodes: int, *, flavor: str = FLAVOR) -> str:
    """The job's TOML config (TorchTitan's sections and key names) for ``nodes`` nodes of ``instance_type``."""
    if flavor not in FLAVORS:
        raise ConfigError("flavor", flavor, f"a Llama 3 size of the recipe: {', '.join(FLAVORS)}")
    sections: dict[str, dict[str, Any]] = {
        "job": {"description": f"Llama 3 {flavor} pretraining on {nodes} x {instance_type}"},
        "model": {"name": "llama3", "flavor": flavor},
        "training": TRAINING,
        "parallelism": parallel_sizes(instance_type, nodes, kv_heads=FLAVORS[flavor]["n_kv_heads"]),
        "checkpoint": CHECKPOINT,
        # torch.compile with TRN_COMPILE_BACKEND (neuron): Neuron's TorchTitan runs `--compile.backend neuron`.
        "compile": {"enable": True},
    }
    lines = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
        lines.append("")
    return "\n".join(lines)


def training_job(ctx: RecipeContext) -> TrainingJobSettings:
    """One process per NeuronCore on each node of the group; the TOML config travels in the job's environment."""
    nodes = ctx.nodes or ctx.group.nodes
    return TrainingJobSettings(
        name=NAME, group=ctx.group.name, nodes=nodes, command=(f"{ctx.code}/train.py",), cache_set=NAME,
        precompile_steps=PRECOMPILE_STEPS, env={
            CONFIG_ENV: job_config(ctx.group.instance_type, nodes),
            TORCH_DEVICE_VARIABLE: NEURON_DEVICE, DIST_BACKEND_VARIABLE: NEURON_DEVICE,
            COMPILE_BACKEND_VARIABLE: NEURON_DEVICE,
            # boto3 (the export to S3) finds no region of its own in a pod: botocore reads AWS_DEFAULT_REGION.
            "AWS_DEFAULT_REGION": ctx.config.region,
        },
    )


def data_job(ctx: RecipeContext) -> TrainingJobSettings:
    """One process on one node (CPU work) before the training job's nodes start. The token's secret by name only
    (hugging_face.token_secret); the job's role may read that secret."""
    env = {"TITAN_DATA_DIR": DATA_DIR, "AWS_DEFAULT_REGION": ctx.config.region}
    if ctx.config.hugging_face.token_secret:
        env["HF_TOKEN_SECRET"] = ctx.config.hugging_face.token_secret
    return TrainingJobSettings(
        name=DATA_NAME, group=ctx.group.name, nodes=1, processes_per_node=1, command=(f"{ctx.code}/prepare.py",),
        cache_set=DATA_NAME, env=env,
    )


register(Recipe(
    name=NAME, summary="Llama 3 pretraining with TorchTitan's Llama 3 on TorchNeuron (FSDP2 + TP, DCP checkpoints)",
    tracks=("native",), job=training_job, data_prep=DATA_NAME, shares=(RECIPES_FOLDER / "hf_lora" / "hf_token.py",),
))
register(Recipe(
    name=DATA_NAME, summary="titan-llama3's data: a tokenizer and a dataset tokenized onto /fsx (hub or S3)",
    tracks=("native",), job=data_job, folder=FOLDER, image_from=NAME,
))
