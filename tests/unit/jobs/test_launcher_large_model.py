"""What the launcher does for large models on every backend: the open-files limit, the compile cache before the
job's own compiler flags, and precompile as Neuron's graph extraction (a few steps, no checkpoint directory).

torchrun and neuron_parallel_compile are stand-ins that print what they were given (the training itself runs
in tests/e2e/test_rehearsal.py); each node starts, like a process of slurmd or containerd, with systemd's default
soft limit of 1024 open files and the hard limit this machine allows.
"""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import pytest

from trainium_cdk.facts import defaults
from trainium_cdk.runtime.launcher import launch_command

NODE_SOFT_LIMIT = 1024  # systemd's DefaultLimitNOFILE soft limit, what a daemon's children start with
_, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)
# What torchrun prints here: its arguments, then what it got that this module is about.
TORCHRUN = ('echo "torchrun open_files=$(ulimit -Sn) cc_flags=${NEURON_CC_FLAGS-unset} ckpt=${TRN_CHECKPOINT_DIR-unset} '
            'warmup=${TRN_WARMUP_STEPS-unset} $*"\n')
# neuron_parallel_compile as Neuron documents it: the command, with NEURON_EXTRACT_GRAPHS_ONLY=1.
PARALLEL_COMPILE = (
    'echo "neuron_parallel_compile steps=${TRN_PRECOMPILE_STEPS-unset} ckpt=${TRN_CHECKPOINT_DIR-unset}"\n'
    'NEURON_EXTRACT_GRAPHS_ONLY=1 exec "$@"\n'
)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in {"torchrun": TORCHRUN, "neuron_parallel_compile": PARALLEL_COMPILE}.items():
        path = folder / name
        path.write_text("#!/bin/sh\n" + text)
        path.chmod(0o755)
    return folder


def _node_limits() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(NODE_SOFT_LIMIT, HARD), HARD))


def launch(bin_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NPROC_PER_NODE": "2", **env}
    return subprocess.run(
        launch_command(["train.py", "--epochs", "4"]), env=full, capture_output=True, text=True, check=False,
        preexec_fn=_node_limits,
    )


def torchrun_lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, str]]:
    """Each torchrun (or neuron_parallel_compile) line: its name and its key=value words."""
    assert result.returncode == 0, result.stderr
    lines = []
    for line in result.stdout.splitlines():
        name, *words = line.split()
        lines.append({"name": name, **dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("--"))})
    return lines


# -- open files ----------------------------------------------------------------------------------------


def test_the_soft_limit_of_open_files_is_raised_to_neurons_65535_or_the_hard_limit(bin_dir):
    result = launch(bin_dir, {})
    (run,) = torchrun_lines(result)
    expected = min(defaults.OPEN_FILES, HARD)
    assert defaults.OPEN_FILES == 65535 and int(run["open_files"]) == expected > NODE_SOFT_LIMIT
    assert f"trainium-launch: open files: soft limit {expected}, hard limit {HARD}" in result.stderr
    # A hard limit under Neuron's number (this machine's may be): said, and the soft limit goes up to it.
    assert ("WARNING: open files: hard limit" in result.stderr) == (HARD < defaults.OPEN_FILES)


def test_a_job_asks_for_its_own_number_of_open_files(bin_dir):
    (run,) = torchrun_lines(launch(bin_dir, {"TRN_OPEN_FILES": "4096"}))
    assert int(run["open_files"]) == min(4096, HARD)


