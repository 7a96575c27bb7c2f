"""Llama 3 pretraining with TorchTitan's Llama 3 model on TorchNeuron: FSDP2 across nodes, tensor and sequence
parallel within a node, bf16 compute, activation checkpointing, sharded checkpoints with torch.distributed.checkpoint
(DCP) on /fsx, resumed from the newest.

`trn submit --job titan-llama3` runs it under torchrun on each node (one process per NeuronCore), with the TOML job
config generated for the compute group in ``TITAN_JOB_CONFIG`` (knobs.py); `--job titan-llama3-data` (prepare.py)
put the tokenizer and the token stream in ``[training] dataset_path`` first. `trn fit --job titan-llama3` checks
first that a rank's share fits a NeuronCore (fit_plan.py: the same layout, computed).

What it takes from TorchTitan and what from torch (the model code is TorchTitan's; the loop is this file's):

- the model: ``torchtitan.models.llama3`` at the sizes of its model registry (knobs.FLAVORS), with
  ``ScaledDotProductAttention`` as the inner attention (causal, no document masks): TorchTitan 0.3's FlexAttention
  has no backward on the CPU, and SDPA is an operator TorchNeuron runs;
- fit by construction: every rank builds the model on the meta device (no memory), shards it, and only then gives
  its own shards memory on the device and initializes them (DTensor's seeded generator: every shard a slice of one
  model). No rank ever holds the whole model: at 8B that was 32 GB of fp32 per rank, 64 ranks to a trn2 node;
- the parallelism: torch's own ``fully_shard`` (FSDP2) over ``[parallelism] data_parallel_shard_degree`` with a
  MixedPrecisionPolicy (``[training] mixed_precision_param`` bf16, ``mixed_precision_reduce`` fp32), and
  ``parallelize_module`` over ``tensor_parallel_degree``: Megatron's split of attention and MLP, the embedding and
  the output layer split by vocabulary with the loss computed on the shards (``loss_parallel``), sequence parallel
  norms (TorchTitan's Llama 3 plan), on a 2-D DeviceMesh of the ``neuron`` device: the parallelism Neuron's
  TorchNeuron guide lists (FSDP2, DTensor). ``[activation_checkpoint] mode``: ``selective`` recomputes every
  ``selective_ac_option``-th block, ``full`` every block, ``none`` none;
- checkpoints: ``torch.distributed.checkpoint`` with ``get_state_dict``/``set_state_dict`` (every rank writes its
  shards), a step's folder written under a temporary name and renamed when every rank is done; the optimizer state
  and the step with it; optionally copied to ``[checkpoint] export_s3`` after each save.

The launch rehearsal (`trn rehearse --job titan-llama3`) runs this file on the CPU: ``TRN_TORCH_DEVICE=cpu``,
``TRN_DIST_BACKEND=gloo``, ``TRN_COMPILE_BACKEND=eager`` (trainium_cdk/rehearsal's substitution table).

Rank 0 prints one JSON line per event after ``TITAN ``: built (each rank's peak host memory and parameter bytes),
resumed_from, start, memory (each rank's shard bytes after the first step; with ``[metrics] report_memory``, what
its forward saved for the backward), step (loss, seconds, tokens per second per node, MFU against ``[metrics]
peak_bf16_tflops_per_node``), checkpoint, export, done.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import fit_plan
import knobs
import torch
from sharding import checkpointed_blocks, clip_grad_norm, materialize, parallelize
import torch.distributed as dist

PREFIX = "TITAN "
_STEP_DIR = re.compile(r"^step-(\d{8})$")
TRAINER_STATE = "trainer.json"


def say(**record: object) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(PREFIX + json.dumps(record), flush=True)


def fail(message: str) -> NoReturn:
    print(f"titan-llama3: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


# -- sizes ------------------------------------------------------------------------------------------------


# -- model ------------------------------------------------------------------------------------------------


def build_model(flavor: str, vocab_size: int, seq_len: int) -> torch.nn.Module:
    """TorchTitan's Llama 3 at ``flavor``'s sizes: through the model API of TorchTitan 0.3 (``Llama3Model.Config``,
    the CPU rehearsal's) or of 0.2 (``TransformerModelArgs``, the 0.2 line TorchTitan Neuron 0.2.2 is numbered
    after)."""
    if flavor not in knobs.FLAVORS:
        fail(f"[model] flavor={flavor}: one of {', '.join(knobs.FLAVORS)}")
    size = knobs.FLAVORS[flavor]
    try:
        from torchtitan.models.llama3 import Llama3Model  # noqa: F401  (0.3)
    except ImportError:
        return _build_model_02(size, vocab_size, seq_len)
    return _build_model_03(size, vocab_size, seq_len)


def _build_model_03(size: dict[str, Any], vocab_size: int, seq_len: int) -> torch.nn.Module:
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import (
        _EMBEDDING_INIT,
        _NORM_INIT,
        ComplexRoPE,
        Embedding,
        Linear,
        Llama3Model,
        RMSNorm,
        _build_llama3_layers,
        _output_linear_init,
        compute_ffn_hidden_dim,
    )

    dim, heads = size["dim"], size["n_heads"]
    # Separate wq/wk/wv (fuse_qkv=False): tensor parallel splits each by heads.
    layers = _build_llama3_layers(
        fuse_qkv=False, n_layers=size["n_layers"], dim=dim, n_heads=heads, n_kv_heads=size["n_kv_heads"],
        hidden_dim=compute_ffn_hidden_dim(dim, multiple_of=size["ffn_multiple_of"],
                                          ffn_dim_multiplier=size["ffn_multiplier"]),
        rope=ComplexRoPE.Config(dim=dim // heads, max_seq_len=seq_len, theta=500000, scaling="llama"),
        attn_backend="flex",
    )
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    config = Llama3Model.Config(
        dim=dim, vocab_size=vocab_size,
        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=dim, param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab_size, param_init=_output_linear_init(dim)),
        layers=layers,
    )
    return config.build()  # initialized where its shards are: materialize()


def _build_model_02(size: dict[str, Any], vocab_size: int, seq_len: int) -> torch.nn.Module:
    # Not run by the CPU rehearsal (it has TorchTitan 0.3): torchtitan 0.2.0's models/llama3/model/{args,model}.py.
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer

    args = TransformerModelArgs(
        dim=size["dim"], n_layers=size["n_layers"], n_heads=size["n_heads"], n_kv_heads=size["n_kv_heads"],
        vocab_size=vocab_size, multiple_of=size["ffn_multiple_of"], ffn_dim_multiplier=size["ffn_multiplier"],
        rope_theta=500000, max_seq_len=seq_len,
    )
    return Transformer(args)  # initialized where its shards are: materialize()


# -- data -------------------------------------------------------------------------------------------------


def load_tokens(data_dir: Path) -> tuple[Any, dict]:
    import numpy as np

    manifest = data_dir / knobs.MANIFEST
    if not manifest.is_file():
        fail(f"no prepared data in {data_dir}: run the data preparation first (trn submit --job titan-llama3-data)")
    made = json.loads(manifest.read_text())
    return np.memmap(data_dir / knobs.TOKENS, dtype="<u4", mode="r"), made


def batch(tokens, step: int, *, dp_rank: int, dp: int, batch_size: int, seq_len: int, seed: int) -> torch.Tensor:  # noqa: ANN001
    """The windows of ``seq_len + 1`` tokens of data-parallel rank ``dp_rank`` at ``step``: each epoch a seeded
    permutation of the stream's windows. A function of the step alone: a resumed run reads on where the saved run
    stopped; the ranks of one TP group read the same batch."""
    windows = (len(tokens) - 1) // seq_len
    per_epoch = windows // (dp * batch_size)
    if per_epoch == 0:
        fail(f"{len(tokens)} tokens: fewer than one global batch ({dp} x {batch_size} x {seq_len} tokens)")
    epoch, index = divmod(step, per_epoch)
    order = torch.randperm(windows, generator=torch.Generator().manual_seed(seed + epoch))
    start = (index * dp + dp_rank) * batch_size
    rows = [torch.from_numpy(tokens[w * seq_len:w * seq_len + seq_len + 1].astype("int64"))
            for w in order[start:start + batch_size].tolist()]
    return torch.stack(rows)


# -- checkpoints ------------------------------------------------------------------------------------------


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
        fail(f"{path} holds {saved}, this job trains {model_record}: give it another job name (its checkpoint "
             f"directory) or [checkpoint] enable = false")
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


# -- training ---------------------------------------------------------------------------------------------


def learning_rate(step: int, *, lr: float, warmup: int) -> float:
    """Linear warm-up, then constant: the rate at a step does not depend on how many steps the job was given, so a
    run stopped and resumed with more steps follows the same rates."""
    return lr * min(1.0, (step + 1) / max(1, warmup))


def local_bytes(tensors) -> int:  # noqa: ANN001 (tensors or DTensors)
    """Bytes of this rank's shards of ``tensors``."""
    from torch.distributed.tensor import DTensor

    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


