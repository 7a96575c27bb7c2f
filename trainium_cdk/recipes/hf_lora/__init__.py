"""Recipe hf-lora: PEFT LoRA fine-tuning of a Llama-architecture causal LM with Hugging Face transformers on
TorchNeuron (the native track), data-parallel over every NeuronCore of every node; and hf-lora-data, its data
preparation (the model, its tokenizer and the tokenized dataset onto /fsx, a gated model's token from Secrets
Manager).

This module builds their jobs; the code the nodes run (train.py, prepare.py, hf_token.py, knobs.py) and the
Dockerfile are beside it, and both jobs run in the image `trn image push --recipe hf-lora` builds.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections.abc import Mapping
from pathlib import Path

from trainium_cdk.app.config import TrainingJobSettings
from trainium_cdk.errors import ConfigError
from trainium_cdk.facts.names import (
    DIST_BACKEND_VARIABLE,
    HF_TOKEN_SERVICE_ACCOUNT,
    NEURON_DEVICE,
    REHEARSAL_FSX,
    SHARED_MOUNT,
    TORCH_DEVICE_VARIABLE,
)
from trainium_cdk.recipes import (
    FitReport,
    FitUnknown,
    Recipe,
    RecipeContext,
    core_label,
    core_memory_gib,
    gib,
    register,
)
from trainium_cdk.recipes.hf_lora import fit_plan, knobs
from trainium_cdk.recipes.hf_lora.knobs import DEFAULTS

FOLDER = Path(__file__).resolve().parent
NAME = "hf-lora"
DATA_NAME = "hf-lora-data"
# Where the data job leaves the packed token blocks and the training job reads them.
DATA_DIR = f"{SHARED_MOUNT}/datasets/{NAME}"
# The knobs both jobs carry, so that both read the same model and data (the others: knobs.py's defaults).
SHARED_KNOBS = ("HF_LORA_MODEL", "HF_LORA_DATASET", "HF_LORA_SEQ_LEN")


def _shared_env() -> dict[str, str]:
    return {**{k: DEFAULTS[k] for k in SHARED_KNOBS}, "HF_LORA_DATA_DIR": DATA_DIR}


def training_job(ctx: RecipeContext) -> TrainingJobSettings:
    """One process per NeuronCore on each node of the group (DDP across them all), the model and data from
    /fsx. The nodes never call the hub: the data job downloaded the model into HF_HOME (/fsx/huggingface), and
    64 processes a node asking the hub for the same files at once would hit its rate limits."""
    return TrainingJobSettings(
        name=NAME, group=ctx.group.name, nodes=ctx.nodes, command=(f"{ctx.code}/train.py",), cache_set=NAME,
        env={
            **_shared_env(), "HF_LORA_MAX_STEPS": DEFAULTS["HF_LORA_MAX_STEPS"],
            TORCH_DEVICE_VARIABLE: NEURON_DEVICE, DIST_BACKEND_VARIABLE: NEURON_DEVICE, "HF_HUB_OFFLINE": "1",
        },
    )


def data_job(ctx: RecipeContext) -> TrainingJobSettings:
    """One process on one node: downloads and tokenizes (CPU work) before the training job's nodes start. The
    token's secret by name only (hugging_face.token_secret); the job's role may read that secret."""
    secret = ctx.config.hugging_face.token_secret
    # The stack's region for boto3 (the token's secret, an s3:// dataset): botocore reads AWS_DEFAULT_REGION, not
    # AWS_REGION (botocore/configprovider.py, "region"), and a pod has neither of its own.
    env = {**_shared_env(), "AWS_DEFAULT_REGION": ctx.config.region}
    if secret:
        env["HF_TOKEN_SECRET"] = secret
    return TrainingJobSettings(
        name=DATA_NAME, group=ctx.group.name, nodes=1, processes_per_node=1, command=(f"{ctx.code}/prepare.py",),
        cache_set=DATA_NAME, env=env,
        # EKS: the service account whose role may read the secret (Batch: the job role may).
        service_account=HF_TOKEN_SERVICE_ACCOUNT if secret else None,
    )


def model_config(model: str) -> Path | None:
    """Where this machine has the config.json of ``model`` (HF_LORA_MODEL), or None. A /fsx path: in the folder that
    stands for /fsx in `trn rehearse`; a directory: in it; a hub id: in a Hugging Face cache, the rehearsal's /fsx's
    first (HF_HOME on the nodes is /fsx/huggingface: a rehearsed data job downloaded there), then this machine's
    (huggingface_hub's layout: hub/models--ORG--NAME/snapshots/REVISION/, refs/main naming the revision)."""
    folders = [Path(model).expanduser()]
    if model.startswith(f"{SHARED_MOUNT}/"):
        folders.insert(0, Path(REHEARSAL_FSX) / model.removeprefix(f"{SHARED_MOUNT}/"))
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    caches = [Path(REHEARSAL_FSX, "huggingface", "hub"), Path(os.environ.get("HF_HUB_CACHE") or f"{home}/hub")]
    for cache in caches:
        repo = cache.expanduser() / f"models--{model.replace('/', '--')}"
        ref = repo / "refs" / "main"
        revision = ref.read_text().strip() if ref.is_file() else None
        snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime, reverse=True) \
            if (repo / "snapshots").is_dir() else []
        folders += [repo / "snapshots" / revision] if revision else snapshots
    return next((folder / "config.json" for folder in folders if (folder / "config.json").is_file()), None)


