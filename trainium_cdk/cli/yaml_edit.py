"""Rewrite the ``instance_offerings`` block of a config file and leave every other line as it was.

PyYAML loses comments on a round trip and ruamel.yaml is not a dependency, so the edit is textual:
the top-level ``instance_offerings:`` block (the key line and the indented lines under it) is
replaced by a freshly rendered one, or appended when the file has none. The result is parsed again
and must equal the old document with only that key changed; otherwise nothing is written.
Comments inside the old block are not kept (the block is generated); comments anywhere else are.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from trainium_cdk.app.config.loading import parse_yaml
from trainium_cdk.cli._common import CliError
from trainium_cdk.errors import ConfigError

KEY = "instance_offerings"
_KEY_LINE = re.compile(rf"^{KEY}\s*:(?P<rest>.*)$")
_TRAILING_COMMENT = re.compile(r"^\s*(?:\{\}|null|~)?\s*(?P<comment>#.*)?$")
HEADER_COMMENT = "# AZ IDs that offer each instance type, per region: written by `trn azs --write` (AWS answer)."


def load_raw(text: str, path: str | Path) -> dict[str, Any]:
    raw = parse_yaml(text, path) or {}
    if not isinstance(raw, dict):
        raise ConfigError("config", str(path), "a YAML mapping of settings at the top level")
    return raw


def render_block(offerings: Mapping[str, Mapping[str, Sequence[str]]]) -> list[str]:
    """``instance_offerings:`` and the lines under it; each AZ list in flow style on one line."""
    plain = {str(t): {str(r): list(ids) for r, ids in regions.items()} for t, regions in offerings.items()}
    body = yaml.safe_dump(plain, default_flow_style=None, sort_keys=False, indent=2, width=120)
    return [f"{KEY}:\n", *(f"  {line}\n" for line in body.splitlines())]


def _block_span(lines: list[str]) -> tuple[int, int] | None:
    starts = [i for i, line in enumerate(lines) if _KEY_LINE.match(line.rstrip("\r\n"))]
    if len(starts) > 1:
        raise CliError(f"the config names `{KEY}:` {len(starts)} times at the top level: keep one and run again")
    if not starts:
        return None
    start = end = starts[0]
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.strip() and not line[0].isspace():
            break  # the next top-level key, a column-0 comment or a document marker
        if line.strip():
            end = i
    return start, end + 1


def with_offerings(text: str, *, instance_type: str, region: str, az_ids: Sequence[str], path: str | Path) -> str:
    """``text`` with ``instance_offerings[instance_type][region] = az_ids`` and nothing else changed."""
    raw = load_raw(text, path)
    offerings = copy.deepcopy(raw.get(KEY) or {})
    if not isinstance(offerings, dict) or not all(isinstance(v, dict) for v in offerings.values()):
        raise ConfigError(KEY, offerings, "a mapping of instance type -> region -> list of AZ IDs")
    offerings.setdefault(instance_type, {})[region] = list(az_ids)

    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    block = render_block(offerings)
    span = _block_span(lines)
    if span is None:
        spacer = ["\n"] if lines and lines[-1].strip() else []
        new_lines = [*lines, *spacer, HEADER_COMMENT + "\n", *block]
    else:
        start, end = span
        key_line = _KEY_LINE.match(lines[start].rstrip("\r\n"))
        assert key_line is not None  # _block_span starts the span at the key's line
        kept = _TRAILING_COMMENT.match(key_line.group("rest"))
        if kept and kept.group("comment"):
            block[0] = f"{KEY}:  {kept.group('comment')}\n"
        new_lines = [*lines[:start], *block, *lines[end:]]
    new_text = "".join(new_lines)

    expected = dict(raw)
    expected[KEY] = offerings
    try:
        reparsed = parse_yaml(new_text, path)
    except ConfigError:
        reparsed = None
    if reparsed != expected:
        raise CliError(
            f"could not edit {path} safely (unusual layout of `{KEY}`): add this by hand: "
            + " ".join(line.strip() for line in block)
        )
    return new_text


def diff(old: str, new: str, path: str | Path) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=f"{path}", tofile=f"{path} (new)"
        )
    )


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` in one step, keeping its permissions: a crash never leaves half a config."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
