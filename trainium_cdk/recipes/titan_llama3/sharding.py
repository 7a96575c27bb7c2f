"""How titan-llama3 lays the model out on the device mesh (train.py's parallelism; fit_plan.py computes its memory):
tensor and sequence parallel within a node, activation checkpointing, torch.compile per block, FSDP2 with mixed
precision over the data-parallel ranks; the model materialized shard by shard; gradient clipping across both meshes.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def _tp_plan(model: Any, tp_mesh) -> None:  # noqa: ANN001 (a DeviceMesh)
    """Tensor and sequence parallel as TorchTitan lays out Llama 3 (torchtitan/models/llama3 parallelize): Megatron's
    split of attention and MLP (q/k/v, w1/w3 by columns, wo, w2 by rows), the embedding and the output layer split by
    vocabulary (the loss computed on the shards: loss_parallel), the norms and the residual stream split by sequence
    between the ranks of a TP group. Module names of TorchTitan 0.3 (attention.qkv_linear.w*, lm_head) or 0.2
    (attention.w*, output)."""
    import inspect

    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    # TorchTitan 0.3's Embedding runs its own vocabulary-parallel path on the local shard when TorchTitan sets a TP
    # group; this plan uses torch's (RowwiseParallel on an nn.Embedding), so it runs nn.Embedding's forward.
    if type(model.tok_embeddings).forward is not torch.nn.Embedding.forward:
        model.tok_embeddings.forward = types.MethodType(torch.nn.Embedding.forward, model.tok_embeddings)
    head = "lm_head" if hasattr(model, "lm_head") else "output"
    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        head: ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    split = {"wq": ColwiseParallel, "wk": ColwiseParallel, "wv": ColwiseParallel, "wo": RowwiseParallel,
             "w1": ColwiseParallel, "w3": ColwiseParallel, "w2": RowwiseParallel}
    for block in model.layers.values():
        # The attention takes the block's other inputs after x (0.3: masks and positions; 0.2: the RoPE table).
        others = len(inspect.signature(block.attention.forward).parameters) - 1
        plan: dict[str, Any] = {
            "attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),) + (None,) * others,
                                            desired_input_layouts=(Replicate(),) + (None,) * others),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        }
        for path, _ in block.named_modules():
            leaf = path.rsplit(".", 1)[-1]
            if leaf in split:
                plan[path] = (RowwiseParallel(output_layouts=Shard(1)) if split[leaf] is RowwiseParallel
                              else ColwiseParallel())
        parallelize_module(block, tp_mesh, plan)


def checkpointed_blocks(n_layers: int, mode: str, every: int) -> set[int]:
    """The blocks whose activations are recomputed: none, every block (full), or every ``every``-th (selective,
    TorchTitan's layer option): blocks every, 2 x every, ... counted from 1."""
    if mode == "full":
        return set(range(n_layers))
    if mode == "selective":
        return {i for i in range(n_layers) if (i + 1) % every == 0}
    return set()


def parallelize(model: Any, mesh, tp: int, compile_backend: str, *, ac: set[int],  # noqa: ANN001 (a DeviceMesh)
                param_dtype: torch.dtype, reduce_dtype: torch.dtype) -> Any:
    """TP (and sequence parallel) within a node, activation checkpointing of the blocks in ``ac``, torch.compile per
    block, then FSDP2 over the data-parallel dimension: each block, the embedding, and the final norm with the output
    layer a group of their own (all-gathered one group at a time), with bf16 compute and fp32 gradient reduction."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if tp > 1:
        _tp_plan(model, mesh["tp"])
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    dp_mesh = mesh["dp_shard"]
    for index, (name, block) in enumerate(list(model.layers.items())):
        if index in ac:
            block = checkpoint_wrapper(block, preserve_rng_state=False)
        if compile_backend:
            block = torch.compile(block, backend=compile_backend)
        model.layers[name] = block
        fully_shard(block, mesh=dp_mesh, mp_policy=policy)
    fully_shard(model.tok_embeddings, mesh=dp_mesh, mp_policy=policy)
    head = model.lm_head if hasattr(model, "lm_head") else model.output
    # The last group the forward runs is the first the backward needs: kept gathered in between.
    fully_shard([model.norm, head], mesh=dp_mesh, mp_policy=policy, reshard_after_forward=False)
    fully_shard(model, mesh=dp_mesh, mp_policy=policy)
    return model


def materialize(model: Any, device: torch.device, mesh, seed: int) -> None:  # noqa: ANN001 (a DeviceMesh)
    """Give the sharded model its memory on ``device`` and initialize each shard where it is: no rank ever holds
    more than its shards. DTensor's random generator makes every shard the slice of one seeded model (TorchTitan's
    set_determinism does the same)."""
    from torch.distributed.tensor import _random

    _random.manual_seed(seed, mesh)
    model.to_empty(device=device)
    with torch.no_grad():
        if hasattr(model, "init_states"):  # TorchTitan 0.3
            model.init_states(buffer_device=device)
        else:  # 0.2
            model.init_weights(buffer_device=device)


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