def _knob(env: Mapping[str, str], name: str) -> str:
    return env.get(name) or DEFAULTS[name]


def _whole(env: Mapping[str, str], name: str, *, least: int = 1) -> int:
    raw = _knob(env, name)
    if not raw.strip().isdigit() or int(raw) < least:
        raise ConfigError("--env", f"{name}={raw}", f"a whole number of at least {least}")
    return int(raw)


def _job(env: Mapping[str, str]) -> fit_plan.Job:
    """The knobs that decide the job's memory, from its --env over the recipe's defaults."""
    targets = tuple(t.strip() for t in _knob(env, "HF_LORA_TARGETS").split(",") if t.strip())
    unknown = [t for t in targets if t not in fit_plan.PROJECTIONS]
    if unknown or not targets:
        raise ConfigError("--env", f"HF_LORA_TARGETS={_knob(env, 'HF_LORA_TARGETS')}",
                          f"projections of a Llama decoder block, comma-separated: {', '.join(fit_plan.PROJECTIONS)}")
    dtype = _knob(env, "HF_LORA_DTYPE")
    if dtype not in fit_plan.DTYPE_BYTES:
        raise ConfigError("--env", f"HF_LORA_DTYPE={dtype}", ", ".join(fit_plan.DTYPE_BYTES))
    try:
        checkpointing = knobs.flag("HF_LORA_GRADIENT_CHECKPOINTING", _knob(env, "HF_LORA_GRADIENT_CHECKPOINTING"))
    except SystemExit as error:  # as train.py would stop, in one line
        raise ConfigError("--env", str(error).split(":", 1)[0], "0 or 1") from None
    try:
        dropout = float(_knob(env, "HF_LORA_DROPOUT")) > 0
    except ValueError:
        raise ConfigError("--env", f"HF_LORA_DROPOUT={_knob(env, 'HF_LORA_DROPOUT')}", "a number") from None
    return fit_plan.Job(seq_len=_whole(env, "HF_LORA_SEQ_LEN"), batch=_whole(env, "HF_LORA_BATCH_SIZE"),
                        rank=_whole(env, "HF_LORA_RANK"), targets=targets, dtype_bytes=fit_plan.DTYPE_BYTES[dtype],
                        dropout=dropout, checkpointing=checkpointing)


