"""`make deploy|diff|destroy` act on the assembly of the last `make synth`: refuse what would not.

    python tools/assembly.py [--target=TARGET] [ARGS of the make target]

Exit 2, with one line saying what to do, when there is no cdk.out, or when ARGS carries `-c` context other
than the last synth's: the CDK CLI ignores context with `--app cdk.out`, so that deploy would silently
deploy something else than what the user asked for. When the last synth dropped stacks of the one before
(a backend switched off), one line says that deploy and destroy leave them deployed (`make plan` says more).
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


def dropped(target: str, out: Path = OUT) -> str | None:
    """The note for deploy, diff and destroy when the last synth dropped stacks of the one before."""
    from plan import PREVIOUS, removed  # tools/ is this script's sys.path[0]

    previous = out.with_name(PREVIOUS)
    if target not in ("deploy", "destroy", "destroy-kept") or not (previous / "manifest.json").is_file():
        return None
    gone = removed(previous, out)
    if not gone:
        return None
    them = "it" if len(gone) == 1 else "them"
    return (f"the last `make synth` dropped {', '.join(gone)}: `make {target}` leaves {them} deployed (if deployed), "
            f"and billed; `make plan` says how to delete {them} (`make destroy-removed`)")


if __name__ == "__main__":
    args = sys.argv[1:]
    target = args.pop(0).split("=", 1)[1] if args[:1] and args[0].startswith("--target=") else "deploy"
    reason = check(args)
    if reason:
        print(f"make: {reason}", file=sys.stderr)
        sys.exit(2)
    note = dropped(target)
    if note:
        print(f"make: note: {note}", file=sys.stderr)
