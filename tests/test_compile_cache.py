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

from tests.test_cli_support import run_cli
from tests.test_own_job import config  # noqa: F401 (the fixture: the default config with every backend)
from trainium_cdk.cli.compile_cache import summary_of
from trainium_cdk.launcher import COMPILE_CACHE_SUMMARY, launch_command
from trainium_cdk.names import COMPILE_CACHE_HITS_METRIC, COMPILE_CACHE_MISSES_METRIC, METRICS_DIR_VARIABLE

pytest_plugins = ["tests.test_cli_support"]

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
