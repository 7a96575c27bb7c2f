"""What one rank of titan-llama3 holds in device memory, part by part, computed from the model's sizes and the job's
layout: the plan `trn fit --job titan-llama3` prints and checks before a node is paid for (standard library only).

The layout is train.py's: FSDP2 shards every parameter over the data-parallel ranks and, for the ones tensor parallel
splits (attention and MLP projections, the embedding and the output layer: vocabulary-parallel), over the
tensor-parallel ranks as well; sequence parallel keeps the residual stream and the norms split over the sequence
between TP ranks; bf16 compute with fp32 parameters, gradients and AdamW moments (FSDP2's MixedPrecisionPolicy).

Which figures are exact and which are estimates (tests/unit/jobs/test_titan_fit.py and the rehearsal test check them):

- parameters, gradients, optimizer state: exact. Rank 0's local shard bytes: FSDP2 and DTensor split a dimension
  into ceil-sized chunks, and rank 0 holds the first chunk of every split (the rehearsal measures each rank's).
- activations without checkpointing: what autograd saves in a forward, counted per op of TorchTitan's Llama 3 block
  under this layout (RMSNorm saves its fp32 input and output and the inverse RMS; the projections their all-gathered
  bf16 input; SDPA q, k, v, its output and log-sum-exp; SwiGLU four bf16 tensors of the hidden size; RoPE its
  complex table) and checked against what the CPU rehearsal's forward saves (saved_tensors_hooks). Neuron's
  compiler may keep less (fusion) or more (its own scratch): it is the eager graph's figure.
- with checkpointing: a checkpointed block keeps its input; one block's activations live again while it is
  recomputed, and its gradients beside them.
- the loss: bf16 logits of the rank's vocabulary shard, their fp32 copy and log-softmax (saved), and the gradient.
- FSDP2's all-gathered bf16 parameters of two groups (the running one and the prefetched next) and one group's
  unsharded bf16 and fp32 gradients for the reduce-scatter; the largest group (the embedding or the output layer at
  Llama 3's vocabulary) sets the size.
- the runtime's reserve: a share of the core's memory for what the Neuron runtime keeps beside tensors (program,
  scratchpad, DMA rings, collectives buffers). Neuron publishes no size for these: RUNTIME_RESERVE is ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GIB = 2**30
# Bytes a parameter costs, by what holds it: the fp32 sharded parameter, its fp32 gradient, AdamW's two fp32 moments.
PARAMETER_BYTES, GRADIENT_BYTES, OPTIMIZER_BYTES = 4, 4, 8
COMPUTE_BYTES = 2  # bf16: activations, gathered parameters
# The share of a NeuronCore's memory left to the Neuron runtime (our margin: Neuron publishes no figure).
RUNTIME_RESERVE = 0.15
# What one training process uses on the host besides its shard: torch, torch-neuronx and the runtime's host side
# (our margin; a CPU rank of the rehearsal measures about 0.5 GiB).
HOST_PROCESS_GIB = 2.0
# Llama 3's tokenizer: what the data job writes unless a team brings another (train.py reads the real one).
LLAMA3_VOCAB = 128_256
AC_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class Shape:
    """A Llama 3 size (knobs.FLAVORS) at a vocabulary."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    vocab: int

    @classmethod
    def of(cls, size: dict[str, Any], vocab: int) -> Shape:
        return cls(dim=size["dim"], n_layers=size["n_layers"], n_heads=size["n_heads"], n_kv_heads=size["n_kv_heads"],
                   ffn_hidden=ffn_hidden(size["dim"], size["ffn_multiple_of"], size["ffn_multiplier"]), vocab=vocab)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    def parameters(self) -> int:
        return self.n_layers * self.block_parameters() + 2 * self.vocab * self.dim + self.dim

    def block_parameters(self) -> int:
        h, f = self.dim, self.ffn_hidden
        return 2 * h * h + 2 * h * self.kv_dim + 3 * h * f + 2 * h

    def flops_per_token(self, seq_len: int) -> float:
        """Model FLOPs of one token's forward and backward: 6 per weight of the matrix products, and attention's
        score and value products (12 x layers x dim x sequence: PaLM's appendix B, as TorchTitan counts MFU)."""
        matmul_weights = self.parameters() - self.vocab * self.dim - (2 * self.n_layers + 1) * self.dim
        return 6.0 * matmul_weights + 12.0 * self.n_layers * self.dim * seq_len


