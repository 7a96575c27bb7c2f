"""Llama 3 pretraining with TorchTitan's Llama 3 model on TorchNeuron: FSDP2 across nodes, tensor parallel within a
node, sharded checkpoints with torch.distributed.checkpoint (DCP) on /fsx, resumed from the newest.

`trn submit --job titan-llama3` runs it under torchrun on each node (one process per NeuronCore), with the TOML job
config generated for the compute group in ``TITAN_JOB_CONFIG`` (knobs.py); `--job titan-llama3-data` (prepare.py)
put the tokenizer and the token stream in ``[training] dataset_path`` first.

What it takes from TorchTitan and what from torch (the model code is TorchTitan's; the loop is this file's):

- the model: ``torchtitan.models.llama3`` (``Llama3Model`` and its layer builder, at the sizes of its model
  registry: knobs.FLAVORS), with ``ScaledDotProductAttention`` as the inner attention (causal, no document masks):
  TorchTitan 0.3's FlexAttention has no backward on the CPU ("FlexAttention does not support backward on CPU"),
  and SDPA is an operator TorchNeuron runs;
- the parallelism: torch's own ``fully_shard`` (FSDP2) over ``[parallelism] data_parallel_shard_degree`` and
  ``parallelize_module`` (DTensor tensor parallel, Megatron's column/row split of attention and MLP) over
  ``tensor_parallel_degree``, on a 2-D DeviceMesh of the ``neuron`` device: the parallelism Neuron's TorchNeuron
  guide lists (FSDP2, DTensor; Neuron docs torch/guides/torch-distributed). TorchTitan's ``Trainer`` itself picks
  its device from CUDA-style modules (torchtitan/tools/utils.py: ``device_type ... or "cuda"``), which is what
  TorchTitan Neuron patches; this loop does not depend on it;
- checkpoints: ``torch.distributed.checkpoint`` with ``get_state_dict``/``set_state_dict`` (every rank writes its
  shards), a step's folder written under a temporary name and renamed when every rank is done; the optimizer state
  and the step with it; optionally copied to ``[checkpoint] export_s3`` after each save.

The launch rehearsal (`trn rehearse --job titan-llama3`) runs this file on the CPU: ``TRN_TORCH_DEVICE=cpu``,
``TRN_DIST_BACKEND=gloo``, ``TRN_COMPILE_BACKEND=eager`` (trainium_cdk/rehearsal's substitution table).

Rank 0 prints one JSON line per event after ``TITAN ``: start, resumed_from, step (loss), checkpoint, export, done.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn

import knobs
import torch
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


def mesh_sizes(parallelism: dict[str, Any], world: int, local_world: int, kv_heads: int) -> tuple[int, int]:
    """(data-parallel shard degree, tensor-parallel degree) for this world. The config's, when they multiply to the
    world; otherwise (fewer processes a node than NeuronCores, as in the rehearsal) TP stays within a node: the
    largest divisor of the config's TP, the processes of a node and the model's key/value heads (TP splits them),
    and FSDP over the rest."""
    dp, tp = int(parallelism["data_parallel_shard_degree"]), int(parallelism["tensor_parallel_degree"])
    if dp * tp == world and kv_heads % tp == 0:
        return dp, tp
    tp = math.gcd(math.gcd(tp, local_world), kv_heads)
    return world // tp, tp


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
    model = config.build()
    model.init_states()
    return model


def _build_model_02(size: dict[str, Any], vocab_size: int, seq_len: int) -> torch.nn.Module:
    # Not run by the CPU rehearsal (it has TorchTitan 0.3): torchtitan 0.2.0's models/llama3/model/{args,model}.py.
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer

    args = TransformerModelArgs(
        dim=size["dim"], n_layers=size["n_layers"], n_heads=size["n_heads"], n_kv_heads=size["n_kv_heads"],
        vocab_size=vocab_size, multiple_of=size["ffn_multiple_of"], ffn_dim_multiplier=size["ffn_multiplier"],
        rope_theta=500000, max_seq_len=seq_len,
    )
    model = Transformer(args)
    model.init_weights()
    return model


def parallelize(model: Any, mesh, tp: int, compile_backend: str) -> Any:  # noqa: ANN001 (TorchTitan's model, a DeviceMesh)
    """TP within a node (Megatron's split: q/k/v and w1/w3 by columns, wo and w2 by rows), then FSDP2 per block and
    for the root over the data-parallel dimension."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    # TorchTitan 0.3 names q/k/v attention.qkv_linear.w*; 0.2, attention.w*.
    split: dict[str, Any] = {"wq": ColwiseParallel, "wk": ColwiseParallel, "wv": ColwiseParallel, "wo": RowwiseParallel,
             "w1": ColwiseParallel, "w3": ColwiseParallel, "w2": RowwiseParallel}
    for name, block in model.layers.items():
        if tp > 1:
            plan = {path: split[path.rsplit(".", 1)[-1]]() for path, _ in block.named_modules()
                    if path.rsplit(".", 1)[-1] in split}
            parallelize_module(block, mesh["tp"], plan)
        if compile_backend:
            block = torch.compile(block, backend=compile_backend)
            model.layers[name] = block
        fully_shard(block, mesh=mesh["dp_shard"])
    fully_shard(model, mesh=mesh["dp_shard"])
    return model


def clip_grad_norm(parameters: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip by the norm of every gradient together. FSDP2 over TP leaves the TP-split weights on the 2-D mesh and
    the rest (embeddings, norms, output) on the data-parallel one, and DTensor refuses to stack norms of two meshes
    (``torch.nn.utils.clip_grad_norm_``: "All operands in aten.stack.default must have the same mesh"): each
    mesh's norm is reduced on its own, then combined."""
    from torch.distributed.tensor import DTensor

    by_mesh: dict[object, list[torch.nn.Parameter]] = {}
    for p in parameters:
        if p.grad is not None:
            by_mesh.setdefault(p.grad.device_mesh if isinstance(p.grad, DTensor) else None, []).append(p)
    norms = []
    for params in by_mesh.values():
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None], 2.0)
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    total = torch.stack(norms).pow(2).sum().sqrt()
    for params in by_mesh.values():
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


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


