"""`make synth`: `cdk synth` into a fresh folder, swapped in only when it succeeds, with quiet output.

    python tools/synth.py [-c key=value ...] [other cdk synth options]

- synthesizes into cdk.out.tmp, then replaces cdk.out, keeping the one before as cdk.out.prev (what
  `make plan` compares with): a failed synth leaves the last good cdk.out;
- exit 2 when the app reported a configuration error (the CDK CLI turns every app failure into 1);
- drops the CLI's "Successfully synthesized" and "Supply a stack id" lines and lists instead the
  templates of cdk.out and the files of dist/ (which app.py writes afresh on every synth).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

OUT = Path("cdk.out")
TMP = Path("cdk.out.tmp")
DIST = Path("dist")
CDK = Path("node_modules/.bin/cdk")
# What app.py prints before exit 2 (a ConfigError).
APP_ERROR = "trainium-cdk: "
EXIT_CONFIG = 2
# CLI lines that say nothing the summary does not.
NOISE = ("Successfully synthesized to ", "Supply a stack id ")
RECORD = "trainium-cdk-synth.json"  # tools/assembly.py reads it, and `trn` (cli/_common.py SYNTH_RECORD)
BILL_FILE = "bill.txt"  # trainium_cdk.app.cost.BILL_FILE (tools/ imports nothing of the package)


def swap(new: Path = TMP, out: Path = OUT) -> None:
    """cdk.out becomes cdk.out.prev (what `make plan` compares with), the new synth cdk.out."""
    previous = out.with_name(out.name + ".prev")
    shutil.rmtree(previous, ignore_errors=True)
    if out.exists():
        out.rename(previous)
    new.rename(out)


def summary(out: Path = OUT, dist: Path = DIST) -> list[str]:
    lines = sorted(p.as_posix() for p in out.glob("*.template.json"))
    if dist.is_dir():
        lines += sorted(p.as_posix() for p in dist.rglob("*") if p.is_file())
    return lines


def synth(args: Sequence[str], *, cdk: Sequence[str] = (str(CDK),)) -> int:
    shutil.rmtree(TMP, ignore_errors=True)
    done = subprocess.run(
        [*cdk, "synth", "--quiet", "-o", str(TMP), *args], capture_output=True, text=True, check=False
    )
    config_error = False
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith(APP_ERROR):
            config_error = True
        if line.strip() and not line.startswith(NOISE) and "Subprocess exited with error" not in line:
            print(line, file=sys.stderr if done.returncode else sys.stdout)
    if done.returncode != 0:
        shutil.rmtree(TMP, ignore_errors=True)
        if not config_error:
            print(f"cdk synth failed (exit {done.returncode}); cdk.out is the last good synth", file=sys.stderr)
        return EXIT_CONFIG if config_error else done.returncode
    (TMP / RECORD).write_text(json.dumps({"args": list(args)}) + "\n")  # what tools/assembly.py checks
    swap()
    print("\n".join(summary()))
    bill = OUT / BILL_FILE
    if bill.is_file():  # the app's cost estimate of this config (trainium_cdk/app/cost.py)
        print("\n" + bill.read_text().rstrip("\n"))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    sys.exit(synth(sys.argv[1:]))
