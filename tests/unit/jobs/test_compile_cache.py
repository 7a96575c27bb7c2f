"""The Neuron compile cache's hits and misses per job (issue 34, item 5): the launcher counts what Neuron's compiler
wrapper prints as torchrun's output passes, then prints one JSON line, writes a summary next to the job's checkpoints
and, with TRN_METRICS_DIR, a Prometheus textfile.

The first tests run the launcher with a torchrun stand-in that prints the lines Neuron documents (milliseconds); the
last runs a job twice through `trn rehearse` over one cache, with the rehearsal's compiler stand-in
(trainium_cdk/rehearsal/neuron_cc.py, in the rehearsal's substitution table): the first run compiles, the second
loads every graph from the cache.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli_support import run_cli
from tests.unit.jobs.test_own_job import config  # noqa: F401 (the fixture: the default config with every backend)
from trainium_cdk.cli.compile_cache import summary_of
from trainium_cdk.facts.names import COMPILE_CACHE_HITS_METRIC, COMPILE_CACHE_MISSES_METRIC, METRICS_DIR_VARIABLE
from trainium_cdk.runtime.launcher import COMPILE_CACHE_SUMMARY, launch_command

CACHE = "/fsx/neuron-cache/train/neuronxcc-2.21.33363.0+82129205"
# What torch-neuronx's compiler wrapper prints (Neuron, "Neuron Persistent Cache"; aws-neuron/aws-neuron-sdk#825):
# graph 111 from the cache on two ranks, graph 222 compiled by one rank and then loaded by its peer, graph 333 from the
# cache; the lines go to stderr, one to stdout.
NEURON_LINES = [
    (2, f"2026-11-27 05:00:01.000101:  201  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at {CACHE}/"
        "MODULE_111+e30acd3a/model.neff. Exiting with a successfully compiled graph."),
    (2, f"2026-11-27 05:00:01.000102:  202  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at {CACHE}/"
        "MODULE_111+e30acd3a/model.neff. Exiting with a successfully compiled graph."),
    (2, "2026-11-27 05:00:01.000103:  201  INFO ||NEURON_CC_WRAPPER||: Call compiler with cmd: ['neuronx-cc', "
        "'compile', '--framework', 'XLA', '/tmp/ubuntu/neuroncc_compile_workdir/e8a51bad/model.MODULE_222+e30acd3a"
        ".hlo_module.pb', '--output', '/tmp/ubuntu/neuroncc_compile_workdir/e8a51bad/model.MODULE_222+e30acd3a.neff']"),
    (2, f"2026-11-27 05:00:09.000104:  202  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at {CACHE}/"
        "MODULE_222+e30acd3a/model.neff. Exiting with a successfully compiled graph."),
    (1, f"2026-11-27 05:00:09.000105:  201  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at {CACHE}/"
        "MODULE_333+e30acd3a/model.neff. Exiting with a successfully compiled graph."),
    (1, "step 1 loss 9.1"),
]


def torchrun_stand_in(bin_dir: Path, *, code: int = 0, then_sleep: bool = False) -> None:
    """torchrun that prints the Neuron lines (and its argv) and exits with ``code``; ``then_sleep``: waits for
    SIGTERM, which it records, before exiting 143."""
    lines = "".join(f"echo {shlex.quote(text)} >&{fd}\n" for fd, text in NEURON_LINES)
    tail = ("trap 'echo torchrun got TERM; kill $!; exit 143' TERM\ntouch \"$0.ready\"\nsleep 60 & wait\n" if then_sleep
            else f"exit {code}\n")
    path = bin_dir / "torchrun"
    path.write_text(f"#!/bin/sh\necho \"torchrun $*\"\n{lines}{tail}")
    path.chmod(0o755)


def launch(bin_dir: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NPROC_PER_NODE": "2", "MASTER_PORT": "29500", **env}
    return subprocess.Popen(launch_command(["train.py"]), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def launcher_output(tmp_path: Path, *, job: str = "bert-1127", node: int = 0) -> str:
    """What a node's launcher prints for a run of NEURON_LINES (stdout and stderr as a log holds them)."""
    bin_dir = tmp_path / f"bin-{job}-{node}"
    bin_dir.mkdir()
    torchrun_stand_in(bin_dir)
    # Node 0 alone, or a worker of a Volcano job (EKS): the training chart's rank offset and Volcano's variables.
    volcano = {"TRN_NODE_RANK_OFFSET": "1", "VC_TASK_INDEX": str(node - 1), "VC_LEADER_NUM": "1",
               "VC_WORKER_NUM": str(node), "VC_LEADER_HOSTS": f"{job}-leader-0.{job}"} if node else {}
    proc = launch(bin_dir, {"TRN_JOB_NAME": job, **volcano})
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out + err


