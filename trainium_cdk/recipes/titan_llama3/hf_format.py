"""Llama 3 weights between TorchTitan's names and Hugging Face's (``LlamaForCausalLM``): the start of a run from a
Hugging Face checkpoint (``[checkpoint] initial_load_path``) and its export when it ends (``last_save_in_hf``).

TorchTitan's RoPE turns adjacent pairs of a head's dimensions (complex numbers); Hugging Face's turns the first half
against the second. The q and k projections are permuted between the two orders, as Hugging Face's own Llama
conversion script (and TorchTitan's state-dict adapter) does. Names of TorchTitan 0.3 (``attention.qkv_linear.wq``,
``lm_head``) and 0.2 (``attention.wq``, ``output``) map alike. Standard library and torch only (the recipe's image).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import fit_plan
import torch

CONFIG = "config.json"
# The RoPE TorchTitan's Llama 3 uses (ComplexRoPE, scaling "llama": Llama 3.1's), as Hugging Face writes it.
ROPE_THETA = 500000.0
ROPE_SCALING: dict[str, Any] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
NORM_EPS = 1e-5  # TorchTitan's RMSNorm

_LAYER = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_TOP = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
        "lm_head.weight": "lm_head.weight", "output.weight": "lm_head.weight"}


def hf_name(name: str) -> str:
    """Hugging Face's name of TorchTitan's parameter ``name``."""
    plain = name.replace(".qkv_linear.", ".")
    if plain in _TOP:
        return _TOP[plain]
    found = re.fullmatch(r"layers\.(\d+)\.(.+)", plain)
    if not found or found.group(2) not in _LAYER:
        raise KeyError(f"no Hugging Face name for {name}")
    return f"model.layers.{found.group(1)}.{_LAYER[found.group(2)]}"


def _heads_to_hf(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Adjacent pairs (TorchTitan) to halves (Hugging Face), per head."""
    out, columns = weight.shape
    return weight.view(heads, out // heads // 2, 2, columns).transpose(1, 2).reshape(out, columns)


def _heads_from_hf(weight: torch.Tensor, heads: int) -> torch.Tensor:
    out, columns = weight.shape
    return weight.view(heads, 2, out // heads // 2, columns).transpose(1, 2).reshape(out, columns)


def _heads_of(hf: str, size: Mapping[str, Any]) -> int | None:
    if hf.endswith("q_proj.weight"):
        return int(size["n_heads"])
    if hf.endswith("k_proj.weight"):
        return int(size["n_kv_heads"])
    return None


def to_hf(state: Mapping[str, torch.Tensor], size: Mapping[str, Any], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """TorchTitan's full state dict as Hugging Face's tensors, in ``dtype``."""
    out = {}
    for name, tensor in state.items():
        hf = hf_name(name)
        heads = _heads_of(hf, size)
        value = _heads_to_hf(tensor, heads) if heads else tensor
        out[hf] = value.to(dtype).contiguous()
    return out


def from_hf(hf: Mapping[str, torch.Tensor], names: Iterable[str], size: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors of TorchTitan's parameters ``names`` from a Hugging Face state dict (its rotary buffers left out);
    a parameter it lacks raises KeyError naming it."""
    out = {}
    for name in names:
        key = hf_name(name)
        if key not in hf:
            raise KeyError(f"the checkpoint has no {key} (for {name})")
        heads = _heads_of(key, size)
        out[name] = _heads_from_hf(hf[key], heads) if heads else hf[key]
    return out


def config(size: Mapping[str, Any], vocab: int, *, seq_len: int, dtype: str, eos: int | None) -> dict[str, Any]:
    """Hugging Face's config.json of a Llama 3 of ``size`` (knobs.FLAVORS) at ``vocab``."""
    made: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": size["dim"],
        "intermediate_size": fit_plan.ffn_hidden(size["dim"], size["ffn_multiple_of"], size["ffn_multiplier"]),
        "num_hidden_layers": size["n_layers"],
        "num_attention_heads": size["n_heads"], "num_key_value_heads": size["n_kv_heads"],
        "head_dim": size["dim"] // size["n_heads"], "vocab_size": vocab, "hidden_act": "silu",
        "rms_norm_eps": NORM_EPS, "rope_theta": ROPE_THETA, "rope_scaling": dict(ROPE_SCALING),
        "max_position_embeddings": max(seq_len, int(ROPE_SCALING["original_max_position_embeddings"])),
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "torch_dtype": dtype,
    }
    if eos is not None:
        made["eos_token_id"] = eos
    return made


def mismatch(found: Mapping[str, Any], size: Mapping[str, Any], vocab: int) -> str | None:
    """What in a Hugging Face config.json differs from the job's model (None: nothing)."""
    wanted = config(size, vocab, seq_len=0, dtype="", eos=None)
    # transformers 5 writes RoPE as rope_parameters (rope_theta inside); Llama 3's own configs as rope_theta and
    # rope_scaling.
    rope = found.get("rope_parameters") or {}
    found = {**found, "rope_theta": found.get("rope_theta") or rope.get("rope_theta")}
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "vocab_size", "rope_theta")
    wrong = [f"{k} {found.get(k)} (the job's: {wanted[k]})" for k in keys if found.get(k) != wanted[k]]
    if found.get("model_type") != "llama":
        wrong.append(f"model_type {found.get('model_type')} (a llama)")
    scaling = found.get("rope_scaling") or rope
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3" or any(scaling.get(k) != v for k, v in ROPE_SCALING.items() if k != "rope_type"):
        wrong.append(f"rope_scaling {scaling} (Llama 3.1's: {ROPE_SCALING})")
    if found.get("tie_word_embeddings"):
        wrong.append("tie_word_embeddings true (the recipe's output layer is its own)")
    return "; ".join(wrong) or None
