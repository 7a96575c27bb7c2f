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
import math
import os
import resource
import time
from pathlib import Path
from typing import Any

import checkpoints as ckpt
import fit_plan
import knobs
import torch
import torch.distributed as dist
from job_metrics import Throughput
from knobs import fail, say
from sharding import checkpointed_blocks, clip_grad_norm, materialize, parallelize
from token_data import TokenWindows, load_tokens

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


# -- training ---------------------------------------------------------------------------------------------


def learning_rate(step: int, *, lr: float, warmup: int, steps: int, decay: str, min_factor: float) -> float:
    """Linear warm-up over ``warmup`` steps, then a decay over the rest of the job's ``steps`` to ``min_factor`` of
    ``lr`` (TorchTitan's [lr_scheduler]: ``decay_type`` linear, cosine or none)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if decay == "none" or steps <= warmup:
        return lr
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    shape = 1 - progress if decay == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
    return lr * (min_factor + (1 - min_factor) * shape)


def parameter_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW's groups: weight decay on the projections' matrices only, none on the norms, the embedding and the
    output layer's vocabulary (GPT-2's and Llama's practice)."""
    decayed: list[torch.nn.Parameter] = []
    plain: list[torch.nn.Parameter] = []
    for name, parameter in model.named_parameters():
        vocabulary = "tok_embeddings" in name or "lm_head" in name or name.endswith("output.weight")
        (plain if parameter.ndim < 2 or vocabulary else decayed).append(parameter)
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a DTensor; any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (the loss under loss_parallel); any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def next_token_loss(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """The cross-entropy of each window's next tokens (in fp32; on the vocabulary shards under loss_parallel)."""
    return torch.nn.functional.cross_entropy(model(ids[:, :-1]).flatten(0, 1).float(), ids[:, 1:].flatten())


def local_bytes(tensors) -> int:  # noqa: ANN001 (tensors or DTensors)
    """Bytes of this rank's shards of ``tensors``."""
    return sum(local(t).numel() * local(t).element_size() for t in tensors)


class SavedTensors:
    """Counts what autograd saves for the backward while it is entered (each storage once, parameters left out:
    FSDP2 frees its gathered copies after the forward): the activation memory of a step, measured."""

    def __init__(self) -> None:
        self.storages: dict[int, Any] = {}

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = local(tensor).untyped_storage()
        self.storages[id(storage)] = storage  # held until counted: no address is reused meanwhile
        return tensor

    def hooks(self) -> Any:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def count(self, model: Any) -> int:
        params = {local(p).untyped_storage().data_ptr() for p in model.parameters()}
        live = {s.data_ptr(): s.nbytes() for s in self.storages.values() if s.nbytes() and s.data_ptr() not in params}
        self.storages.clear()
        return sum(live.values())


def gather(value: object) -> list[object]:
    """Every rank's ``value``, in rank order."""
    values: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def evaluate(model: Any, windows: TokenWindows, *, dp_rank: int, device: torch.device, loss_context: Any) -> float | None:
    """The mean loss of the held-out windows (every rank's), or None when none are held out."""
    batches = windows.validation(dp_rank=dp_rank)
    if not batches:
        return None
    total = torch.zeros((), dtype=torch.float32, device=device)
    with torch.no_grad(), loss_context():
        for rows in batches:
            total += whole(next_token_loss(model, rows.to(device))).detach().float()
    dist.all_reduce(total)
    return round(float(total.cpu()) / (dist.get_world_size() * len(batches)), 6)


def train() -> None:  # noqa: PLR0915 (one loop, read top to bottom)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    config = knobs.job_config()
    model_cfg, training, parallelism = config["model"], config["training"], config["parallelism"]
    checkpoint, compile_cfg = config["checkpoint"], config["compile"]
    ac_cfg, metrics = config.get("activation_checkpoint", {}), config.get("metrics", {})
    schedule, validation = config.get("lr_scheduler", {}), config.get("validation", {})
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
    global_batch = int(training.get("global_batch_size", -1))
    global_batch = dp * batch_size if global_batch <= 0 else global_batch
    if global_batch % (dp * batch_size):
        fail(f"[training] global_batch_size={global_batch}: a multiple of {dp * batch_size} (local_batch_size "
             f"{batch_size} x {dp} data-parallel ranks)")
    accumulation = global_batch // (dp * batch_size)
    ac_mode = str(ac_cfg.get("mode", "none"))
    if ac_mode not in fit_plan.AC_MODES:
        fail(f"[activation_checkpoint] mode={ac_mode}: one of {', '.join(fit_plan.AC_MODES)}")
    every = str(ac_cfg.get("selective_ac_option", "2"))
    if not every.isdigit() or int(every) < 1:
        fail(f"[activation_checkpoint] selective_ac_option={every}: a layer frequency (1, 2, ...): this recipe "
             "checkpoints every n-th block (TorchTitan's per-op option is not offered)")
    decay = str(schedule.get("decay_type", "cosine"))
    if decay not in ("linear", "cosine", "none"):
        fail(f"[lr_scheduler] decay_type={decay}: one of linear, cosine, none")
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    precision = {key: str(training.get(key, "float32")) for key in ("mixed_precision_param", "mixed_precision_reduce")}
    for key, value in {**precision, "export_dtype": str(checkpoint.get("export_dtype", "float32"))}.items():
        if value not in dtypes:
            fail(f"[training] {key}={value}: one of {', '.join(dtypes)}")
    mesh = init_device_mesh(device.type, (dp, tp), mesh_dim_names=("dp_shard", "tp"))
    data_dir = Path(training["dataset_path"])
    tokens, made = load_tokens(data_dir)
    held_out = int(validation.get("steps", 0)) * dp * batch_size if validation.get("enable") else 0
    windows = TokenWindows(tokens, seq_len=seq_len, seed=seed, dp=dp, batch_size=batch_size, held_out=held_out)
    warming = knobs.warmup_steps()
    steps = warming or int(training["steps"])
    # The warm-up (precompile) fills the compile cache: no checkpoint is read or written.
    folder = os.environ.get(knobs.CHECKPOINT_ENV) if checkpoint.get("enable") and not warming else None
    checkpoints = Path(folder) if folder else None
    shape = fit_plan.Shape.of(size, int(made["vocab_size"]))
    torch.manual_seed(seed)
    # Built on the meta device (no memory), sharded, then each rank's shards materialized on the device.
    with torch.device("meta"):
        model = build_model(flavor, shape.vocab, seq_len)
    ac = checkpointed_blocks(size["n_layers"], ac_mode, int(every))
    model = parallelize(model, mesh, tp, compile_backend, ac=ac, param_dtype=dtypes[precision["mixed_precision_param"]],
                        reduce_dtype=dtypes[precision["mixed_precision_reduce"]])
    materialize(model, device, mesh, seed)
    built = {"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
             "parameters": local_bytes(model.parameters())}
    say(built={"full_model_fp32": fit_plan.full_model_bytes(shape), "per_rank": gather(built)})
    optimizer = torch.optim.AdamW(parameter_groups(model, float(training.get("weight_decay", 0.1))),
                                  lr=float(training["lr"]))
    start, history = 0, []
    model_record = {"flavor": flavor, "vocab_size": shape.vocab}
    resume = ckpt.newest_checkpoint(checkpoints)
    initial = str(checkpoint.get("initial_load_path") or "")
    if resume is not None:
        record = ckpt.load(resume, model, optimizer, model_record=model_record)
        start, history = record["step"], record["history"]
        say(resumed_from=str(resume), step=start, loss=history[-1]["loss"] if history else None)
    elif initial:
        if not checkpoint.get("initial_load_in_hf", True):
            fail("[checkpoint] initial_load_in_hf=false: the recipe starts from Hugging Face weights only (its own "
                 "checkpoints resume by themselves)")
        ckpt.load_hf(Path(initial), model, size, shape.vocab)
        say(loaded_hf=initial)
    say(start={"flavor": flavor, "world": world, "data_parallel_shard_degree": dp, "tensor_parallel_degree": tp,
               "device": device.type, "backend": backend, "compile": compile_backend or None,
               "activation_checkpoint": ac_mode, "checkpointed_blocks": len(ac), "param_dtype":
               precision["mixed_precision_param"], "gradient_accumulation": accumulation, "first_step": start + 1,
               "steps": steps, "checkpoints": str(checkpoints) if checkpoints else None, "tokens": len(tokens),
               "held_out_windows": windows.held_out})
    dp_rank = mesh["dp_shard"].get_local_rank()
    interval, export = int(checkpoint["interval"]), str(checkpoint.get("export_s3") or "")
    exporter = ckpt.BackgroundExport(export) if export and rank == 0 else None
    eval_every = int(validation.get("freq", 0)) if validation.get("enable") else 0
    nodes = max(1, world // local_world)
    step_tokens = global_batch * seq_len  # tokens of one step, every rank's batches (a TP group shares one)
    peak = float(metrics.get("peak_bf16_tflops_per_node") or 0)
    flops_per_token = shape.flops_per_token(seq_len)
    saved = SavedTensors() if metrics.get("report_memory") else None
    gauges = Throughput() if rank == 0 else None
    loss_context = loss_parallel if tp > 1 else contextlib.nullcontext
    lr, warmup = float(training["lr"]), int(training["warmup_steps"])
    for step in range(start, steps):
        began = time.perf_counter()
        rate = learning_rate(step, lr=lr, warmup=warmup, steps=int(training["steps"]), decay=decay,
                             min_factor=float(schedule.get("min_lr_factor", 0.1)))
        for group in optimizer.param_groups:
            group["lr"] = rate
        total = torch.zeros((), dtype=torch.float32, device=device)
        activations = None
        for micro in range(accumulation):
            ids = windows.batch(step * accumulation + micro, dp_rank=dp_rank).to(device)
            measuring = saved if step == start and micro == 0 else None
            with measuring.hooks() if measuring else contextlib.nullcontext(), loss_context():
                loss = next_token_loss(model, ids)
            if measuring:
                activations = measuring.count(model)
            with loss_context():
                (loss / accumulation).backward()
            total += whole(loss).detach().float()
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
        dist.all_reduce(total)
        history.append({"step": done, "loss": round(float(total.cpu()) / (world * accumulation), 6)})
        took = time.perf_counter() - began  # the loss on the host: the step has finished on every device
        per_node = step_tokens / took / nodes
        mfu = float(f"{per_node * flops_per_token / (peak * 1e12):.4g}") if peak else None
        say(step=done, loss=history[-1]["loss"], lr=float(f"{rate:.6g}"), seconds=round(took, 4),
            tokens_per_s_per_node=round(per_node, 1), mfu=mfu)
        if gauges is not None:
            gauges.publish(round(per_node, 1), mfu)
        if eval_every and (done % eval_every == 0 or done == steps) and not warming:
            say(eval={"step": done, "loss": evaluate(model, windows, dp_rank=dp_rank, device=device,
                                                      loss_context=loss_context)})
        if checkpoints is not None and (done % interval == 0 or done == steps):
            copied = exporter.wait() if exporter else None  # the previous copy, before pruning may delete its folder
            if copied:
                say(export=copied)
            saved_to = ckpt.save(checkpoints, done, model, optimizer, {"history": history[-100:], "model": model_record},
                                 keep=int(checkpoint["keep_latest_k"]))
            say(checkpoint=str(saved_to), step=done)
            if exporter:
                exporter.start(saved_to)
    if checkpoints is not None and checkpoint.get("last_save_in_hf") and steps > start:
        exported = ckpt.export_hf(checkpoints / f"hf-step-{steps:08d}", model, size, shape.vocab, seq_len=seq_len,
                                  dtype=str(checkpoint.get("export_dtype", "float32")), eos=made.get("end_of_text"),
                                  tokenizer=data_dir / knobs.TOKENIZER_DIR)
        say(exported_hf=str(exported))
    copied = exporter.wait() if exporter else None
    if copied:
        say(export=copied)
    if warming:
        say(warm_up={"steps": steps - start})
    else:
        say(done={"step": steps, "checkpoint": str(ckpt.newest_checkpoint(checkpoints) or "") or None})
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    train()
