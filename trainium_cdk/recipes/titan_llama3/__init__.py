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

import dataclasses
import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainium_cdk.app.config import TrainingJobSettings
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.catalog import DEFAULT_CATALOG
from trainium_cdk.facts.names import (
    COMPILE_BACKEND_VARIABLE,
    DIST_BACKEND_VARIABLE,
    NEURON_DEVICE,
    SHARED_MOUNT,
    TORCH_DEVICE_VARIABLE,
)
from trainium_cdk.recipes import FOLDER as RECIPES_FOLDER
from trainium_cdk.recipes import FitReport, Recipe, RecipeContext, core_label, core_memory_gib, register
from trainium_cdk.recipes.titan_llama3 import fit_plan
from trainium_cdk.recipes.titan_llama3.knobs import CONFIG_ENV, FLAVORS, override_name
from trainium_cdk.recipes.titan_llama3.knobs import job_config as read_job_config

FOLDER = Path(__file__).resolve().parent
NAME = "titan-llama3"
DATA_NAME = "titan-llama3-data"
# Where the data job leaves the tokenizer and the token stream and the training job reads them.
DATA_DIR = f"{SHARED_MOUNT}/datasets/{NAME}"
# The model: Llama 3 8B, TorchTitan's registry sizes (knobs.FLAVORS).
FLAVOR = "8B"
# Tensor parallel within a node: 4, as Neuron's reference TorchTitan config for an 8B model on trn2
# (qwen3_8b_tp4_fsdp16_sac: TP 4 x FSDP 16 with selective activation checkpointing; Neuron docs, "Tutorial: Run a
# basic TorchTitan training on Neuron"). At LNC=2 a Trainium2 has 4 logical NeuronCores: TP 4 stays on one chip, 8
# would span two. It may not exceed Llama 3's 8 key/value heads, which TP splits. FSDP over every other process.
TENSOR_PARALLEL = 4
# The job's settings besides the parallel sizes; each is a `--env TITAN_<SECTION>_<KEY>=...` away (knobs.py).
# bf16 compute with fp32 master weights and fp32 gradient reduction (FSDP2's MixedPrecisionPolicy; TorchTitan's
# [training] mixed_precision_param and mixed_precision_reduce).
# global_batch_size -1: one micro-batch a step (local_batch_size x the data-parallel ranks); a multiple of that
# accumulates gradients over several. AdamW's weight decay spares norms, the embedding and the output layer.
TRAINING = {"dataset_path": DATA_DIR, "local_batch_size": 1, "global_batch_size": -1, "seq_len": 8192,
            "steps": 1000, "lr": 3e-4, "warmup_steps": 200, "weight_decay": 0.1, "max_norm": 1.0, "seed": 0,
            "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32"}
# After the warm-up the rate decays over the job's steps to min_lr_factor of [training] lr (TorchTitan's keys).
LR_SCHEDULER = {"decay_type": "cosine", "min_lr_factor": 0.1}
# The mean loss of windows held out from the end of the token stream (steps batches a data-parallel rank), every
# freq steps and at the end.
VALIDATION = {"enable": True, "freq": 500, "steps": 8}
# Activation checkpointing, TorchTitan 0.2's keys: "selective" recomputes every selective_ac_option-th block (its
# layer option), "full" every block, "none" keeps all. Selective, as Neuron's reference config; `trn fit` says which
# mode a job needs.
ACTIVATION_CHECKPOINT = {"mode": "selective", "selective_ac_option": "2"}
# Precompile (a job with TRN_PRECOMPILE=1): the launcher's warm-up of this many real steps fills the compile cache
# (TorchNeuron has no graph extraction); every step after the first runs the same graphs (the same shapes: fixed
# seq_len windows). train.py trains those steps and neither reads nor writes a checkpoint.
PRECOMPILE_STEPS = 3
# initial_load_path: a Hugging Face Llama 3 checkpoint (config.json and safetensors) to start from when the job has
# no checkpoint of its own; last_save_in_hf: write the trained model as one (hf-step-N/ beside the checkpoints, in
# export_dtype). TorchTitan's keys.
CHECKPOINT = {"enable": True, "interval": 500, "keep_latest_k": 2, "export_s3": "", "initial_load_path": "",
              "initial_load_in_hf": True, "last_save_in_hf": False, "export_dtype": "float32"}


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
        "lr_scheduler": LR_SCHEDULER,
        "validation": VALIDATION,
        "parallelism": parallel_sizes(instance_type, nodes, kv_heads=FLAVORS[flavor]["n_kv_heads"]),
        "activation_checkpoint": ACTIVATION_CHECKPOINT,
        "checkpoint": CHECKPOINT,
        # torch.compile with TRN_COMPILE_BACKEND (neuron): Neuron's TorchTitan runs `--compile.backend neuron`.
        "compile": {"enable": True},
        # MFU's denominator in the step lines: the node's dense BF16 peak (the catalog's); report_memory counts what
        # the first step's forward saves for the backward (the rehearsal's check of `trn fit`'s activations).
        "metrics": {"peak_bf16_tflops_per_node": DEFAULT_CATALOG.get(instance_type).peak_bf16_tflops or 0.0,
                    "report_memory": False},
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


