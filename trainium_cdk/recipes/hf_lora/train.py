"""PEFT LoRA fine-tuning of a Llama-architecture causal LM on TorchNeuron, data-parallel over every NeuronCore.

The job `trn submit --job hf-lora` runs it under torchrun on each node (one process per NeuronCore); the
data preparation job (`--job hf-lora-data`, prepare.py) has put the model in the Hugging Face cache on /fsx and
the packed token blocks in ``HF_LORA_DATA_DIR``. Every knob is an environment variable (knobs.py).

How it runs on Neuron, as Neuron's TorchNeuron docs (Neuron 2.33, trn2/trn3) give it:

- the ``neuron`` device: "change the device placement from cuda to neuron" (torch/index, "What changes are
  needed?"); mixed precision with ``torch.autocast(device_type="neuron")`` (same page);
- one process per NeuronCore, ``init_process_group(backend="neuron")`` and DDP (torch/guides/torch-distributed,
  "How to use torch.distributed on Neuron"). LoRA trains a few million parameters beside a frozen base model, so
  every NeuronCore holds a replica and DDP all-reduces only the adapters' gradients; FSDP2 (``fully_shard``,
  same guide) is the way for a base model that a NeuronCore cannot hold, and is not built here: `trn fit --job
  hf-lora` (fit_plan.py) says which base models fit, and refuses the others with the reason;
- gradient checkpointing (``HF_LORA_GRADIENT_CHECKPOINTING=1``, transformers' own, non-reentrant): each decoder
  block keeps only its input for the backward, which an 8B base model needs on a trn2 NeuronCore;
- eager mode by default and ``torch.compile(backend="neuron")`` when ``TRN_COMPILE_BACKEND=neuron``: "Start
  with eager mode to validate correctness, then add torch.compile for performance" (torch/reference/
  best-practices-pytorch-neuron, "General principles");
- Hugging Face transformers and PEFT run natively on TorchNeuron, "no Neuron-specific compatibility layer is
  needed" (torch/reference/torchneuron-resources).

The launch rehearsal (`trn rehearse --job hf-lora`) runs this file on the CPU with ``TRN_TORCH_DEVICE=cpu``,
``TRN_DIST_BACKEND=gloo`` and the compile backend ``eager`` (trainium_cdk/rehearsal: the substitution table):
the CPU run of Neuron's own distributed tutorial changes the same two ("Change --device and --backend between
runs", torch/tutorials/tutorial-torch-distributed).

Checkpoints: every ``HF_LORA_SAVE_EVERY`` steps and at the end, rank 0 writes ``step-<n>/`` into
``TRN_CHECKPOINT_DIR`` (the launcher's /fsx/checkpoints/<job>): the adapter (``adapter/``, PEFT's format, which
``PeftModel.from_pretrained`` loads) and the optimizer and scheduler state. Every rank resumes from the newest.

Precompile (``TRN_PRECOMPILE=1``): in the launcher's warm-up run (``TRN_WARMUP_STEPS``, the native track's: TorchNeuron
has no graph extraction) it trains that many steps, and neither reads nor writes a checkpoint.

Rank 0 prints one JSON line per event, after ``HF-LORA ``: start, resumed_from, step (with its loss), checkpoint,
done; and with ``HF_LORA_REPORT_MEMORY=1``, memory after the first step (the base model's, the adapters' and AdamW's
bytes and what its forward saved for the backward: what `trn fit`'s plan is checked against).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import cast

import knobs
import torch
import torch.distributed as dist

PREFIX = "HF-LORA "
_STEP_DIR = re.compile(r"^step-(\d{8})$")
KEEP_CHECKPOINTS = 2
ADAPTER = "adapter"
STATE = "trainer_state.pt"
# A gradient step's norm is clipped to this, as the Neuron training tutorial's loop does.
MAX_GRAD_NORM = 1.0


def say(**record: object) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(PREFIX + json.dumps(record), flush=True)


def fail(message: str) -> None:
    print(f"hf-lora: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


# -- checkpoints ------------------------------------------------------------------------------------------


def newest_checkpoint(directory: Path | None) -> Path | None:
    """The finished checkpoint of the latest step (a half-written one has another name)."""
    if directory is None or not directory.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _STEP_DIR.match(p.name))]
    return max(found)[1] if found else None


def _on_cpu(value):  # noqa: ANN001, ANN202
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


def save_checkpoint(directory: Path, step: int, model, optimizer, scheduler, history: list) -> Path:  # noqa: ANN001
    """Write ``step-<n>/`` under a temporary name, then rename it: a rank killed mid-write leaves nothing that
    looks finished. The two newest stay."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    final = directory / f"step-{step:08d}"
    partial = directory / f".{final.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    (partial / ADAPTER).mkdir(parents=True)
    save_file(_on_cpu(get_peft_model_state_dict(model)), str(partial / ADAPTER / "adapter_model.safetensors"))
    model.peft_config["default"].save_pretrained(str(partial / ADAPTER))
    torch.save({"step": step, "optimizer": _on_cpu(optimizer.state_dict()), "scheduler": scheduler.state_dict(),
                "history": history}, partial / STATE)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    for old in sorted(p for p in directory.iterdir() if _STEP_DIR.match(p.name))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_adapter(path: Path, model) -> dict:  # noqa: ANN001
    """The adapter weights of checkpoint ``path`` into ``model``; its trainer state (optimizer, scheduler, step)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(path / ADAPTER / "adapter_model.safetensors")))
    return torch.load(path / STATE, map_location="cpu", weights_only=False)


# -- data ------------------------------------------------------------------------------------------------


def load_blocks(data_dir: Path, model_id: str):  # noqa: ANN201
    """The packed token blocks prepare.py wrote, checked against the model they were made for."""
    from datasets import load_from_disk

    manifest = data_dir / knobs.MANIFEST
    if not manifest.is_file():
        fail(f"no prepared data in {data_dir}: run the data preparation job first (trn submit --job hf-lora-data)")
    made = json.loads(manifest.read_text())
    if made["model"] != model_id:
        fail(f"the data in {data_dir} was tokenized for {made['model']}, not HF_LORA_MODEL={model_id}: run "
             "hf-lora-data with the same HF_LORA_MODEL")
    return load_from_disk(str(data_dir / knobs.TOKENIZED)).with_format("torch"), made


def batch_indices(blocks: int, step: int, *, world: int, rank: int, batch: int, seed: int) -> list[int]:
    """The blocks of ``rank`` at ``step``: each epoch a seeded permutation, cut into global batches of
    world x batch (the rest of an epoch left out). A function of the step alone, so a resumed run reads on
    from where the checkpoint's run was."""
    per_epoch = blocks // (world * batch)
    if per_epoch == 0:
        fail(f"{blocks} token blocks: fewer than one global batch ({world} processes x HF_LORA_BATCH_SIZE={batch})")
    epoch, index = divmod(step, per_epoch)
    order = torch.randperm(blocks, generator=torch.Generator().manual_seed(seed + epoch))
    start = (index * world + rank) * batch
    return order[start:start + batch].tolist()