def fit(ctx: RecipeContext, env: Mapping[str, str]) -> FitReport:
    """One rank's memory of the job on ``ctx.group`` from the base model's config.json (fit_plan: computed, checked
    against the CPU rehearsal), and when it does not fit, the least change that does, or why none does."""
    spec = ctx.config.spec(ctx.group)
    core_memory, nodes = core_memory_gib(spec), ctx.nodes or ctx.group.nodes
    model = _knob(env, "HF_LORA_MODEL")
    job = _job(env)
    found = model_config(model)
    if found is None:
        raise FitUnknown(f"the sizes of {model} are in its config.json, which is not on this machine: `hf download "
                         f"{model} config.json` puts it in the Hugging Face cache, where `trn fit` reads it (or give "
                         "HF_LORA_MODEL as a local directory)")
    try:
        shape = fit_plan.Shape.of(json.loads(found.read_text()))
    except (ValueError, KeyError) as error:
        raise ConfigError("--env", f"HF_LORA_MODEL={model}", f"a Llama-architecture causal LM: {found} has no "
                          f"{error}") from None

    def planned(trial: fit_plan.Job) -> fit_plan.Plan:
        return fit_plan.plan(shape, trial, core_memory_gib=core_memory, host_memory_gib=spec.memory_gib,
                             processes_per_node=spec.neuron_cores)

    result = planned(job)
    adapters = fit_plan.adapter_parameters(shape, job)
    summary = (f"hf-lora on {nodes} x {spec.name}: {model} ({shape.parameters() / 1e9:.2f}B parameters, "
               f"{8 * job.dtype_bytes}-bit), LoRA rank {job.rank} on {','.join(job.targets)} ({adapters / 1e6:.1f}M "
               f"trainable), {nodes * spec.neuron_cores} ranks data-parallel, seq_len {job.seq_len}, batch "
               f"{job.batch} a rank, gradient checkpointing {'on' if job.checkpointing else 'off'}")
    return FitReport(
        summary=summary, device=tuple(result.parts.items()), device_limit=result.device_limit,
        device_label=core_label(spec), host=tuple(result.host_parts.items()), host_limit=result.host_limit,
        suggestion=None if result.fits else _suggest(shape, job, planned),
        assumptions=(f"the base model's sizes from {found}",
                     f"the Neuron runtime's reserve: {fit_plan.RUNTIME_RESERVE:.0%} of the core (our margin)",
                     f"{fit_plan.HOST_PROCESS_GIB:g} GiB of host memory a process (our margin)"),
    )


def _suggest(shape: fit_plan.Shape, job: fit_plan.Job, planned) -> str:  # noqa: ANN001
    """The `--env` flags of the least change that fits (checkpointing, then the batch, then a shorter seq_len), or
    why none does: the base model's replica alone."""
    replica = planned(dataclasses.replace(job, seq_len=1, batch=1, checkpointing=True))
    if not replica.fits:
        return (f"the base model alone needs {gib(replica.device_total)} GiB of a NeuronCore's "
                f"{gib(replica.device_limit)} (hf-lora keeps a whole replica on every NeuronCore: it is data-parallel "
                "and does not shard the model): a smaller base model, or titan-llama3, which shards it (FSDP + TP)")
    seq_lens = [job.seq_len >> k for k in range(8) if job.seq_len >> k >= 128] or [job.seq_len]
    candidates = []
    for checkpointing, batch, seq_len in itertools.product(
            sorted({job.checkpointing, True}), sorted({job.batch, *(b for b in (1, 2, 4) if b < job.batch)}, reverse=True),
            seq_lens):
        trial = dataclasses.replace(job, checkpointing=checkpointing, batch=batch, seq_len=seq_len)
        if planned(trial).fits:
            flags = [f"--env {name}={value}" for name, value, was in (
                ("HF_LORA_GRADIENT_CHECKPOINTING", int(checkpointing), int(job.checkpointing)),
                ("HF_LORA_BATCH_SIZE", batch, job.batch), ("HF_LORA_SEQ_LEN", seq_len, job.seq_len)) if value != was]
            candidates.append(((seq_len != job.seq_len, len(flags), -seq_len, -batch), flags))
    if not candidates:
        return (f"no change of checkpointing, batch or seq_len (down to {seq_lens[-1]}) fits: a smaller base model, "
                "or titan-llama3, which shards it (FSDP + TP)")
    return "fits with " + " ".join(min(candidates)[1])


register(Recipe(
    name=NAME, summary="PEFT LoRA fine-tuning of a Llama-architecture model with transformers on TorchNeuron",
    tracks=("native",), job=training_job, data_prep=DATA_NAME, fit=fit,
))
register(Recipe(
    name=DATA_NAME, summary="hf-lora's data: the model and the tokenized dataset onto /fsx (hub or S3)",
    tracks=("native",), job=data_job, folder=FOLDER, image_from=NAME, cpu_only=True,
))
