"""What one rank of hf-lora holds in device memory, part by part, computed from the base model's config.json and the
job's knobs: the plan `trn fit --job hf-lora` prints and checks before a node is paid for (titan-llama3's Plan).

hf-lora is data-parallel (DDP): every NeuronCore holds a whole replica of the frozen base model in HF_LORA_DTYPE,
and beside it the LoRA adapters in fp32 with their gradients, AdamW's two moments and DDP's gradient bucket. Nothing
is sharded, so the base model's size alone decides which models a NeuronCore can fine-tune: titan-llama3 shards.

What autograd saves for the backward, per token of a decoder block (transformers' LlamaDecoderLayer under PEFT, bf16
autocast), counted op by op and checked against the CPU rehearsal (saved_tensors_hooks; the rehearsal test):

- the two RMSNorms: their fp32 input and the inverse RMS (4h + 4 bytes each). The first block's input norm saves
  nothing: the embedding is frozen, so nothing before it needs a gradient;
- each LoRA'd projection: the dropout's mask (fp32, the input's dtype: PEFT casts the input to the adapters'), the
  bf16 input of lora_A and lora_A's bf16 output (4 in + 2 in + 2 r); no mask with HF_LORA_DROPOUT=0, and none in the
  first block for the projections that read its input (q, k, v, gate, up);
- attention (SDPA): q, k, v and its output in bf16, and the fp32 log-sum-exp of each head;
- the SwiGLU MLP: the gate's and the up projection's outputs and silu's, in bf16 (6 f);
- the frozen projections save nothing (their weight needs no gradient); each LoRA'd one keeps the bf16 copies
  autocast made of its adapters (per block, not per token), but lora_A's in the first block for the projections
  that read its input;
- after the last block: the final norm, and the loss's fp32 log-softmax of the vocabulary and the target ids;
- once: RoPE's bf16 cos and sin tables (positions are alike in every sequence of the batch), without checkpointing.

With gradient checkpointing (HF_LORA_GRADIENT_CHECKPOINTING=1, non-reentrant) a block keeps only its bf16 input
(2 h), and one block lives again while it is recomputed. Neuron's compiler may keep less (fusion) or more (its own scratch): these
are the eager graph's figures. On Neuron the dropout's mask may be a byte an element (native_dropout); the plan
counts the CPU's fp32 mask, the larger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# One rank's parts against a core, and titan-llama3's margins: the runtime's reserve of a NeuronCore and a process's
# own host memory (our figures; Neuron publishes neither). This plan runs in the CLI only, not in the recipe's image.
from trainium_cdk.recipes.titan_llama3.fit_plan import GIB, HOST_PROCESS_GIB, RUNTIME_RESERVE, Plan

ADAPTER_BYTES = 4  # PEFT keeps the adapters in fp32 (autocast_adapter_dtype)
# Per adapter parameter: fp32 weight, fp32 gradient, AdamW's two fp32 moments, DDP's fp32 gradient bucket.
TRAINABLE_BYTES = 4 + 4 + 8 + 4
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The projections that read a block's (normed) input, and whose dropout in the first block saves no mask.
READ_THE_BLOCK_INPUT = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}
CONFIG_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class Shape:
    """A Llama-architecture causal LM's sizes, as its config.json gives them."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @classmethod
    def of(cls, config: dict[str, Any]) -> Shape:
        """From a transformers config.json; KeyError names a size it lacks (not a decoder of this shape)."""
        missing = [key for key in CONFIG_KEYS if not isinstance(config.get(key), int)]
        if missing:
            raise KeyError(", ".join(missing))
        heads = config["num_attention_heads"]
        return cls(hidden=config["hidden_size"], intermediate=config["intermediate_size"],
                   layers=config["num_hidden_layers"], heads=heads,
                   kv_heads=config.get("num_key_value_heads") or heads,
                   head_dim=config.get("head_dim") or config["hidden_size"] // heads, vocab=config["vocab_size"],
                   tied=bool(config.get("tie_word_embeddings", False)))

    def projection(self, name: str) -> tuple[int, int]:
        """(in, out) features of a block's projection."""
        h, f, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, f),
                "up_proj": (h, f), "down_proj": (f, h)}[name]

    def parameters(self) -> int:
        block = sum(i * o for i, o in map(self.projection, PROJECTIONS)) + 2 * self.hidden
        return self.layers * block + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden


@dataclass(frozen=True)
class Job:
    """The knobs of an hf-lora job that decide its memory (knobs.py)."""

    seq_len: int
    batch: int
    rank: int
    targets: tuple[str, ...]
    dtype_bytes: int = 2
    dropout: bool = True
    checkpointing: bool = False


def adapter_parameters(shape: Shape, job: Job) -> int:
    """LoRA's A (rank x in) and B (out x rank) of each targeted projection of each block."""
    return shape.layers * sum(job.rank * (i + o) for i, o in map(shape.projection, job.targets))


def block_per_token(shape: Shape, job: Job, *, first: bool = False) -> int:
    """Bytes one block saves per token without checkpointing (see the module's docstring)."""
    h = shape.hidden
    norms = (0 if first else 4 * h + 4) + 4 * h + 4
    lora = 0
    for name in job.targets:
        width, _ = shape.projection(name)
        mask = 4 * width if job.dropout and not (first and name in READ_THE_BLOCK_INPUT) else 0
        lora += mask + 2 * width + 2 * job.rank
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    attention = 2 * q + 2 * kv + 2 * kv + 2 * q + 4 * shape.heads
    return norms + lora + attention + 6 * shape.intermediate


def adapter_copies(shape: Shape, job: Job) -> int:
    """autocast's bf16 copies of the adapters, saved for the backward (per block, not per token); in the first block
    lora_A's of the projections that read its input are not (that input needs no gradient)."""
    first = sum(job.rank * shape.projection(name)[0] for name in job.targets if name in READ_THE_BLOCK_INPUT)
    return 2 * (adapter_parameters(shape, job) - first)


def saved_activations(shape: Shape, job: Job) -> int:
    """Bytes one rank's forward (and loss) saves for the backward: what the rehearsal measures."""
    tokens = job.seq_len * job.batch
    if job.checkpointing:
        blocks = shape.layers * 2 * shape.hidden * tokens
    else:
        blocks = tokens * (block_per_token(shape, job, first=True)
                           + (shape.layers - 1) * block_per_token(shape, job)) + adapter_copies(shape, job)
    head = tokens * (4 * shape.hidden + 4 + 4 * shape.vocab + 8)
    # One (1, seq_len, head_dim) table of each (positions are alike in every sequence), saved by the blocks that
    # are not recomputed.
    rope = 0 if job.checkpointing else 2 * 2 * job.seq_len * shape.head_dim
    return blocks + head + rope


def plan(shape: Shape, job: Job, *, core_memory_gib: float, host_memory_gib: float, processes_per_node: int) -> Plan:
    """The plan of one rank on a core of ``core_memory_gib``: every rank's is the same (DDP)."""
    tokens = job.seq_len * job.batch
    adapters = adapter_parameters(shape, job)
    # In the backward: the logits' bf16 output and fp32 gradient beside the loss; one block's activations again
    # (recomputed, with checkpointing) and the gradients flowing through it.
    block = tokens * block_per_token(shape, job)
    transient = (2 if job.checkpointing else 1) * block
    limit = core_memory_gib * GIB
    base = job.dtype_bytes * shape.parameters()
    parts = {
        f"base model ({job.dtype_bytes * 8}-bit, a whole replica: DDP)": base,
        "LoRA adapters, gradients, AdamW, DDP bucket (fp32)": TRAINABLE_BYTES * adapters,
        "activations (" + ("gradient checkpointing" if job.checkpointing else "no checkpointing") + ")":
            saved_activations(shape, job) - tokens * 4 * shape.vocab + transient,
        "logits and loss": tokens * (2 + 4 + 4) * shape.vocab,
        "Neuron runtime reserve": RUNTIME_RESERVE * limit,
    }
    # While loading: each process reads the whole base model into host memory before moving it to its core.
    host_parts = {"processes": processes_per_node * HOST_PROCESS_GIB * GIB,
                  "base model loaded by every process": processes_per_node * base}
    return Plan(parts=parts, device_limit=limit, host_parts=host_parts, host_limit=host_memory_gib * GIB)


def state_bytes(shape: Shape, job: Job) -> dict[str, int]:
    """Exact bytes of what the rehearsal reports after a step: the base model, the adapters, AdamW's state."""
    adapters = adapter_parameters(shape, job)
    return {"base": job.dtype_bytes * shape.parameters(), "adapters": ADAPTER_BYTES * adapters,
            "optimizer": 8 * adapters}
