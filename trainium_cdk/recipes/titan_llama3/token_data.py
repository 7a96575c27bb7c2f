"""titan-llama3's data: the token stream the data job wrote (prepare.py), read as windows of ``seq_len + 1`` tokens.

The last windows of the stream are held out for validation; the others are shuffled once an epoch (one seeded
permutation, kept for the epoch: it was drawn again at every step, over the whole stream). Which windows a rank reads
is a function of the micro-batch's index alone: a resumed run reads on where the saved run stopped, and the ranks of
one TP group read the same batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import knobs
import torch


def load_tokens(data_dir: Path) -> tuple[Any, dict]:
    import numpy as np

    manifest = data_dir / knobs.MANIFEST
    if not manifest.is_file():
        knobs.fail(f"no prepared data in {data_dir}: run the data preparation first (trn submit --job titan-llama3-data)")
    made = json.loads(manifest.read_text())
    return np.memmap(data_dir / knobs.TOKENS, dtype="<u4", mode="r"), made


class TokenWindows:
    """The stream's windows for ``dp`` data-parallel ranks of ``batch_size`` windows each; ``held_out`` windows at
    the end for validation."""

    def __init__(self, tokens: Any, *, seq_len: int, seed: int, dp: int, batch_size: int, held_out: int) -> None:
        self.tokens, self.seq_len, self.seed, self.dp, self.batch_size = tokens, seq_len, seed, dp, batch_size
        windows = (len(tokens) - 1) // seq_len
        self.held_out = min(held_out, windows // 2)
        self.training = windows - self.held_out
        self.per_epoch = self.training // (dp * batch_size)
        if self.per_epoch == 0:
            knobs.fail(f"{len(tokens)} tokens: fewer than one global batch ({dp} x {batch_size} x {seq_len} tokens) "
                       f"besides {self.held_out} windows held out for validation")
        self._epoch: tuple[int, list[int]] | None = None

    def _rows(self, windows: list[int]) -> torch.Tensor:
        n = self.seq_len
        return torch.stack([torch.from_numpy(self.tokens[w * n:w * n + n + 1].astype("int64")) for w in windows])

    def _order(self, epoch: int) -> list[int]:
        if self._epoch is None or self._epoch[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            self._epoch = (epoch, torch.randperm(self.training, generator=generator).tolist())
        return self._epoch[1]

    def batch(self, index: int, *, dp_rank: int) -> torch.Tensor:
        """Micro-batch ``index`` (step x accumulation + micro-step) of rank ``dp_rank``."""
        epoch, within = divmod(index, self.per_epoch)
        start = (within * self.dp + dp_rank) * self.batch_size
        return self._rows(self._order(epoch)[start:start + self.batch_size])

    def validation(self, *, dp_rank: int) -> list[torch.Tensor]:
        """The held-out windows of rank ``dp_rank``, in batches; every rank the same number of batches (each runs the
        same collectives), none when fewer windows are held out than one global batch."""
        batches = self.held_out // (self.dp * self.batch_size)
        first = self.training + dp_rank * batches * self.batch_size
        return [self._rows(list(range(first + i * self.batch_size, first + (i + 1) * self.batch_size)))
                for i in range(batches)]
