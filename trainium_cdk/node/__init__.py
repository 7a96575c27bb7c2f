"""What runs on nodes and in pods, as the files it is: shell and Python programs an editor, shellcheck and
the tests see as what they are, read here at synth time and shipped unchanged.

A program takes what varies by deployment as arguments or environment variables. Where a value must be
in the text itself (a container's ``sh -c`` program, an instance's user data), :func:`program` puts a
marked header of ``NAME=value`` lines before the files, which follow byte for byte (a file's own ``#!``
line is then a comment).
"""

from __future__ import annotations

import base64
import gzip
import shlex
from collections.abc import Mapping, Sequence
from importlib.resources import files
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
HEADER = "# trainium-cdk: set at synth time; the program follows as it is in trainium_cdk/node/"
MIME_BOUNDARY = "==TRAINIUM_CDK=="


def source(name: str) -> str:
    """The text of one file of this folder."""
    return files(__package__).joinpath(name).read_text()


def packed(name: str) -> str:
    """One file of this folder, gzip then base64: one line a shell program writes out or pipes to its interpreter
    (``echo ... | base64 -d | gunzip | python3 - ARGS``)."""
    return base64.b64encode(gzip.compress(source(name).encode(), mtime=0)).decode()


def header(values: Mapping[str, object]) -> str:
    """The marked ``NAME=value`` lines (values shell-quoted; they may be CDK tokens), or nothing."""
    if not values:
        return ""
    return "\n".join([HEADER, *(f"{name}={shlex.quote(str(value))}" for name, value in values.items())]) + "\n"


def program(names: str | Sequence[str], values: Mapping[str, object] | None = None, *, shebang: str | None = None) -> str:
    """The files ``names`` in order after :func:`header` of ``values`` and, first, ``#!<shebang>``
    when given (user data must start with it)."""
    names = [names] if isinstance(names, str) else list(names)
    start = f"#!{shebang}\n" if shebang else ""
    return start + header(values or {}) + "".join(source(name) for name in names)


def heredoc_end(base: str, body: str) -> str:
    """The delimiter of a quoted here-document that carries ``body``: ``base``, or ``base_<n>`` when a line of
    ``body`` is that word. The shell ends a here-document at the first line equal to its delimiter, whatever
    quoting that line is inside (POSIX, Shell Command Language 2.7.4), and a user's command word may hold
    newlines: ``'x<newline>TRAINIUM_SLURM<newline>touch /f'`` ended it early and ran the rest as root."""
    lines = set(body.split("\n"))
    end, n = base, 1
    while end in lines:
        end, n = f"{base}_{n}", n + 1
    return end


def multipart(script: str, parts: Sequence[tuple[str, str]] = ()) -> str:
    """``script`` as a shell part of MIME multi-part user data: the form AWS Batch, EKS managed node groups
    and Karpenter (AL2023) take, since each merges a part of its own (ECS agent configuration, nodeadm's
    NodeConfig) into it. ``parts`` are (content type, body) parts that go before it, such as a nodeadm
    NodeConfig (``application/node.eks.aws``)."""
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"', ""]
    for content_type, body in [*parts, ('text/x-shellscript; charset="us-ascii"', script)]:
        lines += [f"--{MIME_BOUNDARY}", f"Content-Type: {content_type}", "", body.rstrip("\n"), ""]
    return "\n".join([*lines, f"--{MIME_BOUNDARY}--", ""])
