"""titan-llama3's checkpoints: sharded DCP checkpoints of the model and optimizer on /fsx (every rank writes its
shards; a step's folder renamed into place when all are done), the newest resumed; their copy to S3 off the
training's path (a thread while training goes on); a start from Hugging Face weights and an export to them
(hf_format.py: safetensors and config.json that transformers' LlamaForCausalLM loads).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import hf_format
import knobs
import torch
import torch.distributed as dist

_STEP_DIR = re.compile(r"^step-(\d{8})$")
TRAINER_STATE = "trainer.json"
HF_WEIGHTS = "model.safetensors"


def newest_checkpoint(directory: Path | None) -> Path | None:
    if directory is None or not directory.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _STEP_DIR.match(p.name))]
    return max(found)[1] if found else None


def save(directory: Path, step: int, model, optimizer, record: dict, *, keep: int) -> Path:  # noqa: ANN001
    """Every rank writes its shards into ``.step-<n>.partial``; rank 0 renames it once all are done: a job killed
    mid-save leaves nothing that looks finished."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    final = directory / f"step-{step:08d}"
    partial = directory / f".{final.name}.partial"
    if dist.get_rank() == 0:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    dist.barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(partial))
    dist.barrier()
    if dist.get_rank() == 0:
        (partial / TRAINER_STATE).write_text(json.dumps({**record, "step": step}) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(partial, final)
        for old in sorted(p for p in directory.iterdir() if _STEP_DIR.match(p.name))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def load(path: Path, model, optimizer, *, model_record: dict) -> dict:  # noqa: ANN001
    """Restore the shards of ``path``; a checkpoint of another model (flavor or vocabulary) stops the job in one line
    (DCP's own error is a size mismatch deep in its planner)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    record = json.loads((path / TRAINER_STATE).read_text())
    saved = record.get("model", model_record)
    if saved != model_record:
        knobs.fail(f"{path} holds {saved}, this job trains {model_record}: give it another job name (its checkpoint "
                   "directory) or [checkpoint] enable = false")
    model_state, optim_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return record


def export_to_s3(folder: Path, uri: str, *, client=None) -> int:  # noqa: ANN001 (a boto3 S3 client)
    """Copy a finished checkpoint folder to ``s3://bucket/prefix/<folder name>/``; the number of files."""
    import boto3

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    s3 = client or boto3.client("s3")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        key = "/".join(part for part in (prefix.strip("/"), folder.name, path.relative_to(folder).as_posix()) if part)
        s3.upload_file(str(path), bucket, key)
    return len(files)


class BackgroundExport:
    """The copy of each finished checkpoint to S3 on a thread of rank 0 while training goes on; the next save (whose
    pruning may delete the folder) and the job's end wait for the copy before."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._thread: threading.Thread | None = None
        self._done: dict[str, Any] = {}

    def start(self, folder: Path) -> None:
        self.wait()

        def copy() -> None:
            try:
                self._done = {"to": f"{self.uri.rstrip('/')}/{folder.name}/", "files": export_to_s3(folder, self.uri)}
            except Exception as error:  # noqa: BLE001 - reported where the job waits, not lost on the thread
                self._done = {"to": f"{self.uri.rstrip('/')}/{folder.name}/", "error": f"{type(error).__name__}: {error}"}

        self._thread = threading.Thread(target=copy, name=f"export-{folder.name}", daemon=True)
        self._thread.start()

    def wait(self) -> dict[str, Any] | None:
        """Wait for the copy in flight; what it did (None: none was)."""
        if self._thread is None:
            return None
        self._thread.join()
        self._thread = None
        done, self._done = self._done, {}
        if "error" in done:
            knobs.fail(f"the copy of a checkpoint to {done['to']} failed: {done['error']}")
        return done


# -- Hugging Face -----------------------------------------------------------------------------------------------


def _hf_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        knobs.fail(f"{folder}: no *.safetensors (a Hugging Face checkpoint: config.json and its safetensors files)")
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        tensors.update(load_file(str(path)))
    return tensors


def load_hf(folder: Path, model, size: dict[str, Any], vocab: int) -> None:  # noqa: ANN001
    """Start from a Hugging Face Llama 3 checkpoint: every rank checks its config.json against the job's model; rank 0
    reads the weights (the whole model in host memory, once a job) and every rank receives its shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    config = folder / hf_format.CONFIG
    if not config.is_file():
        knobs.fail(f"[checkpoint] initial_load_path={folder}: no {hf_format.CONFIG} there")
    wrong = hf_format.mismatch(json.loads(config.read_text()), size, vocab)
    if wrong:
        knobs.fail(f"[checkpoint] initial_load_path={folder} is another model: {wrong}")
    names = list(get_model_state_dict(model))
    full: dict[str, torch.Tensor] = {}
    if dist.get_rank() == 0:
        try:
            full = hf_format.from_hf(_hf_tensors(folder), names, size)
        except KeyError as error:
            knobs.fail(f"[checkpoint] initial_load_path={folder}: {error.args[0]}")
        full = {name: tensor.float() for name, tensor in full.items()}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def export_hf(folder: Path, model, size: dict[str, Any], vocab: int, *, seq_len: int, dtype: str,  # noqa: ANN001
              eos: int | None, tokenizer: Path | None) -> Path:
    """The trained model as a Hugging Face checkpoint in ``folder``: rank 0 gathers the whole model (in host memory)
    and writes model.safetensors and config.json, and the data job's tokenizer beside them."""
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        partial = folder.with_name(f".{folder.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        save_file(hf_format.to_hf(state, size, getattr(torch, dtype)), str(partial / HF_WEIGHTS),
                  metadata={"format": "pt"})
        made = hf_format.config(size, vocab, seq_len=seq_len, dtype=dtype, eos=eos)
        (partial / hf_format.CONFIG).write_text(json.dumps(made, indent=2) + "\n")
        if tokenizer is not None and tokenizer.is_dir():
            for path in tokenizer.iterdir():
                if path.is_file():
                    shutil.copy2(path, partial / path.name)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)
    dist.barrier()
    return folder
