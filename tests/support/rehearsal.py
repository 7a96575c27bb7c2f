"""The launch rehearsal's test-side pieces: stand-ins only tests put on a stage, and what a test asserts.

The machinery (the stage, the schedulers, the substitutions table) is the package's own,
:mod:`trainium_cdk.rehearsal`, which ``trn rehearse`` runs too: one implementation. The stand-ins the tests
add to a stage, beside that table's:

=====================================  ==========================================================
``neuron-ls --json-output``            prints N devices (:func:`neuron_ls`): the health and fabric checks
``nccom-test``                         prints a captured real report (:func:`nccom_test`): fabric check
``scontrol update``                    records its arguments (:func:`scontrol_recorder`): health prolog
``neuron_parallel_compile``            runs its command with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` and records what it
                                       saw, compiling nothing (:func:`neuron_parallel_compile`): precompile
=====================================  ==========================================================
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support import paths
from trainium_cdk.rehearsal import (  # noqa: F401 (the names the tests import from here)
    EXAMPLE_DIR,
    LOOPBACK,
    PROCESSES_PER_NODE,
    TIMEOUT_S,
    NodeResult,
    Stage,
    batch_retry_action,
    container_env,
    free_port,
    kill_node,
    run_batch_job,
    run_batch_node_properties,
    run_kubernetes_job,
    run_nodes,
    run_slurm_script,
    run_volcano_job,
)
from trainium_cdk.rehearsal.stage import write_tool as _tool

ROOT = paths.ROOT


def neuron_ls(bin_dir: Path, devices: int) -> Path:
    """neuron-ls stand-in: ``--json-output`` lists ``devices`` Neuron devices (one object each)."""
    listing = json.dumps([{"neuron_device": i, "nc_count": 2} for i in range(devices)])
    return _tool(bin_dir, "neuron-ls", f"#!/bin/sh\ncase \"$*\" in *--json-output*) echo '{listing}' ;; *) exit 2 ;; esac\n")


def nccom_test(bin_dir: Path, report: Path, log: Path) -> Path:
    """nccom-test stand-in: records its arguments and NEURON_RT_ROOT_COMM_ID, prints a real report."""
    return _tool(bin_dir, "nccom-test", f"#!/bin/sh\necho \"$NEURON_RT_ROOT_COMM_ID $*\" >> '{log}'\ncat '{report}'\n")


def scontrol_recorder(bin_dir: Path, log: Path) -> Path:
    """scontrol stand-in for the prolog: records ``update`` calls."""
    return _tool(bin_dir, "scontrol", f"#!/bin/sh\necho \"$*\" >> '{log}'\n")


def neuron_parallel_compile(bin_dir: Path, log: Path) -> Path:
    """neuron_parallel_compile stand-in, as Neuron documents the tool ("PyTorch NeuronX neuron_parallel_compile
    CLI"): it runs its command with ``NEURON_EXTRACT_GRAPHS_ONLY=1`` (graph extraction) and exits as the command
    does; the compiling of the extracted graphs is left out. Each call appends a JSON line to ``log``: its
    arguments and the variables its command gets that precompile is about."""
    seen = ("TRN_CHECKPOINT_DIR", "TRN_PRECOMPILE_STEPS", "NEURON_CC_FLAGS", "NODE_RANK")
    return _tool(bin_dir, "neuron_parallel_compile", f"""#!{sys.executable}
import json, os, subprocess, sys
env = dict(os.environ, NEURON_EXTRACT_GRAPHS_ONLY="1")
with open({str(log)!r}, "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "env": {{k: env.get(k) for k in {seen!r}}}}}) + "\\n")
sys.exit(subprocess.run(sys.argv[1:], env=env).returncode)
""")


def losses(outputs: Sequence[str]) -> list[float]:
    """The per-epoch losses rank 0 printed (the MLP example prints one JSON line)."""
    found = [
        json.loads(line[line.index("{"):])["loss_per_epoch"]
        for text in outputs
        for line in text.splitlines()
        if '"loss_per_epoch"' in line
    ]
    assert len(found) == 1, f"expected one loss report from rank 0, got {len(found)}:\n" + "\n".join(outputs)
    return found[0]


def assert_trained(results: Sequence[NodeResult]) -> list[float]:
    """Every node (so every rank) exited 0 and the loss fell."""
    for r in results:
        others = "\n".join(f"--- node {o.rank} (exit {o.code}):\n{o.output[-3000:]}" for o in results)
        assert r.code == 0, f"node {r.rank} exited {r.code}\n{others}"
    history = losses([r.output for r in results])
    assert history[-1] < 0.5 * history[0], history
    return history


