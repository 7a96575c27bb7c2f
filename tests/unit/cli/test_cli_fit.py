"""`trn fit` (trainium_cdk/cli/fit.py) through the verb, on a native-track config as a user writes it: titan-llama3's
memory plan per rank against one NeuronCore of trn2.48xlarge, its exit status, the change it names when a job does
not fit, and the same check in front of `trn submit --job` and `trn rehearse --job`. The plan's figures are checked
against a CPU rehearsal's measurement in tests/unit/jobs/test_recipe_titan_llama3.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli_support import NATIVE_TRN2, assert_one_clean_line, run_cli

# A native-track deployment of 2 x trn2.48xlarge in us-east-2 (the recipes page's config/titan.yaml), up to 4.
NATIVE = {**NATIVE_TRN2, "compute_groups": [{**NATIVE_TRN2["compute_groups"][0], "max_nodes": 4}]}
TOTAL = re.compile(r"^  total +([\d.]+) GiB of ([\d.]+) GiB: (fits|does not fit)$", re.M)


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "titan.yaml"
    path.write_text(yaml.safe_dump(NATIVE, sort_keys=False))
    return str(path)


def _totals(out: str) -> list[tuple[float, float, bool]]:
    """(total GiB, limit GiB, said to fit) of the device and the host tables."""
    return [(float(total), float(limit), verdict == "fits") for total, limit, verdict in TOTAL.findall(out)]


def _parts(out: str) -> dict[str, float]:
    return {name.strip(): float(value) for name, value in re.findall(r"^  (\S.*?) +([\d.]+) GiB$", out, re.M)}


def test_the_recipe_at_its_defaults_fits_two_trn2_nodes(config):
    result = run_cli("fit", "--config", config, "--job", "titan-llama3")
    assert result.code == 0, result.err
    assert result.out.startswith("titan-llama3 on 2 x trn2.48xlarge: Llama 3 8B (8.03B parameters), 128 ranks as "
                                 "FSDP 32 x TP 4, seq_len 8192, local batch 1, activation checkpointing selective")
    # One logical NeuronCore of a trn2 at LNC=2: 96 GiB x 16 devices / 64 cores.
    (device, host) = _totals(result.out)
    assert device[1] == 24.0 and device[0] < 24.0 and device[2]
    assert host[1] == 2048.0 and host[2]
    parts = _parts(result.out)
    # 8.03B parameters x 4 bytes over 128 ranks (every weight split by TP and FSDP but the norms).
    assert parts["parameters (fp32 shard)"] == pytest.approx(8.03e9 * 4 / 128 / 2**30, abs=0.01)
    assert parts["optimizer state (AdamW, fp32)"] == pytest.approx(2 * parts["parameters (fp32 shard)"], abs=0.01)
    assert result.out.rstrip().endswith("\nfits")


def test_70b_on_one_node_at_batch_8_does_not_fit_and_the_named_change_does(config):
    result = run_cli("fit", "--config", config, "--job", "titan-llama3", "--nodes", "1",
                     "--env", "TITAN_MODEL_FLAVOR=70B", "--env", "TITAN_TRAINING_LOCAL_BATCH_SIZE=8")
    assert result.code == 1, result.err
    (device, _host) = _totals(result.out)
    assert device[0] > device[1] and not device[2]
    verdict = result.out.rstrip().splitlines()[-1]
    assert verdict.startswith("does not fit: fits with --nodes 2 "), verdict
    # What it names, put in place of the command's own values, fits.
    words = shlex.split(verdict.removeprefix("does not fit: fits with "))
    named = dict(zip(words[::2], words[1::2], strict=True))
    env = {"TITAN_MODEL_FLAVOR": "70B", "TITAN_TRAINING_LOCAL_BATCH_SIZE": "8"}
    env |= dict(pair.split("=", 1) for flag, pair in zip(words[::2], words[1::2], strict=True) if flag == "--env")
    assert env == {"TITAN_MODEL_FLAVOR": "70B", "TITAN_TRAINING_LOCAL_BATCH_SIZE": "1",
                   "TITAN_ACTIVATION_CHECKPOINT_MODE": "full"}
    again = run_cli("fit", "--config", config, "--job", "titan-llama3", "--nodes", named["--nodes"],
                    *[w for k, v in env.items() for w in ("--env", f"{k}={v}")])
    assert again.code == 0, again.out
    assert "70B" in again.out and _totals(again.out)[0][2]


@pytest.mark.parametrize("env", [
    (), ("TITAN_ACTIVATION_CHECKPOINT_MODE=none",), ("TITAN_ACTIVATION_CHECKPOINT_MODE=full",),
    ("TITAN_TRAINING_SEQ_LEN=32768",), ("TITAN_MODEL_FLAVOR=1B", "TITAN_TRAINING_LOCAL_BATCH_SIZE=4"),
    ("TITAN_MODEL_FLAVOR=70B",), ("TITAN_PARALLELISM_TENSOR_PARALLEL_DEGREE=8",),
])
def test_the_exit_status_agrees_with_the_figures_printed(config, env):
    result = run_cli("fit", "--config", config, "--job", "titan-llama3", *[w for e in env for w in ("--env", e)])
    totals = _totals(result.out)
    assert len(totals) == 2, result.out + result.err
    for total, limit, said in totals:
        assert said == (total <= limit), result.out
    parts = _parts(result.out)
    device_parts = [v for k, v in parts.items() if k != "total"][:7]
    assert sum(device_parts) == pytest.approx(totals[0][0], abs=0.05)
    assert result.code == (0 if all(said for *_, said in totals) else 1)


def test_without_checkpointing_the_8b_job_does_not_fit_and_selective_is_named(config):
    result = run_cli("fit", "--config", config, "--job", "titan-llama3", "--env", "TITAN_ACTIVATION_CHECKPOINT_MODE=none")
    assert result.code == 1
    assert result.out.rstrip().endswith("does not fit: fits with --env TITAN_ACTIVATION_CHECKPOINT_MODE=selective")


def test_a_script_of_your_own_gets_what_cannot_be_known_and_the_limits(config):
    result = run_cli("fit", "--config", config, "--", "train.py", "--lr", "3e-4")
    assert result.code == 0, result.err
    assert "cannot know what your script keeps in memory" in result.out
    assert "24 GiB of device memory a NeuronCore (64 NeuronCores a node" in result.out
    assert "2048 GiB of host memory a node" in result.out


def test_mistakes_are_one_line(config):
    assert_one_clean_line(run_cli("fit", "--config", config, "--job", "titan-llama3", "--env", "TITAN_MODEL_FLAVOR=9B"),
                          "--env", "TITAN_MODEL_FLAVOR=9B", "tiny, debugmodel, 1B, 8B, 70B")
    assert_one_clean_line(run_cli("fit", "--config", config, "--job", "titan-llama3", "--env",
                                  "TITAN_TRAINING_LOCAL_BATCH_SIZE=two"), "TITAN_TRAINING_LOCAL_BATCH_SIZE")
    assert_one_clean_line(run_cli("fit", "--config", config, "--job", "titan-llama3", "--env",
                                  "TITAN_ACTIVATION_CHECKPOINT_MODE=op"), "none, selective, full")
    assert_one_clean_line(run_cli("fit", "--config", config, "--job", "nope"), "--job", "nope")
    assert_one_clean_line(run_cli("fit", "--config", config), "--job", "your training command after --")


def test_on_trn1_the_llm_recipes_are_refused_with_the_reason(tmp_path):
    # The xla track (trn1's: TorchNeuron runs on Trn2 and Trn3 only) offers no LLM recipe: one line, as submit says.
    path = tmp_path / "trn1.yaml"
    path.write_text(yaml.safe_dump({"region": "us-west-2", "backends": ["batch"], "neuron": {"track": "xla"},
                                    "compute_groups": [{"name": "train", "instance_type": "trn1.32xlarge"}]}))
    assert_one_clean_line(run_cli("fit", "--config", str(path), "--job", "titan-llama3"),
                          "--job", "titan-llama3", "a recipe of neuron.track xla: titan-llama3 runs on native")


def test_submit_and_rehearse_stop_on_a_job_that_does_not_fit_unless_told(config, no_credentials):
    too_big = ("--env", "TITAN_MODEL_FLAVOR=70B", "--env", "TITAN_TRAINING_LOCAL_BATCH_SIZE=8", "--nodes", "1")
    for verb in (("submit", "--backend", "batch", "--dry-run"), ("rehearse", "--backend", "batch")):
        stopped = run_cli(*verb, "--config", config, "--job", "titan-llama3", *too_big)
        assert stopped.code == 1, stopped.err
        (line,) = stopped.err.strip().splitlines()
        assert line.startswith(f"trn {verb[0]}: does not fit (")
        assert "fits with --nodes 2 " in line and "--skip-fit submits anyway" in line
    told = run_cli("submit", "--backend", "batch", "--dry-run", "--config", config, "--job", "titan-llama3", *too_big,
                   "--skip-fit")
    assert told.code == 0, told.err
    assert "does not fit" in told.err and "going on (--skip-fit)" in told.err
    assert "SubmitJob:" in told.out


def _catalog_figures() -> dict[str, Any]:
    from trainium_cdk.facts.catalog import DEFAULT_CATALOG

    return {name: (DEFAULT_CATALOG.get(name).core_memory_gib, DEFAULT_CATALOG.get(name).peak_bf16_tflops)
            for name in ("trn1.2xlarge", "trn1.32xlarge", "trn2.48xlarge")}


def test_the_catalog_gives_a_cores_memory_and_a_nodes_peak():
    # Neuron's architecture pages: Trainium 32 GiB and 190 BF16 TFLOPS a device (trn1.32xlarge: 3,040 TFLOPS),
    # Trainium2 96 GiB and 667.
    assert _catalog_figures() == {"trn1.2xlarge": (16.0, 190.0), "trn1.32xlarge": (16.0, 3040.0),
                                  "trn2.48xlarge": (24.0, 10672.0)}