def test_a_soft_limit_above_the_one_asked_for_is_never_lowered(bin_dir):
    (run,) = torchrun_lines(launch(bin_dir, {"TRN_OPEN_FILES": str(NODE_SOFT_LIMIT // 2)}))
    assert int(run["open_files"]) == min(NODE_SOFT_LIMIT, HARD)


def test_a_number_of_open_files_that_is_not_a_number_stops_the_job(bin_dir):
    result = launch(bin_dir, {"TRN_OPEN_FILES": "lots"})
    assert result.returncode != 0 and "torchrun" not in result.stdout
    assert "TRN_OPEN_FILES=lots: a number" in result.stderr


# -- compiler flags ------------------------------------------------------------------------------------


def test_the_cache_goes_before_the_tracks_compiler_flags(bin_dir, tmp_path):
    cache = tmp_path / "cache"
    env = {"TRN_CACHE_DIR": str(cache), "NEURON_CC_FLAGS": "--model-type transformer"}
    (run,) = torchrun_lines(launch(bin_dir, env))
    assert run["cc_flags"] == f"--cache_dir={cache}"  # the first word; the track's flags follow it
    result = launch(bin_dir, env)
    assert f"cc_flags=--cache_dir={cache} --model-type transformer ckpt=" in result.stdout


def test_compiler_flags_that_name_their_own_cache_keep_it(bin_dir, tmp_path):
    env = {"TRN_CACHE_DIR": str(tmp_path / "cache"), "NEURON_CC_FLAGS": "-O1 --cache_dir=/mine"}
    result = launch(bin_dir, env)
    assert "cc_flags=-O1 --cache_dir=/mine ckpt=" in result.stdout
    assert "NEURON_CC_FLAGS has a --cache_dir: TRN_CACHE_DIR unused" in result.stderr


# -- precompile ----------------------------------------------------------------------------------------


def test_precompile_extracts_a_few_steps_without_the_checkpoint_directory_then_trains(bin_dir, tmp_path):
    env = {
        "TRN_PRECOMPILE": "1", "TRN_PRECOMPILE_STEPS": "3", "TRN_CHECKPOINT_ROOT": str(tmp_path / "ckpt"),
        "TRN_JOB_NAME": "llama",
    }
    result = launch(bin_dir, env)
    extraction, trial, run = torchrun_lines(result)
    assert extraction == {"name": "neuron_parallel_compile", "steps": "3", "ckpt": "unset"}
    assert trial["name"] == run["name"] == "torchrun"
    assert trial["ckpt"] == "unset" and run["ckpt"] == str(tmp_path / "ckpt" / "llama")
    # The same command both times (Neuron: only the step count may differ, or the cache misses).
    _, trial_argv, run_argv = (line.split(" --nnodes=")[-1] for line in result.stdout.splitlines())
    assert trial_argv == run_argv and run_argv.endswith("train.py --epochs 4")
    assert "precompile: graph extraction over 3 steps" in result.stderr


def test_precompile_steps_default_to_neurons_few(bin_dir):
    (extraction, _, _) = torchrun_lines(launch(bin_dir, {"TRN_PRECOMPILE": "1"}))
    assert extraction["steps"] == str(defaults.PRECOMPILE_STEPS) == "10"


@pytest.mark.parametrize("steps", ["0", "010", "ten", ""])
def test_a_step_cap_that_is_not_a_positive_number_stops_the_job(bin_dir, steps):
    result = launch(bin_dir, {"TRN_PRECOMPILE": "1", "TRN_PRECOMPILE_STEPS": steps})
    if steps == "":  # empty: the default
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode != 0 and result.stdout == ""
    assert f"TRN_PRECOMPILE_STEPS={steps}: 1 or more steps" in result.stderr


def test_precompile_without_neuron_parallel_compile_says_so(bin_dir):
    (bin_dir / "neuron_parallel_compile").unlink()  # the native track's image: torch-xla's tool is not there
    result = launch(bin_dir, {"TRN_PRECOMPILE": "1"})
    assert result.returncode != 0 and result.stdout == ""
    assert "TRN_PRECOMPILE=1: no neuron_parallel_compile" in result.stderr


def test_native_precompile_is_a_warm_up_of_real_steps_without_neuron_parallel_compile(bin_dir, tmp_path):
    """TorchNeuron has no graph extraction (neuron_parallel_compile and NEURON_EXTRACT_GRAPHS_ONLY are PyTorch/XLA's,
    absent from the native image): the same command trains TRN_PRECOMPILE_STEPS real steps into the compile cache,
    told so by TRN_WARMUP_STEPS, without the checkpoint directory; then the run, which has neither."""
    (bin_dir / "neuron_parallel_compile").unlink()
    env = {"TRN_NEURON_TRACK": "native", "TRN_PRECOMPILE": "1", "TRN_PRECOMPILE_STEPS": "3",
           "TRN_CHECKPOINT_ROOT": str(tmp_path / "ckpt"), "TRN_JOB_NAME": "llama", "TRN_CACHE_DIR": str(tmp_path / "c")}
    result = launch(bin_dir, env)
    warm_up, run = torchrun_lines(result)
    assert (warm_up["name"], warm_up["warmup"], warm_up["ckpt"]) == ("torchrun", "3", "unset")
    assert (run["warmup"], run["ckpt"]) == ("unset", str(tmp_path / "ckpt" / "llama"))
    warm_argv, run_argv = (line.split(" --nnodes=")[-1] for line in result.stdout.splitlines())
    assert warm_argv == run_argv and run_argv.endswith("train.py --epochs 4")
    assert "precompile: warm-up, 3 training step(s) into the compile cache" in result.stderr
    assert "neuron_parallel_compile" not in result.stdout + result.stderr


def test_a_failed_extraction_stops_the_job_before_the_run(bin_dir):
    (bin_dir / "neuron_parallel_compile").write_text("#!/bin/sh\nexit 3\n")
    result = launch(bin_dir, {"TRN_PRECOMPILE": "1"})
    assert result.returncode == 3 and "torchrun" not in result.stdout
