"""Data preparation of the titan-llama3 recipe: the tokenizer and the dataset's texts, tokenized into one stream of
token ids on /fsx (``TITAN_DATA_DIR``: ``tokenizer/``, ``tokens.bin`` as little-endian uint32, ``prepared.json``).

The job `trn submit --job titan-llama3-data` runs it once, on one process of one node; the training job's nodes
then read /fsx only. Sources (knobs.DATA_DEFAULTS):

- ``TITAN_DATA_TOKENIZER``: a directory or file with ``tokenizer.json`` (Hugging Face ``tokenizers``' format, as
  Llama 3 ships it), ``s3://bucket/prefix`` holding one, or a hub id (gated: ``HF_TOKEN_SECRET`` names the Secrets
  Manager secret with the token; the hf-lora recipe's hf_token.py reads it);
- ``TITAN_DATA_DATASET``: a ``.txt`` (a text a line) or ``.jsonl`` file (``TITAN_DATA_TEXT_FIELD`` of each
  record), a directory or ``s3://bucket/prefix`` of them, or a hub id (``TITAN_DATA_SUBSET``, split
  ``TITAN_DATA_SPLIT``, streamed) up to ``TITAN_DATA_MAX_TOKENS`` tokens.

Prints one JSON line after ``TITAN ``: what it prepared.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import knobs

PREFIX = "TITAN "
TEXT_SUFFIXES = (".txt", ".jsonl")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# The end-of-text token between documents, by its name in the tokenizers Llama 3 and others ship.
END_TOKENS = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>")
# hf_token.py has one home, the hf-lora recipe's folder; the image copies it beside this folder (Dockerfile).
sys.path.append(str(Path(__file__).resolve().parent.parent / "hf_lora"))


def say(**record: object) -> None:
    print(PREFIX + json.dumps(record), flush=True)


def fail(message: str) -> NoReturn:
    print(f"titan-llama3-data: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def token() -> str | None:
    name = knobs.data("HF_TOKEN_SECRET")
    if not name:
        return None
    from hf_token import token_from_secret

    value = token_from_secret(name)
    say(token={"secret": name, "characters": len(value)})
    return value


def _s3_objects(uri: str, into: Path, suffixes: tuple[str, ...]) -> list[Path]:
    import boto3

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            key = item["Key"]
            if key.endswith(suffixes):
                target = into / key[len(prefix):].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, key, str(target))
                found.append(target)
    if not found:
        fail(f"{uri}: no {', '.join(suffixes)} objects under that prefix")
    return sorted(found)


def fetch_tokenizer(spec: str, into: Path, hub_token: str | None) -> Path:
    """The tokenizer's files copied into ``into`` (the training job's copy, beside the tokens)."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    path = Path(spec)
    if spec.startswith("s3://"):
        _s3_objects(spec, into, TOKENIZER_FILES)
    elif path.is_file():
        shutil.copy(path, into / "tokenizer.json")
    elif path.is_dir():
        for name in TOKENIZER_FILES:
            if (path / name).is_file():
                shutil.copy(path / name, into / name)
    else:
        from huggingface_hub import hf_hub_download

        for name in TOKENIZER_FILES[:2]:
            shutil.copy(hf_hub_download(spec, name, token=hub_token), into / name)
    for found in into.rglob("tokenizer.json"):
        return found
    fail(f"TITAN_DATA_TOKENIZER={spec}: no tokenizer.json there")


def texts(spec: str, raw: Path, hub_token: str | None) -> Iterator[str]:
    field = knobs.data("TITAN_DATA_TEXT_FIELD")
    path = Path(spec)
    if spec.startswith("s3://"):
        shutil.rmtree(raw, ignore_errors=True)
        files = _s3_objects(spec, raw, TEXT_SUFFIXES)
    elif path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES)
        if not files:
            fail(f"{spec}: no {', '.join(TEXT_SUFFIXES)} files")
    else:
        from datasets import load_dataset

        rows = load_dataset(spec, knobs.data("TITAN_DATA_SUBSET") or None, split=knobs.data("TITAN_DATA_SPLIT"),
                            streaming=True, token=hub_token)
        yield from (row[field] for row in rows)
        return
    for file in files:
        with file.open(encoding="utf-8") as lines:
            for line in lines:
                if file.suffix == ".jsonl":
                    record = json.loads(line) if line.strip() else None
                    if record is not None:
                        yield record[field]
                elif line.strip():
                    yield line.rstrip("\n")


def main() -> None:
    if int(os.environ.get("RANK", "0")) != 0:
        return  # one process does the work
    if not knobs.data("TITAN_DATA_DIR"):
        fail("TITAN_DATA_DIR is not set (the job sets it)")
    import numpy as np
    from tokenizers import Tokenizer

    data_dir = Path(knobs.data("TITAN_DATA_DIR"))
    data_dir.mkdir(parents=True, exist_ok=True)
    hub_token = token()
    tokenizer_spec, dataset = knobs.data("TITAN_DATA_TOKENIZER"), knobs.data("TITAN_DATA_DATASET")
    tokenizer_file = fetch_tokenizer(tokenizer_spec, data_dir / knobs.TOKENIZER_DIR, hub_token)
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    end = next((tokenizer.token_to_id(t) for t in END_TOKENS if tokenizer.token_to_id(t) is not None), None)
    limit = int(knobs.data("TITAN_DATA_MAX_TOKENS"))
    # Written beside, then renamed: a training job never reads a half-written stream.
    partial = data_dir / f".{knobs.TOKENS}.partial"
    count = documents = 0
    with partial.open("wb") as out:
        for text in texts(dataset, data_dir / "raw", hub_token):
            ids = tokenizer.encode(text, add_special_tokens=False).ids + ([end] if end is not None else [])
            ids = ids[:limit - count]
            np.asarray(ids, dtype="<u4").tofile(out)
            count, documents = count + len(ids), documents + 1
            if count >= limit:
                break
    if count == 0:
        fail(f"{dataset}: no text")
    os.replace(partial, data_dir / knobs.TOKENS)
    made = {"tokenizer": tokenizer_spec, "dataset": dataset, "documents": documents, "tokens": count,
            "vocab_size": tokenizer.get_vocab_size(), "end_of_text": end}
    (data_dir / knobs.MANIFEST).write_text(json.dumps(made, indent=2) + "\n")
    say(prepared={**made, "data_dir": str(data_dir)})


if __name__ == "__main__":
    main()