# `trn fit`'s search for a layout that fits goes up to this many nodes (doubling), more checkpointing (fit_plan's
# AC_MODES, in order of recomputation), smaller local batches and TP 8.
FIT_MAX_NODES = 64


def _layout(settings: dict[str, dict[str, Any]], *, world: int, local_world: int) -> fit_plan.Layout:
    dp, tp = fit_plan.mesh_sizes(settings["parallelism"], world, local_world,
                                 FLAVORS[settings["model"]["flavor"]]["n_kv_heads"])
    ac = settings["activation_checkpoint"]
    every = str(ac.get("selective_ac_option", "2"))
    return fit_plan.Layout(dp=dp, tp=tp, seq_len=int(settings["training"]["seq_len"]),
                           local_batch_size=int(settings["training"]["local_batch_size"]), ac_mode=str(ac["mode"]),
                           ac_every=int(every) if every.isdigit() and int(every) > 0 else 2)


def _settings(ctx: RecipeContext, env: Mapping[str, str], nodes: int) -> dict[str, dict[str, Any]]:
    """The job's TOML config with the job's ``--env`` over it, as train.py reads it on the nodes."""
    try:
        settings = read_job_config(job_config(ctx.group.instance_type, nodes), env)
    except SystemExit as error:  # knobs reports a mistyped override as train.py would
        raise ConfigError("--env", str(error).split(":", 1)[0], str(error).split(":", 1)[-1].strip()) from None
    flavor = settings["model"]["flavor"]
    if flavor not in FLAVORS:
        raise ConfigError("--env", f"{override_name('model', 'flavor')}={flavor}", "a Llama 3 size of the recipe: "
                          + ", ".join(FLAVORS))
    mode = settings["activation_checkpoint"]["mode"]
    if mode not in fit_plan.AC_MODES:
        raise ConfigError("--env", f"{override_name('activation_checkpoint', 'mode')}={mode}",
                          ", ".join(fit_plan.AC_MODES))
    return settings


