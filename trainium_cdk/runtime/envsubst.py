"""Deploy-time placeholders of the dist/ files, and the one safe way to fill them.

A dist/ file leaves what is known only after deploy (a file system id, the training image) as
``${NAME}``. `envsubst` with no argument replaces *every* ``$NAME`` and ``${NAME}`` of its input: in a
job manifest that includes the launcher script's own variables (``[ -n "$MASTER_ADDR" ]`` becomes
``[ -n "" ]`` and the pod exits 2). Given a SHELL-FORMAT argument, envsubst replaces only the variables
that argument names (GNU gettext manual, "Invoking the envsubst program": "If a shell-format is given,
only those environment variables that are referenced in shell-format are substituted"). Every dist/ file
with placeholders therefore carries, in a header comment, the command with its own list.

No CDK, no config here: the charts, dist.py and the ParallelCluster renderers all import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# The only form a placeholder takes: braces, an upper-case name. Script variables in the same files use
# other names (a test checks that no placeholder name is also a script variable).
NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
# Debian and Ubuntu ship envsubst in gettext-base (/usr/bin/envsubst); macOS in Homebrew's gettext.
PACKAGE = "gettext-base"


def placeholder(name: str) -> str:
    """``${NAME}``: a value known only after deploy."""
    if not NAME.fullmatch(name):
        raise ValueError(f"placeholder name {name!r}: upper-case letters, digits and _")
    return "${" + name + "}"


def placeholders_in(text: str, names: Iterable[str]) -> list[str]:
    """The ``names`` (in their order) whose placeholder occurs in ``text``."""
    return [name for name in names if placeholder(name) in text]


def shell_format(names: Sequence[str]) -> str:
    """envsubst's SHELL-FORMAT argument for ``names``, quoted for the shell: ``'$A $B'``."""
    if not names:
        raise ValueError("no placeholders: the file needs no envsubst")
    for name in names:
        placeholder(name)  # checks the name
    return "'" + " ".join("$" + name for name in names) + "'"


def command(names: Sequence[str], source: str, sink: str) -> str:
    """``envsubst '$A $B' < source <sink>``: ``sink`` is ``| kubectl apply -f -`` or ``> out.yaml``."""
    return f"envsubst {shell_format(names)} < {source} {sink}"


def header(names: Sequence[str], source: str, sink: str, *, sources: dict[str, str] | None = None) -> list[str]:
    """Comment lines naming the placeholders of a file and the command that fills exactly those.

    ``sources`` maps a name to where its value comes from (a stack output), printed beside it."""
    lines = [
        "# Deploy-time placeholders: " + " ".join(placeholder(n) for n in names) + ".",
        "# Fill exactly these (a bare envsubst would also empty the variables of the scripts inside):",
        f"#   {command(names, source, sink)}",
    ]
    for name in names:
        if sources and name in sources:
            lines.append(f"#   {name}: {sources[name]}")
    return lines
