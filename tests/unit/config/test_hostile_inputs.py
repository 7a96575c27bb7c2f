"""Every string field of the config, fed hostile values: refused with one line naming it, or emitted inert.

A value with a trailing newline passed every name check (``re.match("^...$")``: ``$`` matches before a final
newline) and split the generated Slurm scripts: a comment's second half ran as a command, and blank lines in
the ``#SBATCH`` block made sbatch ignore the directives after them. Now every check matches the whole string.
What a config still accepts (commands, image URIs, paths) must come out of every generated script as data:
each script of dist/ parses with ``bash -n`` and keeps its ``#SBATCH`` block in one piece, and synth writes
every template (a raw traceback is a failure too). tests/unit/node/test_hostile_execution.py runs the scripts that carry
what is accepted, with values that leave a marker if they run as code.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import synth
from trainium_cdk.app.config import ConfigError, build_config
from trainium_cdk.app.dist import write_dist

# A config with every section and most optional strings set, each to a valid value.
FULL: dict[str, Any] = {
    "project": "trainium",
    "region": "us-west-2",
    "backends": ["eks", "batch", "parallelcluster", "instance"],
    "network": {"cidr": "10.0.0.0/16", "az_ids": ["usw2-az4", "usw2-az3"]},
    "compute_groups": [{"name": "train", "instance_type": "trn1.32xlarge", "nodes": 2, "max_nodes": 4,
                        "az_ids": "usw2-az4"}],
    "storage": {"data_repository": {"bucket_name": "my-training-data", "s3_prefix": "datasets/",
                                    "file_system_path": "/s3"}},
    "eks": {"admin_role_arns": ["arn:aws:iam::123456789012:role/admin"], "consolidate_after": "10m"},
    "batch": {"image_uri": "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:v1",
              "command": ["train.py", "--epochs", "2"]},
    "parallelcluster": {"ssh_key_name": "my-key", "ssh_allowed_cidr": "203.0.113.0/24"},
    "workloads": {
        "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:v1",
        "jobs": [{"name": "pretrain", "command": ["train.py", "--lr", "1e-4"], "cache_set": "pretrain"}],
        "data_loader": {"s3_uri": "s3://my-training-data/datasets/", "path": "datasets"},
    },
    # Tags reach every resource and ParallelCluster's and Image Builder's configurations (AWS's tag characters only).
    "tags": {"team": "ml-platform"},
}
HOSTILE = {
    "newline": lambda v: v + "\n",
    "inner-newline": lambda v: v + "\n#SBATCH --partition=other\ntouch /tmp/pwned",
    "command-substitution": lambda v: v + "$(touch /tmp/pwned)",
    "backticks": lambda v: v + "`touch /tmp/pwned`",
    "quotes": lambda v: v + "'\";",
    "long": lambda v: v + "x" * 300,
    "unicode": lambda v: v + "\u00e9\u200b",
}


def _strings(value: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _strings(inner, (*path, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _strings(inner, (*path, i))
    elif isinstance(value, str):
        yield path


def _set(raw: dict[str, Any], path: tuple, value: Any) -> None:
    node = raw
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _get(raw: dict[str, Any], path: tuple) -> Any:
    for part in path:
        raw = raw[part]
    return raw


PATHS = list(_strings(FULL))


def test_the_full_config_is_valid():
    build_config(copy.deepcopy(FULL))
    assert len(PATHS) >= 25


def _accepted() -> dict[str, list[tuple]]:
    """Per hostile kind, the paths whose hostile value the config accepts; every other one must be refused
    with a ConfigError naming the field."""
    accepted: dict[str, list[tuple]] = {kind: [] for kind in HOSTILE}
    for kind, make in HOSTILE.items():
        for path in PATHS:
            raw = copy.deepcopy(FULL)
            _set(raw, path, make(_get(FULL, path)))
            try:
                build_config(raw)
            except ConfigError as error:
                assert "\n" not in str(error).rstrip("\n").split(": ", 1)[0], error
                continue
            accepted[kind].append(path)
    return accepted


ACCEPTED = _accepted()
# Free text by design: a job's own command and arguments, and image URIs (exec-form in every artefact).
FREE_TEXT = ("command", "image", "image_uri")


def test_no_name_or_path_takes_a_newline():
    for kind in ("newline", "inner-newline"):
        names = [p for p in ACCEPTED[kind] if not any(part in FREE_TEXT for part in p if isinstance(part, str))]
        assert names == [], kind


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_what_the_config_accepts_is_inert_in_every_generated_script(kind, tmp_path):
    if not ACCEPTED[kind]:
        pytest.skip(f"every field refuses {kind} values")
    raw = copy.deepcopy(FULL)
    for path in ACCEPTED[kind]:
        _set(raw, path, HOSTILE[kind](_get(FULL, path)))
    config = build_config(raw)
    synth(config, nag=False)  # writes every template, or fails here
    written = write_dist(config, tmp_path)
    scripts = [p for p in written if p.suffix in (".sh", ".sbatch")]
    assert scripts
    for script in scripts:
        text = script.read_text()
        check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, (script.name, check.stderr)
        if script.suffix == ".sbatch":
            lines = text.splitlines()[1:]
            block = [i for i, line in enumerate(lines) if line.startswith("#SBATCH")]
            assert block == list(range(block[0], block[0] + len(block))), (script.name, kind)
            assert all(line.startswith("#") for line in lines[: block[-1] + 1]), (script.name, kind)
    assert not Path("/tmp/pwned").exists()