def ffn_hidden(dim: int, multiple_of: int, multiplier: float | None) -> int:
    """SwiGLU's hidden size as Llama 3 (and TorchTitan's compute_ffn_hidden_dim) make it."""
    hidden = int(2 * 4 * dim / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@dataclass(frozen=True)
class Layout:
    """How the job runs: the parallel degrees, one micro-batch, activation checkpointing."""

    dp: int
    tp: int
    seq_len: int
    local_batch_size: int
    ac_mode: str = "selective"
    ac_every: int = 2  # selective: every ac_every-th block is checkpointed (TorchTitan's selective_ac_option)


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


def _chunk(n: int, parts: int) -> int:
    """The first (largest) chunk of a dimension of ``n`` split ``parts`` ways, as torch.chunk and FSDP2 split it."""
    return -(-n // parts)


def local_parameters(shape: Shape, layout: Layout) -> int:
    """Rank 0's parameter elements: TP splits dimension 0 of the projections (the row-parallel ones: their input
    dimension), the embedding and the output layer by vocabulary; FSDP2 then splits dimension 0 of what each rank has."""
    h, f, kv, dp, tp = shape.dim, shape.ffn_hidden, shape.kv_dim, layout.dp, layout.tp
    column = [(h, h), (kv, h), (kv, h), (f, h), (f, h)]  # wq, wk, wv, w1, w3: out x in, split on out
    row = [(h, h), (h, f)]  # wo, w2: split on in (dimension 1), FSDP on dimension 0
    block = sum(_chunk(_chunk(o, tp), dp) * i for o, i in column)
    block += sum(_chunk(o, dp) * _chunk(i, tp) for o, i in row)
    block += 2 * _chunk(h, dp)  # the two norms: replicated over TP
    vocab = 2 * _chunk(_chunk(shape.vocab, tp), dp) * h  # embedding (rows) and output layer (rows): by vocabulary
    return shape.n_layers * block + vocab + _chunk(h, dp)


def activations_per_token(shape: Shape, layout: Layout) -> dict[str, float]:
    """Bytes autograd saves per token: in a block without checkpointing, in a checkpointed block (its input), after
    the last block (the final norm, the output layer's gathered input, the token ids) and for the loss (bf16 logits of
    the vocabulary shard, their fp32 copy, the log-softmax). The sequence-parallel parts divide by TP."""
    h, f, kv, n, t = shape.dim, shape.ffn_hidden, shape.kv_dim, shape.n_heads, layout.tp
    norm = 8 * h + 4  # an RMSNorm: fp32 input, fp32 normalized, fp32 inverse RMS
    attention = 2 * h + 2 * kv + 2 * h + 4 * n  # q, k and v (bf16), SDPA's output and fp32 log-sum-exp
    mlp = 4 * COMPUTE_BYTES * f  # w1 and w3 outputs, silu(w1), their product
    gathered = COMPUTE_BYTES * h  # a norm's output all-gathered over the sequence for the projections after it
    rope = 4 * shape.head_dim / layout.local_batch_size  # the complex64 table: per sequence, not per token
    return {"block": 2 * gathered + (2 * norm + attention + mlp) / t + rope, "checkpointed": COMPUTE_BYTES * h / t,
            "head": norm / t + gathered + 8, "loss": (COMPUTE_BYTES + 4 + 4) * _chunk(shape.vocab, t)}


def checkpointed_blocks(n_layers: int, layout: Layout) -> int:
    """How many blocks recompute their activations (train.py's checkpointed_blocks)."""
    return {"none": 0, "full": n_layers, "selective": n_layers // max(1, layout.ac_every)}[layout.ac_mode]


def saved_activations(shape: Shape, layout: Layout) -> float:
    """Bytes one rank's forward (and loss) saves for the backward: what the rehearsal measures at no checkpointing."""
    per_token = activations_per_token(shape, layout)
    checkpointed = checkpointed_blocks(shape.n_layers, layout)
    blocks = (shape.n_layers - checkpointed) * per_token["block"] + checkpointed * per_token["checkpointed"]
    return layout.seq_len * layout.local_batch_size * (blocks + per_token["head"] + per_token["loss"])


@dataclass(frozen=True)
class Plan:
    """One rank's device memory by part (bytes) against a core's memory; the host memory of a node."""

    parts: dict[str, float]
    device_limit: float
    host_parts: dict[str, float]
    host_limit: float

    @property
    def device_total(self) -> float:
        return sum(self.parts.values())

    @property
    def host_total(self) -> float:
        return sum(self.host_parts.values())

    @property
    def fits(self) -> bool:
        return self.device_total <= self.device_limit and self.host_total <= self.host_limit


def plan(shape: Shape, layout: Layout, *, core_memory_gib: float, host_memory_gib: float,
         processes_per_node: int) -> Plan:
    """The plan of one rank (rank 0, the largest shard) of ``layout`` on a core of ``core_memory_gib``."""
    if layout.ac_mode not in AC_MODES:
        raise ValueError(f"activation checkpointing mode {layout.ac_mode!r}: one of {', '.join(AC_MODES)}")
    shards = shard_bytes(shape, layout)
    tokens = layout.seq_len * layout.local_batch_size
    per_token = activations_per_token(shape, layout)
    # A checkpointed block recomputed in the backward lives again whole, with its gradients beside it; without
    # checkpointing, the last block's gradients beside everything saved. The logits' fp32 gradient beside the loss.
    transient = tokens * per_token["block"] * (2 if checkpointed_blocks(shape.n_layers, layout) else 1)
    loss = tokens * (per_token["loss"] + 4 * _chunk(shape.vocab, layout.tp))
    largest = max(shape.block_parameters() / layout.tp, shape.vocab * shape.dim / layout.tp)
    gathered = 2 * COMPUTE_BYTES * largest + (COMPUTE_BYTES + 4) * largest
    limit = core_memory_gib * GIB
    parts = {
        "parameters (fp32 shard)": shards["parameters"],
        "gradients (fp32 shard)": shards["gradients"],
        "optimizer state (AdamW, fp32)": shards["optimizer"],
        f"activations ({layout.ac_mode} checkpointing)":
            saved_activations(shape, layout) - tokens * per_token["loss"] + transient,
        "logits and loss (vocabulary shard)": loss,
        "gathered parameters and gradients (FSDP2)": gathered,
        "Neuron runtime reserve": RUNTIME_RESERVE * limit,
    }
    # While loading: each process's own needs and, restoring a checkpoint, its shard staged in host memory.
    host_parts = {
        "processes": processes_per_node * HOST_PROCESS_GIB * GIB,
        "checkpoint shards staged while loading": processes_per_node * (shards["parameters"] + shards["optimizer"]),
    }
    return Plan(parts=parts, device_limit=limit, host_parts=host_parts, host_limit=host_memory_gib * GIB)


def shard_bytes(shape: Shape, layout: Layout) -> dict[str, int]:
    """Rank 0's exact bytes of parameters, gradients and optimizer state (what the rehearsal measures)."""
    local = local_parameters(shape, layout)
    return {"parameters": PARAMETER_BYTES * local, "gradients": GRADIENT_BYTES * local,
            "optimizer": OPTIMIZER_BYTES * local}


def full_model_bytes(shape: Shape) -> int:
    """The whole model in fp32: what every rank held before it was sharded, when each built it whole."""
    return PARAMETER_BYTES * shape.parameters()


