"""MLP training example: the workload of the single-node Trainium tutorial, runnable anywhere.

Uses the XLA (NeuronCore) device when torch-neuronx is installed and the CPU otherwise, so the same
script runs in the Neuron training container and in this project's tests. Under torchrun with more
than one process it trains data-parallel (XLA collectives on Neuron, gloo on CPU).

    torchrun --nnodes=1 --nproc_per_node=2 train.py --epochs 4 --output-dir /data/runs/mlp
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:  # torch-neuronx brings torch_xla
    import torch_xla.core.xla_model as xm
except ImportError:  # CPU
    xm = None


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


def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


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
) -> list[float]:
    """Train and return the mean loss of each epoch (on this process's shard)."""
    torch.manual_seed(seed)
    device = xm.xla_device() if xm is not None else torch.device("cpu")
    if _distributed() and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("xla" if xm is not None else "gloo")
    dataset = synthetic_dataset(samples, features, classes, seed)
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed) if _distributed() else None
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=sampler is None, sampler=sampler)
    model = MLP(features, hidden, classes).to(device)
    if _distributed() and xm is None:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    history = []
    for epoch in range(epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        total, batches = torch.zeros((), device=device), 0
        for inputs, labels in loader:
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
        history.append(float(total.cpu()) / batches)
    return history


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--output-dir", type=Path, default=None, help="where rank 0 writes metrics.json")
    args = parser.parse_args(argv)
    history = train(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, samples=args.samples)
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        print(json.dumps({"loss_per_epoch": history}))
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
