"""A tokenizer and texts for the titan-llama3 recipe's rehearsals, made here (nothing downloaded): a word-level
``tokenizer.json`` (Hugging Face tokenizers' format, the one Llama 3 ships) and a ``.jsonl`` of texts, as a team
would put them on /fsx (tests/unit/jobs/test_recipe_titan_llama3.py, the README session's exemption)."""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ("the model reads a token stream from the file system and learns which word comes next while every node "
         "keeps a shard of the weights and the optimizer state").split()
TEXTS = 600


def make_tokenizer_and_texts(folder: Path) -> tuple[Path, Path]:
    """``folder/tokenizer/tokenizer.json`` and ``folder/texts.jsonl``; their paths."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(5 + i % 11)) for i in range(TEXTS)]
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "<|end_of_text|>"]))
    (folder / "tokenizer").mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer" / "tokenizer.json"))
    dataset = folder / "texts.jsonl"
    dataset.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return folder / "tokenizer", dataset
