"""The recipe's knobs: environment variables, each with its default, read by train.py and prepare.py.

A job sets them (`trn submit --job hf-lora --env HF_LORA_MODEL=...`); these defaults hold otherwise. This module
runs in the recipe's image, without trainium_cdk: it imports nothing but the standard library.
"""

from __future__ import annotations

import os

# What to fine-tune and on what: a Llama-architecture causal LM and a text dataset (hub ids, or local paths;
# the dataset also s3://bucket/prefix). Small defaults: SmolLM2-135M is a LlamaForCausalLM (Apache 2.0, not
# gated); Alpaca's "text" column holds each instruction and its answer as one text.
DEFAULTS = {
    "HF_LORA_MODEL": "HuggingFaceTB/SmolLM2-135M",
    "HF_LORA_DATASET": "tatsu-lab/alpaca",
    "HF_LORA_SPLIT": "train",
    "HF_LORA_TEXT_FIELD": "text",
    # Every sample the same length: Neuron compiles a graph per input shape (TorchNeuron best practices:
    # static shapes), so the texts are packed into blocks of this many tokens.
    "HF_LORA_SEQ_LEN": "1024",
    "HF_LORA_DATA_DIR": "",  # the job sets it: /fsx/datasets/hf-lora
    "HF_LORA_MAX_STEPS": "1000",
    "HF_LORA_BATCH_SIZE": "1",  # per process (per NeuronCore)
    "HF_LORA_LR": "2e-4",
    # Constant after warm-up, as QLoRA's fine-tuning runs (Dettmers et al. 2023): a run stopped at step k and
    # resumed follows the same learning rates as one that did not stop, whatever HF_LORA_MAX_STEPS says.
    "HF_LORA_SCHEDULER": "constant_with_warmup",
    "HF_LORA_WARMUP_STEPS": "10",
    "HF_LORA_RANK": "16",
    "HF_LORA_ALPHA": "32",
    "HF_LORA_DROPOUT": "0.05",
    "HF_LORA_TARGETS": "q_proj,k_proj,v_proj,o_proj",
    "HF_LORA_DTYPE": "bfloat16",
    # 1: each decoder block keeps only its input and recomputes the rest in the backward (transformers' gradient
    # checkpointing): a base model of 7-8B parameters fits a trn2 NeuronCore at seq_len 1024 only so (`trn fit`).
    "HF_LORA_GRADIENT_CHECKPOINTING": "0",
    # 1: each rank reports its first step's memory (what the forward saved for the backward, the base model's,
    # the adapters' and AdamW's bytes): the rehearsal's check of `trn fit`'s plan.
    "HF_LORA_REPORT_MEMORY": "0",
    "HF_LORA_SAVE_EVERY": "100",
    "HF_LORA_LOG_EVERY": "10",
    "HF_LORA_SEED": "0",
    # Where it runs (TorchNeuron: the `neuron` device, process group backend and torch.compile backend; an
    # empty compile backend trains in eager mode). The launch rehearsal substitutes these three (CPU, gloo).
    "TRN_TORCH_DEVICE": "neuron",
    "TRN_DIST_BACKEND": "neuron",
    "TRN_COMPILE_BACKEND": "",
    # The Secrets Manager secret holding a Hugging Face token, by name (gated models and datasets).
    "HF_TOKEN_SECRET": "",
}
# Precompile on the native track: the launcher's warm-up run of a few real steps sets this to their count
# (TorchNeuron has no graph extraction: NEURON_EXTRACT_GRAPHS_ONLY and neuron_parallel_compile are PyTorch/XLA's).
WARMUP_STEPS_ENV = "TRN_WARMUP_STEPS"
CHECKPOINT_ENV = "TRN_CHECKPOINT_DIR"
# What the data preparation leaves in HF_LORA_DATA_DIR: the packed token blocks and what made them.
TOKENIZED = "tokenized"
MANIFEST = "prepared.json"


def get(name: str) -> str:
    return os.environ.get(name) or DEFAULTS[name]


def number(name: str, kind: type = int):  # noqa: ANN201 (int or float)
    raw = get(name)
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw}: a number") from None


# What a yes/no knob takes (train.py here, `trn fit` in the CLI).
FLAG_VALUES = {"0": False, "false": False, "1": True, "true": True}


def flag(name: str, raw: str | None = None) -> bool:
    """A yes/no knob: its value in the environment, or ``raw``; SystemExit naming it otherwise."""
    value = (get(name) if raw is None else raw).strip().lower()
    if value not in FLAG_VALUES:
        raise SystemExit(f"{name}={value}: 0 or 1")
    return FLAG_VALUES[value]


def warmup_steps() -> int | None:
    """In the launcher's warm-up run (precompile), the steps to run; None in a real run."""
    raw = os.environ.get(WARMUP_STEPS_ENV, "").strip()
    return max(1, int(raw)) if raw else None
