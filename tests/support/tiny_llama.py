"""A tiny Llama model and the texts it was made for, on a stand-in /fsx: what the hf-lora recipe fine-tunes in
its CPU rehearsals (tests/unit/jobs/test_recipe_hf_lora.py, the README's recipe session), nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path

TEXTS = [f"note {i}: the quick brown fox number {i} jumps over the lazy dog {i % 7} times" for i in range(200)]
# Where they go, as /fsx paths (HF_LORA_MODEL and HF_LORA_DATASET of the runs).
MODEL = "/fsx/models/tiny-llama"
DATASET = "/fsx/sources/notes.jsonl"


def make_tiny_model(fsx: Path) -> Path:
    """A word-level tokenizer trained on TEXTS and a 2-layer Llama built from a config, saved as the hub has
    them: what HF_LORA_MODEL names."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(TEXTS, trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    folder = fsx / "models" / "tiny-llama"
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(
        vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
    )).save_pretrained(folder)
    return folder


def jsonl() -> str:
    return "".join(json.dumps({"text": t}) + "\n" for t in TEXTS)


def make_all(fsx: Path) -> None:
    """The model at MODEL and the texts at DATASET, under the folder that stands for /fsx."""
    make_tiny_model(fsx)
    texts = fsx / DATASET.removeprefix("/fsx/")
    texts.parent.mkdir(parents=True, exist_ok=True)
    texts.write_text(jsonl())
