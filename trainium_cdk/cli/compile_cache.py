"""The Neuron compile cache's hits and misses of a job's node, as `trn logs` shows them.

The launcher ends every node's run with one line (trainium_cdk/node/launcher.sh, launcher.py):
``trainium-launch: {"compile_cache": {"job": ..., "node": N, "hits": H, "misses": M}}`` (``H`` null on the native
track without TorchNeuron's debug lines). `trn logs` passes the node's log through unchanged on stdout and, when the
log holds that line, says on stderr what it counted.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from trainium_cdk.cli.throughput import step_of
from trainium_cdk.runtime.launcher import COMPILE_CACHE_SUMMARY, LAUNCHER_NAME


def summary_of(line: str) -> dict[str, Any] | None:
    """The counts of a launcher's compile-cache line, or None for any other line."""
    prefix = f"{LAUNCHER_NAME}: "
    start = line.find(prefix + "{")
    if start < 0 or f'"{COMPILE_CACHE_SUMMARY}"' not in line:
        return None
    try:
        found = json.loads(line[start + len(prefix):])[COMPILE_CACHE_SUMMARY]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(found, dict) or not isinstance(found.get("misses"), int):
        return None
    # hits: null on the native track when TorchNeuron logged no cache lines (launcher.py): a hit leaves no trace.
    if found.get("hits") is not None and not isinstance(found["hits"], int):
        return None
    return found


class SummaryWatch:
    """A stream that writes through to ``out`` and keeps the last compile-cache line it saw, and every step's
    throughput (cli/throughput.py)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.summary: dict[str, Any] | None = None
        self.steps: list[dict[str, Any]] = []
        self._partial = ""

    def write(self, text: str) -> int:
        self.out.write(text)
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._see(line)
        return len(text)

    def _see(self, line: str) -> None:
        found = summary_of(line)
        if found is not None:
            self.summary = found
        step = step_of(line)
        if step is not None:
            self.steps.append(step)

    def close_lines(self) -> None:
        """The last line, when the log did not end with a newline."""
        self._see(self._partial)
        self._partial = ""

    def __getattr__(self, name: str) -> Any:  # flush, isatty, ...: the stream's own
        return getattr(self.out, name)


def describe(summary: dict[str, Any], rank: int) -> str:
    """One line for a person: what node ``rank`` took from the cache and what it compiled."""
    if summary.get("hits") is None:
        return (f"compile cache, node {rank}: {summary['misses']} new graph(s) in the cache (compiled by the job); hits "
                "not logged (TorchNeuron logs them at TORCH_NEURONX_LOG_LEVEL=3)")
    return (f"compile cache, node {rank}: {summary['hits']} hit(s) (graphs loaded from the Neuron compile cache), "
            f"{summary['misses']} miss(es) (graphs compiled)")