class SavedTensors:
    """Counts what autograd saves for the backward while it is entered (each storage once, parameters left out):
    the activation memory of a step, measured (HF_LORA_REPORT_MEMORY; `trn fit`'s plan is checked against it)."""

    def __init__(self) -> None:
        self.storages: dict[int, torch.UntypedStorage] = {}

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        self.storages[id(storage)] = storage  # held until counted: no address is reused meanwhile
        return tensor

    def hooks(self):  # noqa: ANN201
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def count(self, model) -> int:  # noqa: ANN001
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        live = {s.data_ptr(): s.nbytes() for s in self.storages.values() if s.nbytes() and s.data_ptr() not in params}
        self.storages.clear()
        return sum(live.values())


def tensor_bytes(tensors) -> int:  # noqa: ANN001
    return sum(t.numel() * t.element_size() for t in tensors)


def memory_report(model, optimizer, saved: int) -> dict[str, int]:  # noqa: ANN001
    """One rank's bytes after its first step, as `trn fit` plans them."""
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim()]
    return {"base": tensor_bytes(p for p in model.parameters() if not p.requires_grad),
            "adapters": tensor_bytes(p for p in model.parameters() if p.requires_grad),
            "optimizer": tensor_bytes(state), "saved_activations": saved}


# -- training --------------------------------------------------------------------------------------------


def build_model(model_id: str, dtype: torch.dtype):  # noqa: ANN201
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype)
    base.config.use_cache = False  # training: no key/value cache
    if knobs.flag("HF_LORA_GRADIENT_CHECKPOINTING"):
        # Non-reentrant: the frozen embedding's output needs no gradient, which the reentrant variant requires.
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = LoraConfig(
        r=knobs.number("HF_LORA_RANK"), lora_alpha=knobs.number("HF_LORA_ALPHA"),
        lora_dropout=knobs.number("HF_LORA_DROPOUT", float),
        target_modules=[m.strip() for m in knobs.get("HF_LORA_TARGETS").split(",") if m.strip()],
        task_type="CAUSAL_LM",
    )
    # PEFT keeps the adapters in float32 beside a bfloat16 base (autocast_adapter_dtype, its default).
    return get_peft_model(base, lora)


