"""`make deploy|diff|destroy` act on the assembly of the last `make synth`: refuse what would not.

    python tools/assembly.py [ARGS of the make target]

Exit 2, with one line saying what to do, when there is no cdk.out, or when ARGS carries `-c` context other
than the last synth's: the CDK CLI ignores context with `--app cdk.out`, so that deploy would silently
deploy something else than what the user asked for.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

OUT = Path("cdk.out")
RECORD = "trainium-cdk-synth.json"  # written by tools/synth.py: the arguments of the synth


def context(args: Sequence[str]) -> list[str]:
    """The `-c key=value` pairs of a CDK command line, in order."""
    found, rest = [], list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("-c", "--context") and rest:
            found.append(rest.pop(0))
        elif arg.startswith(("-c=", "--context=")):
            found.append(arg.split("=", 1)[1])
    return found


def check(args: Sequence[str], out: Path = OUT) -> str | None:
    """None when the target may run; else the one-line reason it may not."""
    if not (out / "manifest.json").is_file():
        return f"no {out}: run `make synth ARGS=...` first (deploy, diff and destroy use what it wrote)"
    given = context(args)
    record = out / RECORD
    synthesized = context(json.loads(record.read_text())["args"]) if record.is_file() else []
    if given and given != synthesized:
        was = " ".join(f"-c {c}" for c in synthesized) or "no -c"
        return (f"ARGS has {' '.join(f'-c {c}' for c in given)}, the last `make synth` had {was}: deploy, diff and "
                f"destroy use what that synth wrote; run `make synth ARGS=\"{' '.join(f'-c {c}' for c in given)}\"` "
                "first, then this target without -c")
    return None


if __name__ == "__main__":
    reason = check(sys.argv[1:])
    if reason:
        print(f"make: {reason}", file=sys.stderr)
        sys.exit(2)
