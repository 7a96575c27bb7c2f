"""The MLP example trains: on the CPU here, on NeuronCores in the Neuron container (not run here)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.walkthrough import free_port

# End to end (README walkthroughs, jobs on CPU torch, the wheel): `make test-e2e`, which CI runs.
pytestmark = pytest.mark.e2e

SCRIPT = paths.ROOT / "trainium_cdk" / "examples" / "mlp" / "train.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("mlp_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Unbuffered:
    """stdout as torchrun's ``python -u`` leaves it: each write recorded as it reaches the shared output."""

    def __init__(self, writes: list[str]) -> None:
        self.writes = writes

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def record_stdout(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the script writes from here on, write by write. In the test's body: pytest's capture takes sys.stdout
    back between a fixture's setup and the test."""
    recorded: list[str] = []
    monkeypatch.setattr(sys, "stdout", _Unbuffered(recorded))
    return recorded


def test_runs_on_cpu_without_torch_neuronx(example):
    assert example.xm is None


def test_loss_falls(example):
    history = example.train(epochs=5, samples=1024)
    assert len(history) == 5
    assert history[-1] < 0.5 * history[0], history


def test_every_rank_writes_its_line_in_one_write(example, monkeypatch):
    """torchrun runs the script with ``python -u``: every write reaches the shared output at once, so a line
    written in two writes (print's text, then its newline) interleaves with another rank's (seen on CI:
    ``{"graph_extraction": {"rank": 2, ...}}{"graph_extraction": {"rank": 3, ...}}``)."""
    writes = record_stdout(monkeypatch)
    example.train(epochs=1, samples=64, max_steps=2)  # graph extraction: every rank prints its line
    assert writes and all(w.endswith("\n") and w.count("\n") == 1 for w in writes), writes
    assert json.loads(writes[-1]) == {"graph_extraction": {"rank": 0, "steps": 2}}


def test_data_parallel_under_torchrun(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    proc = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
            f"--master_port={free_port()}", str(SCRIPT), "--epochs", "4", "--samples", "1024", "--output-dir", str(tmp_path),
        ],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    history = json.loads((tmp_path / "metrics.json").read_text())["loss_per_epoch"]
    assert len(history) == 4 and history[-1] < 0.5 * history[0], history


def test_a_resumed_run_writes_each_line_in_one_write(example, tmp_path, monkeypatch):
    """Every rank of a restarted job prints where it resumed from, at the same moment: in two writes, two ranks'
    lines came out as one (seen on CI: ``{"resumed_from": ..., "next_epoch": 3}{"resumed_from": ...}``), which
    the resume test could not read. The checkpoint lines go one write each too."""
    example.train(epochs=1, samples=64, checkpoint_dir=tmp_path)
    writes = record_stdout(monkeypatch)
    example.train(epochs=2, samples=64, checkpoint_dir=tmp_path)
    assert writes and all(w.endswith("\n") and w.count("\n") == 1 for w in writes), writes
    records = [json.loads(w) for w in writes]
    assert records[0]["next_epoch"] == 1 and records[-1] == {"checkpoint": 1}
