"""`trn fit --job hf-lora` through the verb: the LoRA recipe's plan per rank (a whole replica of the base model on
every NeuronCore: DDP) from the base model's config.json where this machine has it, against one NeuronCore of
trn2.48xlarge; what it names when a job does not fit (gradient checkpointing for an 8B model, nothing but another
recipe for 70B); what it says when the config is not here; the same check in front of `trn submit --job`.

The configs are upstream's sizes, not ours: Llama-2-7B is transformers' LlamaConfig at its defaults ("a similar
configuration to that of the LLaMA-7B", its docstring); Llama 3 8B and 70B are TorchTitan's registry sizes
(titan-llama3's knobs.FLAVORS, with Llama 3's vocabulary), written as transformers' config.json. The plan's
figures are checked against a CPU rehearsal's measurement in tests/unit/jobs/test_recipe_hf_lora.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.support.cli_support import NATIVE_TRN2, assert_one_clean_line, run_cli
from trainium_cdk.recipes.titan_llama3.fit_plan import LLAMA3_VOCAB, ffn_hidden
from trainium_cdk.recipes.titan_llama3.knobs import FLAVORS

TOTAL = re.compile(r"^  total +([\d.]+) GiB of ([\d.]+) GiB: (fits|does not fit)$", re.M)


def _llama3(flavor: str) -> dict[str, object]:
    size = FLAVORS[flavor]
    return {"hidden_size": size["dim"], "num_hidden_layers": size["n_layers"], "num_attention_heads": size["n_heads"],
            "num_key_value_heads": size["n_kv_heads"], "vocab_size": LLAMA3_VOCAB,
            "intermediate_size": ffn_hidden(size["dim"], size["ffn_multiple_of"], size["ffn_multiplier"])}


def _put(cache: Path, repo: str, **sizes: object) -> None:
    """A model's config.json in a Hugging Face cache as huggingface_hub lays it out (what `hf download` leaves)."""
    from transformers import LlamaConfig

    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "snapshots" / "0123abc").mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123abc")
    (folder / "snapshots" / "0123abc" / "config.json").write_text(LlamaConfig(**sizes).to_json_string())


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A native-track config of 2 x trn2.48xlarge, run from an empty project folder, with a Hugging Face cache that
    holds three models' configs."""
    cache = tmp_path / "hf" / "hub"
    _put(cache, "meta-llama/Llama-2-7b-hf")
    _put(cache, "meta-llama/Llama-3.1-8B", **_llama3("8B"))
    _put(cache, "meta-llama/Llama-3.1-70B", **_llama3("70B"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    path = tmp_path / "native.yaml"
    path.write_text(yaml.safe_dump(NATIVE_TRN2, sort_keys=False))
    return str(path)


def _fit(config: str, model: str, *env: str):  # noqa: ANN202
    return run_cli("fit", "--config", config, "--job", "hf-lora", "--env", f"HF_LORA_MODEL={model}",
                   *[w for e in env for w in ("--env", e)])


def _device(out: str) -> tuple[float, float, bool]:
    total, limit, verdict = TOTAL.findall(out)[0]
    return float(total), float(limit), verdict == "fits"


def test_a_7b_base_model_fits_a_trn2_neuroncore_at_the_defaults(config):
    result = _fit(config, "meta-llama/Llama-2-7b-hf")
    assert result.code == 0, result.out + result.err
    assert result.out.startswith("hf-lora on 2 x trn2.48xlarge: meta-llama/Llama-2-7b-hf (6.74B parameters, 16-bit), "
                                 "LoRA rank 16 on q_proj,k_proj,v_proj,o_proj (16.8M trainable), 128 ranks "
                                 "data-parallel, seq_len 1024, batch 1 a rank, gradient checkpointing off")
    # 6.74B parameters x 2 bytes, whole on each core; 4 projections x 32 blocks x 16 x (4096 + 4096) adapters.
    assert re.search(r"base model \(16-bit, a whole replica: DDP\) +12\.55 GiB", result.out)
    total, limit, fits = _device(result.out)
    assert limit == 24.0 and total <= limit and fits
    assert result.out.rstrip().endswith("\nfits")


def test_an_8b_base_model_needs_gradient_checkpointing_and_fits_with_it(config):
    result = _fit(config, "meta-llama/Llama-3.1-8B")
    assert result.code == 1, result.out + result.err
    assert _device(result.out)[0] > 24.0
    assert result.out.rstrip().endswith("does not fit: fits with --env HF_LORA_GRADIENT_CHECKPOINTING=1")
    named = _fit(config, "meta-llama/Llama-3.1-8B", "HF_LORA_GRADIENT_CHECKPOINTING=1")
    assert named.code == 0, named.out
    assert "gradient checkpointing on" in named.out and _device(named.out)[2]


def test_a_70b_base_model_is_refused_with_the_reason(config):
    result = _fit(config, "meta-llama/Llama-3.1-70B", "HF_LORA_GRADIENT_CHECKPOINTING=1")
    assert result.code == 1
    verdict = result.out.rstrip().splitlines()[-1]
    assert re.fullmatch(r"does not fit: the base model alone needs 13\d\.\d\d GiB of a NeuronCore's 24\.00 \(hf-lora "
                        r"keeps a whole replica on every NeuronCore: it is data-parallel and does not shard the model\): "
                        r"a smaller base model, or titan-llama3, which shards it \(FSDP \+ TP\)", verdict), verdict


@pytest.mark.parametrize("env", [(), ("HF_LORA_SEQ_LEN=4096",), ("HF_LORA_BATCH_SIZE=4",),
                                 ("HF_LORA_TARGETS=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",),
                                 ("HF_LORA_DTYPE=float32",), ("HF_LORA_DROPOUT=0",)])
def test_the_exit_status_agrees_with_the_figures_printed(config, env):
    result = _fit(config, "meta-llama/Llama-3.1-8B", *env)
    totals = [(float(t), float(limit), v == "fits") for t, limit, v in TOTAL.findall(result.out)]
    assert len(totals) == 2, result.out + result.err
    for total, limit, said in totals:
        assert said == (total <= limit), result.out
    assert result.code == (0 if all(said for *_, said in totals) else 1)


def test_a_model_whose_config_is_not_here_is_said_and_submit_goes_on(config, no_credentials):
    result = _fit(config, "HuggingFaceTB/SmolLM2-135M")
    assert result.code == 0, result.err
    assert result.out.startswith("trn fit cannot tell whether hf-lora fits: the sizes of HuggingFaceTB/SmolLM2-135M "
                                 "are in its config.json, which is not on this machine: `hf download "
                                 "HuggingFaceTB/SmolLM2-135M config.json` puts it in the Hugging Face cache")
    assert "24 GiB of device memory a NeuronCore" in result.out
    submitted = run_cli("submit", "--backend", "batch", "--dry-run", "--config", config, "--job", "hf-lora")
    assert submitted.code == 0, submitted.err
    assert ("trn submit --job hf-lora: not checked against the memory of a NeuronCore: the sizes of "
            "HuggingFaceTB/SmolLM2-135M are in its config.json") in submitted.err


def test_a_model_on_fsx_is_read_where_the_rehearsal_keeps_fsx(config):
    from transformers import LlamaConfig

    folder = Path(".trn-rehearse", "fsx", "models", "mine")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(LlamaConfig(**_llama3("1B")).to_json_string())
    result = _fit(config, "/fsx/models/mine")
    assert result.code == 0, result.out + result.err
    assert "/fsx/models/mine (1.50B parameters" in result.out


def test_submit_stops_on_a_base_model_that_cannot_fit_unless_told(config, no_credentials):
    stopped = run_cli("submit", "--backend", "batch", "--dry-run", "--config", config, "--job", "hf-lora",
                      "--env", "HF_LORA_MODEL=meta-llama/Llama-3.1-70B")
    assert stopped.code == 1
    (line,) = stopped.err.strip().splitlines()
    assert line.startswith("trn submit: does not fit (") and "titan-llama3, which shards it" in line


def test_mistakes_are_one_line(config):
    model = "meta-llama/Llama-3.1-8B"
    assert_one_clean_line(_fit(config, model, "HF_LORA_TARGETS=attn"), "HF_LORA_TARGETS=attn", "q_proj, k_proj")
    assert_one_clean_line(_fit(config, model, "HF_LORA_SEQ_LEN=0"), "HF_LORA_SEQ_LEN=0", "a whole number")
    assert_one_clean_line(_fit(config, model, "HF_LORA_DTYPE=int8"), "HF_LORA_DTYPE=int8", "bfloat16")
    assert_one_clean_line(_fit(config, model, "HF_LORA_GRADIENT_CHECKPOINTING=yes"), "0 or 1")
    Path("not-a-model").mkdir()
    Path("not-a-model", "config.json").write_text('{"model_type": "bert"}')
    assert_one_clean_line(_fit(config, "not-a-model"), "HF_LORA_MODEL=not-a-model", "a Llama-architecture causal LM")
