"""Data preparation of the hf-lora recipe: the model and its tokenizer into the Hugging Face cache on /fsx, and
the dataset tokenized and packed into blocks of ``HF_LORA_SEQ_LEN`` tokens in ``HF_LORA_DATA_DIR``.

The job `trn submit --job hf-lora-data` runs it once, on one process of one node: the training job's nodes then
read everything from /fsx and never call the hub (they run with ``HF_HUB_OFFLINE=1``). Sources:

- ``HF_LORA_MODEL``: a hub id (downloaded into ``HF_HOME``, /fsx/huggingface) or a directory;
- ``HF_LORA_DATASET``: a hub id (split ``HF_LORA_SPLIT``), ``s3://bucket/prefix`` (its .json, .jsonl, .csv,
  .parquet and .txt objects, copied to ``HF_LORA_DATA_DIR/raw``), a file of those kinds, or a directory that
  ``datasets`` saved; the text is column ``HF_LORA_TEXT_FIELD`` (a .txt file's lines: ``text``);
- a gated model or dataset: ``HF_TOKEN_SECRET`` names the Secrets Manager secret with the token (hf_token.py).

Prints one JSON line after ``HF-LORA ``: what it prepared.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import knobs

PREFIX = "HF-LORA "
BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
# What a model download needs: its config, weights and tokenizer (not other formats' copies of the weights).
MODEL_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]


def say(**record: object) -> None:
    print(PREFIX + json.dumps(record), flush=True)


def fail(message: str) -> None:
    print(f"hf-lora-data: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def token() -> str | None:
    name = knobs.get("HF_TOKEN_SECRET")
    if not name:
        return None
    from hf_token import token_from_secret

    value = token_from_secret(name)
    say(token={"secret": name, "characters": len(value)})
    return value


def model_source(model_id: str, hub_token: str | None) -> str:
    """A local directory as it is; a hub id downloaded into the cache (HF_HOME), where training finds it offline."""
    if Path(model_id).is_dir():
        return model_id
    from huggingface_hub import snapshot_download

    return str(snapshot_download(model_id, token=hub_token, allow_patterns=MODEL_FILES))


def _files_from_s3(uri: str, into: Path) -> list[str]:
    import boto3

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3")
    files = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            key = item["Key"]
            if Path(key).suffix in BUILDERS:
                target = into / key[len(prefix):].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, key, str(target))
                files.append(str(target))
    if not files:
        fail(f"{uri}: no {', '.join(sorted(BUILDERS))} objects under that prefix")
    return files


def _from_files(files: list[str]):  # noqa: ANN202
    from datasets import load_dataset

    kinds = {BUILDERS.get(Path(f).suffix) for f in files}
    if len(kinds) != 1 or None in kinds:
        fail(f"files of one kind ({', '.join(sorted(BUILDERS))}), not {sorted(Path(f).suffix for f in files)}")
    return load_dataset(kinds.pop(), data_files=sorted(files), split="train")


def load_texts(spec: str, split: str, hub_token: str | None, data_dir: Path):  # noqa: ANN201
    from datasets import DatasetDict, load_dataset, load_from_disk

    if spec.startswith("s3://"):
        raw = data_dir / "raw"
        shutil.rmtree(raw, ignore_errors=True)
        return _from_files(_files_from_s3(spec, raw))
    path = Path(spec)
    if path.is_file():
        return _from_files([str(path)])
    if path.is_dir() and any((path / f).exists() for f in ("dataset_info.json", "dataset_dict.json", "state.json")):
        saved = load_from_disk(str(path))
        return saved[split] if isinstance(saved, DatasetDict) else saved
    return load_dataset(spec, split=split, token=hub_token)


def pack(texts, tokenizer, field: str, seq_len: int):  # noqa: ANN001, ANN201
    """Each text's tokens and an end-of-text token, concatenated and cut into blocks of ``seq_len`` (the rest of
    the last block left out): every sample the same shape."""
    if field not in texts.column_names:
        fail(f"HF_LORA_TEXT_FIELD={field}: the dataset's columns are {', '.join(texts.column_names)}")
    end = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def tokenize(rows: dict) -> dict:
        return {"ids": [ids + end for ids in tokenizer(rows[field], add_special_tokens=False)["input_ids"]]}

    def blocks(rows: dict) -> dict:
        flat = [t for ids in rows["ids"] for t in ids]
        usable = len(flat) - len(flat) % seq_len
        return {"input_ids": [flat[i:i + seq_len] for i in range(0, usable, seq_len)]}

    tokenized = texts.map(tokenize, batched=True, remove_columns=texts.column_names)
    return tokenized.map(blocks, batched=True, batch_size=1000, remove_columns=["ids"])


def main() -> None:
    if int(os.environ.get("RANK", "0")) != 0:
        return  # one process does the work; a node's others have nothing to do
    if not knobs.get("HF_LORA_DATA_DIR"):
        fail("HF_LORA_DATA_DIR is not set (the job sets it)")
    data_dir = Path(knobs.get("HF_LORA_DATA_DIR"))
    data_dir.mkdir(parents=True, exist_ok=True)
    model_id, spec = knobs.get("HF_LORA_MODEL"), knobs.get("HF_LORA_DATASET")
    seq_len = knobs.number("HF_LORA_SEQ_LEN")
    hub_token = token()
    source = model_source(model_id, hub_token)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, token=hub_token)
    texts = load_texts(spec, knobs.get("HF_LORA_SPLIT"), hub_token, data_dir)
    packed = pack(texts, tokenizer, knobs.get("HF_LORA_TEXT_FIELD"), seq_len)
    if len(packed) == 0:
        fail(f"{spec}: fewer tokens than one block of HF_LORA_SEQ_LEN={seq_len}")
    # Written beside, then renamed: a training job never reads a half-written dataset.
    final, partial = data_dir / knobs.TOKENIZED, data_dir / f".{knobs.TOKENIZED}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    packed.save_to_disk(str(partial))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    made = {"model": model_id, "dataset": spec, "split": knobs.get("HF_LORA_SPLIT"), "seq_len": seq_len,
            "texts": len(texts), "blocks": len(packed), "tokens": len(packed) * seq_len}
    (data_dir / knobs.MANIFEST).write_text(json.dumps(made, indent=2) + "\n")
    say(prepared={**made, "data_dir": str(data_dir), "model_files": source})


if __name__ == "__main__":
    main()