class SavedTensors:
    """Counts what autograd saves for the backward while it is entered (each storage once, parameters left out:
    FSDP2 frees its gathered copies after the forward): the activation memory of a step, measured."""

    def __init__(self) -> None:
        self.storages: dict[int, Any] = {}

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor

        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        storage = local.untyped_storage()
        self.storages[id(storage)] = storage  # held until counted: no address is reused meanwhile
        return tensor

    def hooks(self) -> Any:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def count(self, model: Any) -> int:
        params = {local.untyped_storage().data_ptr() for local in
                  (p.to_local() if hasattr(p, "to_local") else p for p in model.parameters())}
        live = {s.data_ptr(): s.nbytes() for s in self.storages.values() if s.nbytes() and s.data_ptr() not in params}
        self.storages.clear()
        return sum(live.values())


def gather(value: object) -> list[object]:
    """Every rank's ``value``, in rank order."""
    values: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def train() -> None:  # noqa: PLR0915 (one loop, read top to bottom)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    config = knobs.job_config()
    model_cfg, training, parallelism = config["model"], config["training"], config["parallelism"]
    checkpoint, compile_cfg = config["checkpoint"], config["compile"]
    ac_cfg, metrics = config.get("activation_checkpoint", {}), config.get("metrics", {})
    device = torch.device(knobs.device("TRN_TORCH_DEVICE"))
    if device.type == "neuron":
        import torch_neuronx  # noqa: F401  (registers the neuron device and process group backend: Neuron's guide)
    backend = knobs.device("TRN_DIST_BACKEND")
    compile_backend = knobs.device("TRN_COMPILE_BACKEND") if compile_cfg.get("enable") else ""
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    flavor = model_cfg["flavor"]
    if flavor not in knobs.FLAVORS:
        fail(f"[model] flavor={flavor}: one of {', '.join(knobs.FLAVORS)}")
    size = knobs.FLAVORS[flavor]
    dp, tp = fit_plan.mesh_sizes(parallelism, world, local_world, size["n_kv_heads"])
    seed, seq_len, batch_size = int(training["seed"]), int(training["seq_len"]), int(training["local_batch_size"])
    if seq_len % tp:
        fail(f"[training] seq_len={seq_len}: a multiple of the tensor-parallel degree {tp} (sequence parallel splits it)")
    ac_mode = str(ac_cfg.get("mode", "none"))
    if ac_mode not in fit_plan.AC_MODES:
        fail(f"[activation_checkpoint] mode={ac_mode}: one of {', '.join(fit_plan.AC_MODES)}")
    every = str(ac_cfg.get("selective_ac_option", "2"))
    if not every.isdigit() or int(every) < 1:
        fail(f"[activation_checkpoint] selective_ac_option={every}: a layer frequency (1, 2, ...): this recipe "
             "checkpoints every n-th block (TorchTitan's per-op option is not offered)")
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    precision = {key: str(training.get(key, "float32")) for key in ("mixed_precision_param", "mixed_precision_reduce")}
    for key, value in precision.items():
        if value not in dtypes:
            fail(f"[training] {key}={value}: one of {', '.join(dtypes)}")
    mesh = init_device_mesh(device.type, (dp, tp), mesh_dim_names=("dp_shard", "tp"))
    tokens, made = load_tokens(Path(training["dataset_path"]))
    warming = knobs.warmup_steps()
    steps = warming or int(training["steps"])
    # The warm-up (precompile) fills the compile cache: no checkpoint is read or written.
    folder = os.environ.get(knobs.CHECKPOINT_ENV) if checkpoint.get("enable") and not warming else None
    checkpoints = Path(folder) if folder else None
    shape = fit_plan.Shape.of(size, int(made["vocab_size"]))
    # Built on the meta device (no memory), sharded, then each rank's shards materialized on the device.
    with torch.device("meta"):
        model = build_model(flavor, shape.vocab, seq_len)
    ac = checkpointed_blocks(size["n_layers"], ac_mode, int(every))
    model = parallelize(model, mesh, tp, compile_backend, ac=ac, param_dtype=dtypes[precision["mixed_precision_param"]],
                        reduce_dtype=dtypes[precision["mixed_precision_reduce"]])
    materialize(model, device, mesh, seed)
    built = {"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
             "parameters": local_bytes(model.parameters())}
    builds = gather(built)
    say(built={"full_model_fp32": fit_plan.full_model_bytes(shape), "per_rank": builds})
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(training["lr"]), weight_decay=0.1)
    start, history = 0, []
    model_record = {"flavor": flavor, "vocab_size": shape.vocab}
    resume = newest_checkpoint(checkpoints)
    if resume is not None:
        record = load(resume, model, optimizer, model_record=model_record)
        start, history = record["step"], record["history"]
        say(resumed_from=str(resume), step=start, loss=history[-1]["loss"] if history else None)
    say(start={"flavor": flavor, "world": world, "data_parallel_shard_degree": dp, "tensor_parallel_degree": tp,
               "device": device.type, "backend": backend, "compile": compile_backend or None,
               "activation_checkpoint": ac_mode, "checkpointed_blocks": len(ac), "param_dtype":
               precision["mixed_precision_param"], "first_step": start + 1, "steps": steps,
               "checkpoints": str(checkpoints) if checkpoints else None, "tokens": len(tokens)})
    dp_rank = mesh["dp_shard"].get_local_rank()
    interval, export = int(checkpoint["interval"]), str(checkpoint.get("export_s3") or "")
    nodes = max(1, world // local_world)
    step_tokens = dp * batch_size * seq_len  # tokens of one step, every rank's batch (a TP group shares one)
    peak = float(metrics.get("peak_bf16_tflops_per_node") or 0)
    flops_per_token = shape.flops_per_token(seq_len)
    saved = SavedTensors() if metrics.get("report_memory") else None
    loss_context = loss_parallel if tp > 1 else contextlib.nullcontext
    for step in range(start, steps):
        began = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, lr=float(training["lr"]), warmup=int(training["warmup_steps"]))
        ids = batch(tokens, step, dp_rank=dp_rank, dp=dp, batch_size=batch_size, seq_len=seq_len, seed=seed).to(device)
        measuring = saved if step == start else None
        with measuring.hooks() if measuring else contextlib.nullcontext(), loss_context():
            logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        activations = measuring.count(model) if measuring else None
        with loss_context():
            loss.backward()
        clip_grad_norm(list(model.parameters()), float(training["max_norm"]))
        optimizer.step()
        if step == start:  # each rank's shards, measured: `trn fit` plans the same numbers
            moments = [v for state in optimizer.state.values() for k, v in state.items() if k != "step"]
            memory = {"parameters": local_bytes(model.parameters()),
                      "gradients": local_bytes(p.grad for p in model.parameters() if p.grad is not None),
                      "optimizer": local_bytes(moments), "activations": activations}
            say(memory={"per_rank": gather(memory)})
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        value = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        mean = value.detach().float()
        dist.all_reduce(mean)
        history.append({"step": done, "loss": round(float(mean.cpu()) / world, 6)})
        took = time.perf_counter() - began  # the loss on the host: the step has finished on every device
        per_node = step_tokens / took / nodes
        say(step=done, loss=history[-1]["loss"], seconds=round(took, 4), tokens_per_s_per_node=round(per_node, 1),
            mfu=float(f"{per_node * flops_per_token / (peak * 1e12):.4g}") if peak else None)
        if checkpoints is not None and (done % interval == 0 or done == steps):
            saved_to = save(checkpoints, done, model, optimizer, {"history": history[-100:], "model": model_record},
                            keep=int(checkpoint["keep_latest_k"]))
            say(checkpoint=str(saved_to), step=done)
            if export and rank == 0:
                say(export={"to": f"{export.rstrip('/')}/{saved_to.name}/", "files": export_to_s3(saved_to, export)})
    if warming:
        say(warm_up={"steps": steps - start})
    else:
        say(done={"step": steps, "checkpoint": str(newest_checkpoint(checkpoints) or "") or None})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    train()