def train() -> None:
    from transformers import get_scheduler

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    device = torch.device(knobs.get("TRN_TORCH_DEVICE"))
    if device.type == "neuron":
        import torch_neuronx  # noqa: F401  (registers the neuron device and process group backend: Neuron's guide)
    backend, compile_backend = knobs.get("TRN_DIST_BACKEND"), knobs.get("TRN_COMPILE_BACKEND")
    if world > 1:
        dist.init_process_group(backend=backend)
    seed = knobs.number("HF_LORA_SEED")
    torch.manual_seed(seed)
    model_id = knobs.get("HF_LORA_MODEL")
    if not knobs.get("HF_LORA_DATA_DIR"):
        fail("HF_LORA_DATA_DIR is not set (the job sets it)")
    blocks, made = load_blocks(Path(knobs.get("HF_LORA_DATA_DIR")), model_id)
    warming = knobs.warmup_steps()
    max_steps = warming or knobs.number("HF_LORA_MAX_STEPS")
    # The warm-up (precompile) fills the compile cache: no checkpoint is read or written.
    checkpoint_dir = os.environ.get(knobs.CHECKPOINT_ENV)
    checkpoints = Path(checkpoint_dir) if checkpoint_dir and not warming else None
    dtype = getattr(torch, knobs.get("HF_LORA_DTYPE"))
    model = build_model(model_id, dtype)
    trainable = [p for p in model.parameters() if p.requires_grad]
    history: list[dict] = []
    start = 0
    resume = newest_checkpoint(checkpoints)
    state = load_adapter(resume, model) if resume is not None else None
    model.to(device)
    optimizer = torch.optim.AdamW(trainable, lr=knobs.number("HF_LORA_LR", float), weight_decay=0.0)
    scheduler = get_scheduler(knobs.get("HF_LORA_SCHEDULER"), optimizer,
                              num_warmup_steps=knobs.number("HF_LORA_WARMUP_STEPS"), num_training_steps=max_steps)
    if state is not None:  # every rank loads the same files: the replicas start equal
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start, history = state["step"], list(state["history"])
        say(resumed_from=str(resume), step=start, loss=history[-1]["loss"] if history else None)
    runner: torch.nn.Module = model
    if world > 1:
        runner = torch.nn.parallel.DistributedDataParallel(model)
    if compile_backend:
        # Of a Module, torch.compile returns an OptimizedModule (a Module); its annotation says only "a callable".
        runner = cast(torch.nn.Module, torch.compile(runner, backend=compile_backend))
    batch, log_every = knobs.number("HF_LORA_BATCH_SIZE"), knobs.number("HF_LORA_LOG_EVERY")
    save_every = knobs.number("HF_LORA_SAVE_EVERY")
    say(start={"model": model_id, "blocks": len(blocks), "seq_len": made["seq_len"], "world": world,
               "device": device.type, "backend": backend if world > 1 else None, "compile": compile_backend or None,
               "trainable_parameters": sum(p.numel() for p in trainable), "first_step": start + 1,
               "max_steps": max_steps, "checkpoints": str(checkpoints) if checkpoints else None})
    autocast = dtype in (torch.bfloat16, torch.float16)
    runner.train()
    recorder = SavedTensors() if knobs.flag("HF_LORA_REPORT_MEMORY") else None
    # Throughput over the steps since the last log line: every rank's batch of seq_len tokens a step, per node.
    nodes = max(1, world // int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    since, logged = time.perf_counter(), start
    for step in range(start, max_steps):
        # Dropout's random numbers, too, a function of the step (and rank): a resumed run draws what the run it
        # continues would have drawn, so its losses are that run's.
        torch.manual_seed(seed + step * world + rank)
        ids = blocks[batch_indices(len(blocks), step, world=world, rank=rank, batch=batch, seed=seed)]["input_ids"]
        ids = ids.to(device)
        with torch.autocast(device_type=device.type, dtype=dtype, enabled=autocast), \
                (recorder.hooks() if recorder is not None else contextlib.nullcontext()):
            loss = runner(input_ids=ids, labels=ids).loss
        measured = recorder.count(model) if recorder is not None else 0
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        if recorder is not None:  # the first step's: every step of a run saves the same (fixed shapes)
            say(memory=memory_report(model, optimizer, measured))
            recorder = None
        if done % log_every == 0 or done == max_steps:
            mean = loss.detach().float()
            if world > 1:
                dist.all_reduce(mean)
                mean = mean / world
            history.append({"step": done, "loss": round(float(mean.cpu()), 6)})
            tokens = (done - logged) * world * ids.shape[0] * ids.shape[1] / (time.perf_counter() - since) / nodes
            say(step=done, loss=history[-1]["loss"], lr=scheduler.get_last_lr()[0],
                tokens_per_s_per_node=round(tokens, 1), mfu=None)
            since, logged = time.perf_counter(), done
        if checkpoints is not None and rank == 0 and (done % save_every == 0 or done == max_steps):
            saved = save_checkpoint(checkpoints, done, model, optimizer, scheduler, history)
            say(checkpoint=str(saved), step=done)
    if warming:
        say(warm_up={"steps": max_steps - start})
    elif rank == 0:
        newest = newest_checkpoint(checkpoints)
        say(done={"step": max_steps, "adapter": str(newest / ADAPTER) if newest else None})
    if dist.is_initialized():
        # DDP's reducer holds the process group in a reference cycle: free it, then leave together.
        del runner
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    train()