def fit(ctx: RecipeContext, env: Mapping[str, str]) -> FitReport:
    """One rank's memory of the job on ``ctx.group`` (fit_plan: computed, checked against the CPU rehearsal), and
    when it does not fit, the least change that does: fewer nodes first, then the fewest flags, the largest batch,
    TP within one Trainium2 (4), the least recomputation."""
    spec = ctx.config.spec(ctx.group)
    nodes = ctx.nodes or ctx.group.nodes
    settings = _settings(ctx, env, nodes)
    flavor = settings["model"]["flavor"]
    shape = fit_plan.Shape.of(FLAVORS[flavor], fit_plan.LLAMA3_VOCAB)
    cores, core_memory = spec.neuron_cores, core_memory_gib(spec)

    def planned(layout: fit_plan.Layout) -> fit_plan.Plan:
        return fit_plan.plan(shape, layout, core_memory_gib=core_memory,
                             host_memory_gib=spec.memory_gib, processes_per_node=cores)

    layout = _layout(settings, world=nodes * cores, local_world=cores)
    result = planned(layout)
    suggestion = None if result.fits else _suggest(ctx, shape, layout, nodes, planned)
    every = f" (one block in {layout.ac_every})" if layout.ac_mode == "selective" else ""
    summary = (f"titan-llama3 on {nodes} x {spec.name}: Llama 3 {flavor} ({shape.parameters() / 1e9:.2f}B parameters), "
               f"{nodes * cores} ranks as FSDP {layout.dp} x TP {layout.tp}, seq_len {layout.seq_len}, local batch "
               f"{layout.local_batch_size}, activation checkpointing {layout.ac_mode}{every}, bf16 compute")
    return FitReport(
        summary=summary, device=tuple(result.parts.items()), device_limit=result.device_limit,
        device_label=core_label(spec),
        host=tuple(result.host_parts.items()), host_limit=result.host_limit, suggestion=suggestion,
        assumptions=(f"vocabulary {fit_plan.LLAMA3_VOCAB:,} (Llama 3's tokenizer; the data job's tokenizer decides)",
                     f"the Neuron runtime's reserve: {fit_plan.RUNTIME_RESERVE:.0%} of the core (our margin)",
                     f"{fit_plan.HOST_PROCESS_GIB:g} GiB of host memory a process (our margin)"),
    )


def _suggest(ctx: RecipeContext, shape: fit_plan.Shape, layout: fit_plan.Layout, nodes: int, planned: Any) -> str:
    """The `trn submit` flags of the cheapest layout that fits, or why none up to FIT_MAX_NODES nodes does."""
    cores = ctx.config.spec(ctx.group).neuron_cores
    modes = fit_plan.AC_MODES[fit_plan.AC_MODES.index(layout.ac_mode):]
    batches = sorted({layout.local_batch_size, *(b for b in (1, 2, 4, 8) if b < layout.local_batch_size)},
                     reverse=True)
    tps = sorted({layout.tp, *(t for t in (4, 8) if t > layout.tp and shape.n_kv_heads % t == 0 and cores % t == 0)})
    counts = [n for n in (nodes, *(2**k for k in range(7))) if nodes <= n <= FIT_MAX_NODES]
    candidates = []
    for n, batch_size, mode, tp in itertools.product(sorted(set(counts)), batches, modes, tps):
        trial = dataclasses.replace(layout, dp=n * cores // tp, tp=tp, local_batch_size=batch_size, ac_mode=mode)
        if planned(trial).fits:
            flags = ([f"--nodes {n}"] if n != nodes else []) + [
                f"--env {override_name(section, key)}={value}" for section, key, value, was in (
                    ("training", "local_batch_size", batch_size, layout.local_batch_size),
                    ("activation_checkpoint", "mode", mode, layout.ac_mode),
                    ("parallelism", "tensor_parallel_degree", tp, layout.tp)) if value != was]
            candidates.append(((n, len(flags), -batch_size, tp, modes.index(mode)), flags, n))
    if not candidates:
        return (f"no layout of up to {FIT_MAX_NODES} nodes fits (activation checkpointing up to full, local batch "
                f"down to 1, TP up to {tps[-1]}): a shorter seq_len or a smaller flavor")
    _, flags, n = min(candidates)
    note = (f" (compute group {ctx.group.name} allows {ctx.group.maximum}: raise its max_nodes)"
            if n > ctx.group.maximum else "")
    return "fits with " + " ".join(flags) + note


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
    tracks=("native",), job=training_job, data_prep=DATA_NAME, fit=fit, shares=(RECIPES_FOLDER / "hf_lora" / "hf_token.py",),
))
register(Recipe(
    name=DATA_NAME, summary="titan-llama3's data: a tokenizer and a dataset tokenized onto /fsx (hub or S3)",
    tracks=("native",), job=data_job, folder=FOLDER, image_from=NAME, cpu_only=True,
))
