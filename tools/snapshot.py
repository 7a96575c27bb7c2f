"""Snapshot every synthesized template and dist/ file of the test variants, for refactors that must
not change behaviour:

    python tools/snapshot.py OUTDIR      # then diff -r BEFORE AFTER

Asset hashes (they change with any byte of the package source) are masked.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainium_cdk.node_runtime import use_bundled_node  # noqa: E402

use_bundled_node()

from tests.support.apps import VARIANTS  # noqa: E402
from tests.support.helpers import config_with, synth  # noqa: E402
from trainium_cdk.app.config import load_config  # noqa: E402
from trainium_cdk.app.dist import write_dist  # noqa: E402

HASH = re.compile(r"[0-9a-f]{64}")


def dump(config, out: Path) -> None:
    result = synth(config, nag=False)
    for template in sorted(result.outdir.glob("*.template.json")):
        text = json.dumps(json.loads(template.read_text()), indent=1, sort_keys=True)
        (out / template.name).parent.mkdir(parents=True, exist_ok=True)
        (out / template.name).write_text(HASH.sub("<hash>", text))
    write_dist(config, out / "dist")


def main(outdir: str) -> None:
    root = Path(outdir)
    dump(load_config(None), root / "default")
    for name, changes in VARIANTS.items():
        dump(config_with(**changes), root / name)


if __name__ == "__main__":
    main(sys.argv[1])
