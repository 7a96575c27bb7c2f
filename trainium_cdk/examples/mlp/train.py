"""MLP training example: the workload of the single-node Trainium tutorial, runnable anywhere.

Runs on whichever Neuron track the container carries: the native ``neuron`` device (TorchNeuron,
Neuron 2.33+: PyTorch autoloads it, DDP over the ``neuron`` process group backend), the XLA device
(torch-neuronx 2.9 with torch_xla), or the CPU otherwise, so the same script runs in both tracks'
training containers and in this project's tests. Under torchrun with more than one process it trains
data-parallel. Rank 0 first prints the Neuron versions the node has next to the pins the job was given
(``TRN_NEURON_*`` variables), skipping any tool the node lacks.

    torchrun --nnodes=1 --nproc_per_node=2 train.py --epochs 4 --output-dir /fsx/runs/mlp

Checkpoints: rank 0 saves one after every epoch into ``--checkpoint-dir`` (default: ``$TRN_CHECKPOINT_DIR``,
which the launcher sets to ``/fsx/checkpoints/<job>`` on every backend), and every rank starts from the
newest one there, so a job the scheduler restarts after a failure resumes instead of starting over.

Precompile (``TRN_PRECOMPILE=1``): the launcher first runs the command under ``neuron_parallel_compile``,
which sets ``NEURON_EXTRACT_GRAPHS_ONLY=1``: graphs are traced, not executed, and every output is invalid.
Then this script stops after ``TRN_PRECOMPILE_STEPS`` optimizer steps, neither loads nor saves a
checkpoint and writes no metrics, as Neuron's guide asks of a script; the launcher then runs it for real.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:  # torch-neuronx 2.9 (XLA track) brings torch_xla
    import torch_xla.core.xla_model as xm
except ImportError:  # native track or CPU
    xm = None

# Pins a job may carry (the project's versions.py), printed beside what the node has.
PIN_VARIABLES = ("TRN_NEURON_RELEASE", "TRN_NEURON_DRIVER", "TRN_NEURON_RUNTIME", "TRN_NEURON_FRAMEWORK")
# Graph extraction: neuron_parallel_compile sets the first; the launcher gives the step cap in the second.
EXTRACTION_ENV = "NEURON_EXTRACT_GRAPHS_ONLY"
EXTRACTION_STEPS_ENV = "TRN_PRECOMPILE_STEPS"
EXTRACTION_STEPS_DEFAULT = 10  # Neuron's guide: "a few steps (eg.10-15)"


def extraction_steps() -> int | None:
    """Under neuron_parallel_compile's graph extraction, the steps to trace; None in a real run."""
    if os.environ.get(EXTRACTION_ENV, "0").strip() in ("", "0"):
        return None
    return max(1, int(os.environ.get(EXTRACTION_STEPS_ENV) or EXTRACTION_STEPS_DEFAULT))


def native_neuron() -> bool:
    """TorchNeuron registers the ``neuron`` device (PrivateUse1) when torch imports it."""
    module = getattr(torch, "neuron", None)
    return xm is None and module is not None and bool(getattr(module, "is_available", lambda: False)())


def _run(argv: list[str]) -> str | None:
    import shutil
    import subprocess

    if shutil.which(argv[0]) is None:
        return None
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def node_versions() -> dict[str, str | None]:
    """Driver, runtime and framework versions this node has; None where the tool or file is absent."""
    driver = None
    version_file = Path("/sys/module/neuron/version")
    if version_file.is_file():
        driver = version_file.read_text().strip()
    else:
        driver = _run(["modinfo", "-F", "version", "neuron"])
    runtime = _run(["dpkg-query", "-W", "-f", "${Version}", "aws-neuronx-runtime-lib"]) or _run(
        ["rpm", "-q", "--qf", "%{VERSION}", "aws-neuronx-runtime-lib"]
    )
    try:
        from importlib.metadata import version

        framework = f"torch-neuronx {version('torch-neuronx')}"
    except Exception:  # not installed: the CPU build of torch
        framework = None
    return {"driver": driver, "runtime": runtime, "framework": framework, "torch": torch.__version__}


def preflight() -> dict[str, object]:
    """What the node has next to the job's pins (printed by rank 0 before training), and this process's
    limit of open files (soft, hard), which the launcher raises."""
    import resource

    pins = {k.removeprefix("TRN_NEURON_").lower(): os.environ[k] for k in PIN_VARIABLES if k in os.environ}
    return {"node": node_versions(), "pins": pins, "open_files": list(resource.getrlimit(resource.RLIMIT_NOFILE))}