def summaries(text: str) -> list[dict[str, object]]:
    return [found for line in text.splitlines() if (found := summary_of(line)) is not None]


# -- the launcher ------------------------------------------------------------------------------------------------


def test_the_launcher_counts_graphs_says_them_in_one_json_line_and_writes_a_summary_and_a_textfile(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torchrun_stand_in(bin_dir, code=3)
    metrics, checkpoints = tmp_path / "metrics", tmp_path / "checkpoints"
    metrics.mkdir()
    proc = launch(bin_dir, {"TRN_JOB_NAME": "bert-1127", "TRN_CHECKPOINT_ROOT": str(checkpoints),
                            METRICS_DIR_VARIABLE: str(metrics)})
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3  # torchrun's own exit code
    # Graphs 111 and 333 came from the cache; 222 was compiled here (its peer's load of it is not a hit).
    expected = {"job": "bert-1127", "node": 0, "hits": 2, "misses": 1}
    assert f'trainium-launch: {json.dumps({COMPILE_CACHE_SUMMARY: expected})}' in err.splitlines()
    # torchrun's output passed through, each line on its own stream, in order.
    assert out.splitlines()[1:] == [t for fd, t in NEURON_LINES if fd == 1]
    assert [line for line in err.splitlines() if "NEURON_CC_WRAPPER" in line] == [t for fd, t in NEURON_LINES if fd == 2]
    summary = checkpoints / "bert-1127" / f".{COMPILE_CACHE_SUMMARY}" / "node-0.json"
    assert json.loads(summary.read_text()) == {COMPILE_CACHE_SUMMARY: expected}
    assert [p.name for p in metrics.iterdir()] == ["bert-1127.prom"]  # renamed into place, no temporary left
    assert (metrics / "bert-1127.prom").read_text() == (
        f"# TYPE {COMPILE_CACHE_HITS_METRIC} counter\n"
        f'{COMPILE_CACHE_HITS_METRIC}{{job="bert-1127",node="0"}} 2\n'
        f"# TYPE {COMPILE_CACHE_MISSES_METRIC} counter\n"
        f'{COMPILE_CACHE_MISSES_METRIC}{{job="bert-1127",node="0"}} 1\n'
    )


def test_a_node_without_a_metrics_folder_gets_no_file_and_no_warning(tmp_path):
    """Slurm and the development instance set TRN_METRICS_DIR on every job; the folder exists only where the node's
    collector runs (observability.prometheus: prometheus_node.py makes it, sticky and world-writable as /tmp, for the
    users' jobs). Without it the launcher writes nothing and says nothing: a warning on every job would be noise."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torchrun_stand_in(bin_dir)
    proc = launch(bin_dir, {"TRN_JOB_NAME": "bert-1127", METRICS_DIR_VARIABLE: str(tmp_path / "absent")})
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "cannot write" not in err and not (tmp_path / "absent").exists()
    assert summaries(err) == [{"job": "bert-1127", "node": 0, "hits": 2, "misses": 1}]


def test_sigterm_reaches_torchrun_and_the_counts_are_still_said(tmp_path):
    """The launcher now stays in front of torchrun (a container's PID 1): a stop's SIGTERM must reach torchrun."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torchrun_stand_in(bin_dir, then_sleep=True)
    proc = launch(bin_dir, {"TRN_JOB_NAME": "bert-1127"})
    deadline = time.monotonic() + 20
    while not (bin_dir / "torchrun.ready").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGTERM)  # as docker stop or the kubelet would
    out, err = proc.communicate(timeout=30)
    assert "torchrun got TERM" in out
    assert proc.returncode == 143
    assert summaries(err) == [{"job": "bert-1127", "node": 0, "hits": 2, "misses": 1}]


# -- trn rehearse: a job run twice over one cache ----------------------------------------------------------------

SCRIPT = "import os\nprint('rank', os.environ['RANK'], 'trained', flush=True)\n"


@pytest.mark.e2e
def test_a_second_run_over_the_same_cache_hits_every_graph_the_first_compiled(config, tmp_path, monkeypatch):
    work = tmp_path / "my-project"
    work.mkdir()
    (work / "train.py").write_text(SCRIPT)
    monkeypatch.chdir(work)
    runs = []
    for _ in range(2):
        result = run_cli("rehearse", "--backend", "parallelcluster", "--config", str(config), "--", "train.py")
        assert result.code == 0, result.out[-4000:] + result.err
        runs.append(result.out)
        prom = work / ".trn-rehearse" / "node-metrics" / "42.prom"  # the Slurm job's id in the rehearsal
        runs.append(prom.read_text())
    first, first_prom, second, second_prom = runs
    # 2 nodes of 2 processes, one graph each: the first run compiles 2 graphs on each node, the second loads them.
    assert sorted(summaries(first), key=lambda s: s["node"]) == [
        {"job": "42", "node": n, "hits": 0, "misses": 2} for n in (0, 1)
    ]
    assert sorted(summaries(second), key=lambda s: s["node"]) == [
        {"job": "42", "node": n, "hits": 2, "misses": 0} for n in (0, 1)
    ]
    assert "Call compiler with cmd" in first and "Using a cached neff" not in first
    assert "Using a cached neff" in second and "Call compiler with cmd" not in second
    # The cache on the stand-in /fsx holds the layout Neuron documents, one folder per graph.
    cache = work / ".trn-rehearse" / "fsx" / "neuron-cache" / "train"
    modules = sorted(cache.glob("neuronxcc-*/MODULE_*"))
    assert len(modules) == 4
    assert all({p.name for p in m.iterdir()} >= {"model.neff", "model.done", "model.hlo_module.pb"} for m in modules)
    # Each node's summary beside the job's checkpoints, and the node's textfile (both nodes share this machine's).
    checkpoints = work / ".trn-rehearse" / "fsx" / "checkpoints" / "42" / f".{COMPILE_CACHE_SUMMARY}"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["node-0.json", "node-1.json"]
    assert f'{COMPILE_CACHE_MISSES_METRIC}{{job="42",node=' in first_prom and "} 2\n" in first_prom
    assert f'{COMPILE_CACHE_HITS_METRIC}{{job="42",node=' in second_prom
    assert f"{COMPILE_CACHE_MISSES_METRIC}" in second_prom and second_prom.rstrip().endswith("} 0")


# -- the native track (TorchNeuron) --------------------------------------------------------------------------------
# TorchNeuron's persistent NEFF cache is TORCH_NEURONX_NEFF_CACHE_DIR, laid out <dir>/<h[0:2]>/<h[2:4]>/<h>.neff, and
# it logs what the cache did only at TORCH_NEURONX_LOG_LEVEL=3, on stdout (torch-neuronx csrc/core/compilation/
# CompilationCache.cpp, csrc/core/cache/PersistentCacheBackend.h, csrc/core/NeuronLogging.h; launcher.py).

H1, H2, H3 = ("a1" * 32, "b2" * 32, "c3" * 32)
NATIVE_LINES = [
    # graph H1 compiled by one process (it missed, compiled, stored), its peer waited on the lock and then loaded it
    f"[Neuron] [DEBUG] [/src/torch_neuronx/csrc/core/compilation/CompilationCache.cpp:200] Persistent cache miss key= "
    f"XLA_add_f32 persistent_key= {H1} ",
    f"[Neuron] [DEBUG] [/src/torch_neuronx/csrc/core/compilation/CompilationCache.cpp:352] Stored to persistent cache "
    f"key= XLA_add_f32 persistent_key= {H1} size= 4096 ",
    f"[Neuron] [DEBUG] [/src/torch_neuronx/csrc/core/compilation/CompilationCache.cpp:321] Persistent cache hit after "
    f"lock acquisition key= XLA_add_f32 persistent_key= {H1} size= 4096 ",
    # graphs H2 and H3 from the cache, H2 on two processes
    f"[Neuron] [DEBUG] [/src/torch_neuronx/csrc/core/compilation/CompilationCache.cpp:171] Persistent cache hit key= "
    f"XLA_mm_bf16 persistent_key= {H2} size= 8192 ",
    f"[Neuron] [DEBUG] [/src/torch_neuronx/csrc/core/compilation/CompilationCache.cpp:171] Persistent cache hit key= "
    f"XLA_mm_bf16 persistent_key= {H2} size= 8192 ",
    f"[Neuron] [DEBUG] [/src/torch_neuronx/csrc/core/compilation/CompilationCache.cpp:171] Persistent cache hit key= "
    f"graph_7 persistent_key= {H3} size= 1024 ",
    "step 1 loss 9.1",
]


def native_torchrun(bin_dir: Path, *, lines: list[str], new_neffs: int = 0, clock_behind_s: int = 0) -> None:
    """torchrun that prints its cache variables and ``lines`` on stdout, and puts ``new_neffs`` NEFFs into the cache
    the way TorchNeuron does (a temporary file renamed into its shard); ``clock_behind_s``: as another node of the job
    whose clock is that far behind this one's writes them on the shared cache (their times in this node's past)."""
    writes = "".join(
        f'mkdir -p "$TORCH_NEURONX_NEFF_CACHE_DIR/{h[:2]}/{h[2:4]}" && echo neff > "$TORCH_NEURONX_NEFF_CACHE_DIR/'
        f'{h[:2]}/{h[2:4]}/.t" && '
        + (f'touch -d "@$(( $(date +%s) - {clock_behind_s} ))" "$TORCH_NEURONX_NEFF_CACHE_DIR/{h[:2]}/{h[2:4]}/.t" && '
           if clock_behind_s else "")
        + f'mv "$TORCH_NEURONX_NEFF_CACHE_DIR/{h[:2]}/{h[2:4]}/.t" '
        f'"$TORCH_NEURONX_NEFF_CACHE_DIR/{h[:2]}/{h[2:4]}/{h}.neff"\n'
        for h in (H1, H2, H3)[:new_neffs]
    )
    printed = "".join(f"echo {shlex.quote(text)}\n" for text in lines)
    path = bin_dir / "torchrun"
    path.write_text('#!/bin/sh\necho "cache=${TORCH_NEURONX_NEFF_CACHE_DIR:-unset} flags=${NEURON_CC_FLAGS:-unset}"\n'
                    f"{writes}{printed}exit 0\n")
    path.chmod(0o755)


def test_native_track_the_cache_is_torchneurons_and_the_compiler_flags_stay_the_jobs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    native_torchrun(bin_dir, lines=[])
    cache = tmp_path / "fsx" / "neuron-cache" / "train"
    proc = launch(bin_dir, {"TRN_NEURON_TRACK": "native", "TRN_CACHE_DIR": str(cache), "TRN_JOB_NAME": "j"})
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    # neuronx-cc gets NEURON_CC_FLAGS as they are from TorchNeuron: no --cache_dir, which is the XLA wrapper's.
    assert f"cache={cache} flags=unset" in out.splitlines()
    # A value the job set wins, and the launcher says so.
    proc = launch(bin_dir, {"TRN_NEURON_TRACK": "native", "TRN_CACHE_DIR": str(cache),
                            "TORCH_NEURONX_NEFF_CACHE_DIR": "/mine", "NEURON_CC_FLAGS": "--optlevel=1"})
    out, err = proc.communicate(timeout=30)
    assert "cache=/mine flags=--optlevel=1" in out.splitlines()
    assert "trainium-launch: TORCH_NEURONX_NEFF_CACHE_DIR is set: TRN_CACHE_DIR unused" in err.splitlines()
    # The XLA track as before: the wrapper's --cache_dir first.
    proc = launch(bin_dir, {"TRN_NEURON_TRACK": "xla", "TRN_CACHE_DIR": str(cache), "NEURON_CC_FLAGS": "-O1"})
    out, _ = proc.communicate(timeout=30)
    assert f"cache=unset flags=--cache_dir={cache} -O1" in out.splitlines()


def test_native_track_debug_lines_are_counted_by_graph(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    native_torchrun(bin_dir, lines=NATIVE_LINES)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    proc = launch(bin_dir, {"TRN_NEURON_TRACK": "native", "TRN_CACHE_DIR": str(tmp_path / "cache"),
                            "TRN_JOB_NAME": "llama-1127", METRICS_DIR_VARIABLE: str(metrics)})
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    # H1 compiled here (its peer's load after the lock is not a hit); H2 and H3 from the cache.
    assert summaries(err) == [{"job": "llama-1127", "node": 0, "hits": 2, "misses": 1}]
    assert out.splitlines()[1:] == NATIVE_LINES  # passed through unchanged
    assert (metrics / "llama-1127.prom").read_text() == (
        f"# TYPE {COMPILE_CACHE_HITS_METRIC} counter\n"
        f'{COMPILE_CACHE_HITS_METRIC}{{job="llama-1127",node="0"}} 2\n'
        f"# TYPE {COMPILE_CACHE_MISSES_METRIC} counter\n"
        f'{COMPILE_CACHE_MISSES_METRIC}{{job="llama-1127",node="0"}} 1\n'
    )


@pytest.mark.parametrize("clock_behind_s", [0, 2], ids=["this node", "a node whose clock is behind"])
def test_native_track_without_debug_lines_misses_are_the_new_neffs_and_hits_are_unknown(tmp_path, clock_behind_s):
    """The new NEFFs are the misses, whenever their files say they were written: a NEFF written in the clock tick
    of the run's start, or by a node of the job whose clock is behind this one's on the shared cache, is new too
    (the launcher compared times once, and counted 1 of 2 now and then: `make test` on 2026-11-27)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    native_torchrun(bin_dir, lines=["step 1 loss 9.1"], new_neffs=2, clock_behind_s=clock_behind_s)
    cache, metrics, checkpoints = tmp_path / "cache", tmp_path / "metrics", tmp_path / "checkpoints"
    old = cache / "ff" / "ee" / f"{'ffee' * 16}.neff"  # an earlier run's graph: not this run's miss
    old.parent.mkdir(parents=True)
    old.write_text("neff")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    (cache / "neuronxcc-2.21.0" / "MODULE_1+2").mkdir(parents=True)  # the XLA track's layout: not TorchNeuron's
    (cache / "neuronxcc-2.21.0" / "MODULE_1+2" / "model.neff").write_text("neff")
    metrics.mkdir()
    proc = launch(bin_dir, {"TRN_NEURON_TRACK": "native", "TRN_CACHE_DIR": str(cache), "TRN_JOB_NAME": "llama-1127",
                            "TRN_CHECKPOINT_ROOT": str(checkpoints), METRICS_DIR_VARIABLE: str(metrics)})
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    expected = {"job": "llama-1127", "node": 0, "hits": None, "misses": 2}
    assert f"trainium-launch: {json.dumps({COMPILE_CACHE_SUMMARY: expected})}" in err.splitlines()
    summary = checkpoints / "llama-1127" / f".{COMPILE_CACHE_SUMMARY}" / "node-0.json"
    assert json.loads(summary.read_text()) == {COMPILE_CACHE_SUMMARY: expected}
    # No hits series: an unknown is not a 0.
    assert (metrics / "llama-1127.prom").read_text() == (
        f"# TYPE {COMPILE_CACHE_MISSES_METRIC} counter\n"
        f'{COMPILE_CACHE_MISSES_METRIC}{{job="llama-1127",node="0"}} 2\n'
    )


NATIVE_CONFIG = """\
region: us-east-2
backends: [batch]
network:
  az_ids: [use2-az3, use2-az2]
neuron:
  track: native
instance_offerings:
  trn2.48xlarge: {us-east-2: [use2-az3, use2-az2]}
compute_groups:
  - {name: train, instance_type: trn2.48xlarge, nodes: 2, az_ids: use2-az3}
"""


@pytest.mark.e2e
def test_native_track_a_second_run_loads_every_graph_from_the_shared_cache(tmp_path, monkeypatch):
    """Before, the launcher set only the XLA wrapper's --cache_dir: TorchNeuron kept its NEFFs in each node's
    /tmp/neff_cache, and every run of every node compiled every graph again."""
    work = tmp_path / "my-project"
    work.mkdir()
    (work / "train.py").write_text(SCRIPT)
    config = work / "native.yaml"
    config.write_text(NATIVE_CONFIG)
    monkeypatch.chdir(work)
    debug = ("--env", "TORCH_NEURONX_LOG_LEVEL=3")
    runs = []
    for extra in (debug, debug, ()):
        result = run_cli("rehearse", "--config", str(config), *extra, "--", "train.py")
        assert result.code == 0, result.out[-4000:] + result.err
        runs.append(sorted(summaries(result.out), key=lambda s: s["node"]))
    first, second, third = runs
    # 2 nodes of 2 processes, one graph each, in the cache on the stand-in /fsx (the Batch job's name: "rehearsal").
    assert first == [{"job": "rehearsal", "node": n, "hits": 0, "misses": 2} for n in (0, 1)]
    assert second == [{"job": "rehearsal", "node": n, "hits": 2, "misses": 0} for n in (0, 1)]
    # Without TorchNeuron's debug lines: nothing new in the cache, and hits not known.
    assert third == [{"job": "rehearsal", "node": n, "hits": None, "misses": 0} for n in (0, 1)]
    cache = work / ".trn-rehearse" / "fsx" / "neuron-cache" / "train"
    neffs = sorted(cache.glob("??/??/*.neff"))
    assert len(neffs) == 4 and all(p.name[:2] == p.parent.parent.name for p in neffs)
    assert not list(cache.glob("neuronxcc-*"))  # no XLA wrapper here
