"""A training job's throughput as its log says it, for `trn logs`.

The recipes print one JSON line per step on node 0 (titan-llama3: ``TITAN {"step": N, "loss": ..., "seconds": ...,
"tokens_per_s_per_node": ..., "mfu": ...}``); so may any script, after any prefix. `trn logs` passes the log through
unchanged on stdout and, when it holds such lines, says on stderr what they add up to: the first step is left out of
the median (it compiles, or loads compiled graphs), as it is of any throughput figure worth comparing.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

TOKENS_KEY = "tokens_per_s_per_node"
MFU_KEY = "mfu"


def step_of(line: str) -> dict[str, Any] | None:
    """A step's record (``step``, ``tokens_per_s_per_node``, ``mfu`` or None), or None for any other line."""
    if f'"{TOKENS_KEY}"' not in line:
        return None
    start = line.find("{")
    try:
        found = json.loads(line[start:]) if start >= 0 else None
    except ValueError:
        return None
    if not isinstance(found, dict) or not isinstance(found.get("step"), int):
        return None
    tokens, mfu = found.get(TOKENS_KEY), found.get(MFU_KEY)
    if not isinstance(tokens, (int, float)) or not (mfu is None or isinstance(mfu, (int, float))):
        return None
    return {"step": found["step"], TOKENS_KEY: float(tokens), MFU_KEY: None if mfu is None else float(mfu)}


def describe(steps: list[dict[str, Any]], rank: int) -> str:
    """One line for a person: how fast node ``rank``'s log says the job trains."""
    later = [s for s in steps if s["step"] != steps[0]["step"]]
    counted = later or steps
    tokens = statistics.median(s[TOKENS_KEY] for s in counted)
    mfus = [s[MFU_KEY] for s in counted if s[MFU_KEY] is not None]
    mfu = f", MFU {statistics.median(mfus):.1%}" if mfus else ", no MFU logged"
    span = f"steps {counted[0]['step']}-{counted[-1]['step']}" if len(counted) > 1 else f"step {counted[0]['step']}"
    note = "the first step, which compiles, left out" if later else "the only step logged, which compiles"
    return (f"throughput, node {rank}'s log: {len(steps)} step(s), median {tokens:,.0f} tokens/s per node{mfu} "
            f"({span}; {note})")
