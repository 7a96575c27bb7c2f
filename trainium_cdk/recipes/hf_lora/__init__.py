"""Recipe hf-lora: PEFT LoRA fine-tuning of a Llama-architecture causal LM with Hugging Face transformers on
TorchNeuron (the native track), data-parallel over every NeuronCore of every node; and hf-lora-data, its data
preparation (the model, its tokenizer and the tokenized dataset onto /fsx, a gated model's token from Secrets
Manager).

This module builds their jobs; the code the nodes run (train.py, prepare.py, hf_token.py, knobs.py) and the
Dockerfile are beside it, and both jobs run in the image `trn image push --recipe hf-lora` builds.
"""

from __future__ import annotations

from pathlib import Path

from trainium_cdk.app.config import TrainingJobSettings
from trainium_cdk.facts.names import (
    DIST_BACKEND_VARIABLE, HF_TOKEN_SERVICE_ACCOUNT, NEURON_DEVICE, SHARED_MOUNT, TORCH_DEVICE_VARIABLE,
)
from trainium_cdk.recipes import Recipe, RecipeContext, register
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


register(Recipe(
    name=NAME, summary="PEFT LoRA fine-tuning of a Llama-architecture model with transformers on TorchNeuron",
    tracks=("native",), job=training_job, data_prep=DATA_NAME,
))
register(Recipe(
    name=DATA_NAME, summary="hf-lora's data: the model and the tokenized dataset onto /fsx (hub or S3)",
    tracks=("native",), job=data_job, folder=FOLDER, image_from=NAME,
))