def synthetic_dataset(samples: int, features: int, classes: int, seed: int = 0) -> TensorDataset:
    """Points labelled by a fixed random linear map: learnable, so the loss must fall."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    weights = torch.randn(features, classes, generator=generator)
    labels = (inputs @ weights).argmax(dim=1)
    return TensorDataset(inputs, labels)


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


CHECKPOINT_ENV = "TRN_CHECKPOINT_DIR"
_CHECKPOINT = re.compile(r"^epoch-(\d+)\.pt$")
KEEP_CHECKPOINTS = 2


def newest_checkpoint(directory: Path | None) -> Path | None:
    """The checkpoint of the latest finished epoch (half-written files have another name)."""
    if directory is None or not directory.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _CHECKPOINT.match(p.name))]
    return max(found)[1] if found else None


def save_checkpoint(directory: Path, state: dict) -> None:
    """Write then rename: a rank killed mid-write leaves no file that looks finished."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"epoch-{state['epoch']:05d}.pt"
    partial = directory / f".{final.name}.partial"
    torch.save(state, partial)
    os.replace(partial, final)
    for old in sorted(p for p in directory.iterdir() if _CHECKPOINT.match(p.name))[:-KEEP_CHECKPOINTS]:
        old.unlink(missing_ok=True)


def _on_cpu(value):
    """Device tensors (XLA) copied to the CPU, so that the file loads anywhere."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def say(record: dict) -> None:
    """Print one JSON line in one write: print() writes the text and its newline apart, and torchrun runs
    the script unbuffered (``python -u``), so the lines of ranks that share the job's output interleave."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def train(
    *,
    epochs: int = 4,
    batch_size: int = 32,
    lr: float = 0.05,
    samples: int = 2048,
    features: int = 32,
    hidden: int = 64,
    classes: int = 4,
    seed: int = 0,
    checkpoint_dir: Path | None = None,
    max_steps: int | None = None,
) -> list[float]:
    """Train and return the mean loss of each epoch (on this process's shard), from the newest
    checkpoint in ``checkpoint_dir`` when there is one (its epochs' losses included). With ``max_steps``
    (graph extraction), stop after that many optimizer steps and print how many were taken."""
    torch.manual_seed(seed)
    native = native_neuron()
    device = xm.xla_device() if xm is not None else torch.device("neuron" if native else "cpu")
    if _distributed() and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("xla" if xm is not None else "neuron" if native else "gloo")
    dataset = synthetic_dataset(samples, features, classes, seed)
    sampler: DistributedSampler | None = DistributedSampler(dataset, shuffle=True, seed=seed) if _distributed() else None
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=sampler is None, sampler=sampler)
    model: nn.Module = MLP(features, hidden, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    history: list[float] = []
    start = 0
    checkpoint = newest_checkpoint(checkpoint_dir)
    if checkpoint is not None:  # every rank loads the same file: the replicas start equal
        state = torch.load(checkpoint, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        history, start = list(state["history"]), state["epoch"] + 1
        say({"resumed_from": str(checkpoint), "next_epoch": start})  # every rank resumes: one write each
    model = model.to(device)
    plain = model
    if _distributed() and xm is None:
        model = nn.parallel.DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss()
    rank = int(os.environ.get("RANK", "0"))
    steps = 0
    for epoch in range(start, epochs):
        if max_steps is not None and steps >= max_steps:
            break
        if sampler is not None:
            sampler.set_epoch(epoch)
        total, batches = torch.zeros((), device=device), 0
        for inputs, labels in loader:
            if max_steps is not None and steps >= max_steps:
                break
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            if xm is not None:
                xm.optimizer_step(optimizer)  # all-reduces gradients across workers, then steps
            else:
                optimizer.step()
            total += loss.detach()
            batches += 1
            steps += 1
        history.append(float(total.cpu()) / batches)
        if checkpoint_dir is not None and rank == 0:
            state = {"epoch": epoch, "model": plain.state_dict(), "optimizer": optimizer.state_dict(), "history": history}
            save_checkpoint(checkpoint_dir, _on_cpu(state))
            say({"checkpoint": epoch})
    if max_steps is not None:
        say({"graph_extraction": {"rank": rank, "steps": steps}})  # every rank: one write, or lines interleave
    return history


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--output-dir", type=Path, default=None, help="where rank 0 writes metrics.json")
    parser.add_argument(
        "--checkpoint-dir", type=Path, default=os.environ.get(CHECKPOINT_ENV) or None,
        help=f"save each epoch here and resume from the newest (default: ${CHECKPOINT_ENV}; none: no checkpoints)",
    )
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        say({"preflight": preflight()})
    extracting = extraction_steps()
    history = train(
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, samples=args.samples,
        # Graph extraction: outputs are not real, so no checkpoint is read or written, and a few steps suffice.
        checkpoint_dir=None if extracting else args.checkpoint_dir, max_steps=extracting,
    )
    if not extracting and rank == 0:
        say({"loss_per_epoch": history})
        if args.output_dir is not None:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            (args.output_dir / "metrics.json").write_text(json.dumps({"loss_per_epoch": history}))
    if torch.distributed.is_initialized():
        # DDP's reducer sits in a reference cycle that holds the process group: free it now, or the
        # group is destroyed at interpreter exit with its threads running ("terminate called without an
        # active exception"). Then every rank leaves together.
        gc.collect()
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
