"""The recipe's knobs and model sizes, read by train.py and prepare.py in the recipe's image (standard library only:
no trainium_cdk there).

The training job's settings are a TOML job config in TorchTitan's sections ([job], [model], [training],
[parallelism], [checkpoint], [compile]) that `trn submit --job titan-llama3` generates for the compute group (its
parallel sizes from the group's NeuronCores and nodes) and hands to the job as ``TITAN_JOB_CONFIG``. Any key is
overridden by an environment variable ``TITAN_<SECTION>_<KEY>`` (``trn submit --job titan-llama3 --env
TITAN_TRAINING_STEPS=100``), as TorchTitan's own ``--training.steps 100`` overrides its TOML.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Mapping
from typing import Any, NoReturn

CONFIG_ENV = "TITAN_JOB_CONFIG"
OVERRIDE_PREFIX = "TITAN_"
# What the data preparation reads (TITAN_DATA_*): a tokenizer (a directory or hub id with tokenizer.json, or
# s3://bucket/prefix holding one) and a text dataset (hub id, s3://bucket/prefix of .txt/.jsonl objects, a file or a
# directory of them); the text of a .jsonl record or a hub row is its TITAN_DATA_TEXT_FIELD.
DATA_DEFAULTS = {
    "TITAN_DATA_TOKENIZER": "meta-llama/Llama-3.1-8B",  # gated: hugging_face.token_secret names the token
    "TITAN_DATA_DATASET": "allenai/c4",
    "TITAN_DATA_SUBSET": "en",
    "TITAN_DATA_SPLIT": "train",
    "TITAN_DATA_TEXT_FIELD": "text",
    "TITAN_DATA_MAX_TOKENS": "100000000",  # stop after this many tokens (a hub dataset streams)
    "TITAN_DATA_DIR": "",  # the job sets it: /fsx/datasets/titan-llama3
    "HF_TOKEN_SECRET": "",
}
# Where it runs (TorchNeuron's `neuron` device, process group backend and torch.compile backend). The launch
# rehearsal substitutes these three (cpu, gloo, eager): trainium_cdk/rehearsal's table.
DEVICE_DEFAULTS = {"TRN_TORCH_DEVICE": "neuron", "TRN_DIST_BACKEND": "neuron", "TRN_COMPILE_BACKEND": ""}
# Precompile on the native track: the launcher's warm-up run of a few real steps sets this to their count
# (TorchNeuron has no graph extraction: NEURON_EXTRACT_GRAPHS_ONLY and neuron_parallel_compile are PyTorch/XLA's).
WARMUP_STEPS_ENV = "TRN_WARMUP_STEPS"
CHECKPOINT_ENV = "TRN_CHECKPOINT_DIR"
# What the data preparation leaves in TITAN_DATA_DIR: the tokenizer, the token stream (little-endian uint32),
# and what made them.
TOKENIZER_DIR = "tokenizer"
TOKENS = "tokens.bin"
MANIFEST = "prepared.json"

# Llama 3 sizes as TorchTitan's llama3 model registry gives them (torchtitan/models/llama3/__init__.py: debugmodel,
# 1B, 8B, 70B); "tiny" is the rehearsal's. ffn_multiple_of and ffn_multiplier make the hidden size as Llama does.
FLAVORS: dict[str, dict[str, Any]] = {
    "tiny": {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_multiple_of": 64, "ffn_multiplier": None},
    "debugmodel": {"dim": 256, "n_layers": 6, "n_heads": 16, "n_kv_heads": 16, "ffn_multiple_of": 256,
                   "ffn_multiplier": None},
    "1B": {"dim": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "ffn_multiple_of": 1024,
           "ffn_multiplier": 1.5},
    "8B": {"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "ffn_multiple_of": 1024,
           "ffn_multiplier": 1.3},
    "70B": {"dim": 8192, "n_layers": 80, "n_heads": 64, "n_kv_heads": 8, "ffn_multiple_of": 4096,
            "ffn_multiplier": 1.3},
}


# Rank 0's reports: one JSON line per event after this prefix (train.py's docstring lists them).
PREFIX = "TITAN "


def say(**record: object) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(PREFIX + json.dumps(record), flush=True)


def fail(message: str) -> NoReturn:
    print(f"titan-llama3: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def device(name: str) -> str:
    return os.environ.get(name) or DEVICE_DEFAULTS[name]


def data(name: str) -> str:
    return os.environ.get(name) or DATA_DEFAULTS[name]


def _typed(raw: str, like: object, name: str) -> object:
    try:
        if isinstance(like, bool):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1")
        if isinstance(like, int):
            return int(raw)
        if isinstance(like, float):
            return float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw}: a {type(like).__name__}") from None
    return raw


def job_config(text: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The job's TOML config, each ``TITAN_<SECTION>_<KEY>`` of ``env`` (the process's environment) put over its
    key."""
    env = os.environ if env is None else env
    text = text if text is not None else env.get(CONFIG_ENV, "")
    if not text.strip():
        raise SystemExit(f"{CONFIG_ENV} is not set: the job sets it (trn submit --job titan-llama3)")
    config = tomllib.loads(text)
    for section, values in config.items():
        for key, value in values.items():
            name = override_name(section, key)
            if name in env:
                values[key] = _typed(env[name], value, name)
    return config


def override_name(section: str, key: str) -> str:
    """The environment variable that overrides ``[section] key``."""
    return f"{OVERRIDE_PREFIX}{section}_{key}".upper()


def warmup_steps() -> int | None:
    """In the launcher's warm-up run (precompile), the steps to run; None in a real run."""
    raw = os.environ.get(WARMUP_STEPS_ENV, "").strip()
    return max(1, int(raw)) if raw else None