def load(path: Path, model, optimizer) -> dict:  # noqa: ANN001
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return json.loads((path / TRAINER_STATE).read_text())


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


def train() -> None:  # noqa: PLR0915 (one loop, read top to bottom)
    from torch.distributed.device_mesh import init_device_mesh

    config = knobs.job_config()
    model_cfg, training, parallelism = config["model"], config["training"], config["parallelism"]
    checkpoint, compile_cfg = config["checkpoint"], config["compile"]
    device = torch.device(knobs.device("TRN_TORCH_DEVICE"))
    if device.type == "neuron":
        import torch_neuronx  # noqa: F401  (registers the neuron device and process group backend: Neuron's guide)
    backend = knobs.device("TRN_DIST_BACKEND")
    compile_backend = knobs.device("TRN_COMPILE_BACKEND") if compile_cfg.get("enable") else ""
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if model_cfg["flavor"] not in knobs.FLAVORS:
        fail(f"[model] flavor={model_cfg['flavor']}: one of {', '.join(knobs.FLAVORS)}")
    dp, tp = mesh_sizes(parallelism, world, local_world, knobs.FLAVORS[model_cfg["flavor"]]["n_kv_heads"])
    mesh = init_device_mesh(device.type, (dp, tp), mesh_dim_names=("dp_shard", "tp"))
    seed, seq_len, batch_size = int(training["seed"]), int(training["seq_len"]), int(training["local_batch_size"])
    torch.manual_seed(seed)  # every rank builds the same initial model before it is sharded
    tokens, made = load_tokens(Path(training["dataset_path"]))
    extracting = knobs.extraction_steps()
    steps = extracting or int(training["steps"])
    # Graph extraction: outputs are not real, so no checkpoint is read or written.
    folder = os.environ.get(knobs.CHECKPOINT_ENV) if checkpoint.get("enable") and not extracting else None
    checkpoints = Path(folder) if folder else None
    model = parallelize(build_model(model_cfg["flavor"], int(made["vocab_size"]), seq_len).to(device), mesh, tp,
                        compile_backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(training["lr"]), weight_decay=0.1)
    start, history = 0, []
    resume = newest_checkpoint(checkpoints)
    if resume is not None:
        record = load(resume, model, optimizer)
        start, history = record["step"], record["history"]
        say(resumed_from=str(resume), step=start, loss=history[-1]["loss"] if history else None)
    say(start={"flavor": model_cfg["flavor"], "world": world, "data_parallel_shard_degree": dp,
               "tensor_parallel_degree": tp, "device": device.type, "backend": backend,
               "compile": compile_backend or None, "first_step": start + 1, "steps": steps,
               "checkpoints": str(checkpoints) if checkpoints else None, "tokens": len(tokens)})
    dp_rank = mesh["dp_shard"].get_local_rank()
    interval, export = int(checkpoint["interval"]), str(checkpoint.get("export_s3") or "")
    for step in range(start, steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, lr=float(training["lr"]), warmup=int(training["warmup_steps"]))
        ids = batch(tokens, step, dp_rank=dp_rank, dp=dp, batch_size=batch_size, seq_len=seq_len, seed=seed).to(device)
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()
        clip_grad_norm(list(model.parameters()), float(training["max_norm"]))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        mean = loss.detach().float()
        dist.all_reduce(mean)
        history.append({"step": done, "loss": round(float(mean.cpu()) / world, 6)})
        say(step=done, loss=history[-1]["loss"])
        if checkpoints is not None and (done % interval == 0 or done == steps):
            saved = save(checkpoints, done, model, optimizer, {"history": history[-100:]},
                         keep=int(checkpoint["keep_latest_k"]))
            say(checkpoint=str(saved), step=done)
            if export and rank == 0:
                say(export={"to": f"{export.rstrip('/')}/{saved.name}/", "files": export_to_s3(saved, export)})
    if extracting:
        say(graph_extraction={"steps": steps - start})
    else:
        say(done={"step": steps, "checkpoint": str(newest_checkpoint(checkpoints) or "") or None})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    train()
