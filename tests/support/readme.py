"""The shell commands of the README and of every page of the documentation site (docs/, in the order of
mkdocs.yml's nav), as a user would type them: fenced ``sh``/``bash`` blocks split into commands.

A session may go on from one page to the next (the EKS walkthrough starts on the walkthroughs' first page,
which writes the job every walkthrough runs): its blocks run in the site's order, the README first.

Markers (HTML comments, invisible on GitHub) on the lines right before a block's opening fence:

- ``<!-- session: NAME -->``: the block runs in the session NAME, after the session's earlier blocks, in
  the same shell (variables, functions, the working directory) and against the same stand-ins (the AWS
  state, the cluster). A walkthrough is one session. A block without a marker runs in a session of its
  own. ``session: A,B`` (a file block shared by walkthroughs): the block runs in each of them.
- ``<!-- on: HOST -->``: the block is typed on a remote host the session opened (``head-node`` after
  ``aws ssm start-session`` to the Slurm head node, ``dev-instance`` on the development instance).
- ``<!-- file: NAME -->`` on a block of another language (with a session): a file the reader writes, such
  as their ``app.py``; the session writes it, byte for byte, as NAME (a relative path, its folders made) in
  its current directory.

A command is what bash reads as one: backslash continuations, heredocs and multi-line compound commands
stay together (bash itself decides, with ``bash -n``). Blank and comment-only lines between commands
are dropped; the command text is kept exactly as the README prints it.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support import paths

ROOT = paths.ROOT
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"
SHELLS = ("sh", "bash")
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[A-Za-z0-9_+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<key>session|on|file):\s*(?P<value>[a-z0-9][a-z0-9._/,-]*)\s*-->\s*$")
# Ends the heredoc that writes a file block (a line the README never holds).
FILE_END = "TRAINIUM_CDK_README_FILE_END"


@dataclass(frozen=True)
class Command:
    line: int  # 1-based line of the page where the command starts
    text: str
    page: str = "README.md"  # the page, relative to the repository

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class Block:
    line: int  # the opening fence's line
    lang: str
    page: str = "README.md"
    session: str | None = None
    host: str | None = None
    file: str | None = None  # a file block: the name it is written to
    commands: list[Command] = field(default_factory=list)


def _complete(text: str) -> bool:
    """Whether bash parses ``text`` as whole commands (an open quote, heredoc, brace or continuation is not)."""
    if text.rstrip().endswith("\\"):
        return False
    done = subprocess.run(["bash", "-n"], input=text + "\n", capture_output=True, text=True, check=False)
    if done.returncode == 0:
        # bash accepts an unterminated heredoc with a warning: it is not complete either.
        return "here-document" not in done.stderr
    return False


def split_commands(body: list[str], first_line: int, page: str = "README.md") -> list[Command]:
    """The commands of a block's lines (``first_line``: the page's line of ``body[0]``)."""
    commands: list[Command] = []
    pending: list[str] = []
    start = first_line
    for offset, line in enumerate(body):
        if not pending:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            start = first_line + offset
        pending.append(line)
        text = "\n".join(pending)
        if _complete(text):
            commands.append(Command(start, text, page))
            pending = []
    if pending:
        # Not shell as written (a `<placeholder>`, an open quote): kept, so that running it fails and says so.
        commands.append(Command(start, "\n".join(pending), page))
    return commands


def blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every fenced sh/bash block of ``text`` (the README or a page), with its markers and commands."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening or not opening.group("lang"):
            i += 1
            continue
        indent = opening.group("indent")
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip() == "```" and lines[j].startswith(indent)), None
        )
        if end is None:
            raise ValueError(f"{page}:{i + 1}: a fenced block that never closes")
        lang = opening.group("lang")
        block = Block(line=i + 1, lang=lang, page=page)
        j = i - 1
        while j >= 0 and (marker := _MARKER.match(lines[j])):
            key = marker.group("key")
            setattr(block, {"session": "session", "on": "host", "file": "file"}[key], marker.group("value"))
            j -= 1
        body = [line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1:end]]
        if lang in SHELLS:
            block.commands = split_commands(body, i + 2, page)
            found.append(block)
        elif block.file is not None:
            if block.session is None:
                raise ValueError(f"{page}:{i + 1}: a file block (`file: {block.file}`) outside a session")
            block.commands = [Command(i + 2, write_file(block.file, "\n".join(body) + "\n"), page)]
            found.append(block)
        i = end + 1
    return found


def write_file(name: str, content: str) -> str:
    """The command that writes ``content`` to ``name`` as it is (a quoted heredoc expands nothing)."""
    assert FILE_END not in content
    assert ".." not in name.split("/") and not name.startswith("/"), f"a file block's name is a relative path: {name}"
    folder = f"mkdir -p {name.rsplit('/', 1)[0]} && " if "/" in name else ""
    return f"{folder}cat > {name} <<'{FILE_END}'\n{content}{FILE_END}"


def sessions(text: str, page: str = "README.md") -> dict[str, list[Block]]:
    """Blocks grouped by session, in the page's order; an unmarked block is a session of its own (``line-N``
    in the README, ``<page>-line-N`` in a page of the site)."""
    grouped: dict[str, list[Block]] = {}
    for block in blocks(text, page):
        own = f"line-{block.line}" if page == "README.md" else f"{page.removeprefix('docs/')}-line-{block.line}"
        for name in (block.session or own).split(","):
            grouped.setdefault(name, []).append(block)
    return grouped


class _NavLoader(yaml.SafeLoader):
    """mkdocs.yml as data: its ``!!python/name:`` tags (Markdown extensions' functions) are read as None."""


_NavLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def _nav_files(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [] if nav.startswith(("http://", "https://")) else [nav]
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    return []


def pages() -> list[Path]:
    """The README, then every page of the site: in mkdocs.yml's nav order, then any page the nav leaves out."""
    listed = [DOCS / name for name in _nav_files(yaml.load(MKDOCS.read_text(), Loader=_NavLoader)["nav"])]
    rest = sorted(set(DOCS.rglob("*.md")) - set(listed))
    return [README, *listed, *rest]


def site_sessions() -> dict[str, list[Block]]:
    """Every session of the README and the site, its blocks in the site's order."""
    grouped: dict[str, list[Block]] = {}
    for path in pages():
        for name, found in sessions(path.read_text(), str(path.relative_to(ROOT))).items():
            grouped.setdefault(name, []).extend(found)
    return grouped


def site_blocks() -> list[Block]:
    """Every block of the README and the site, in the site's order."""
    return [b for path in pages() for b in blocks(path.read_text(), str(path.relative_to(ROOT)))]


_PLACEHOLDER = re.compile(r"<[a-z][^<>\n]*>")


def has_placeholder(text: str) -> bool:
    """Whether a command holds a `<something to fill in>` (outside quotes and heredoc redirections)."""
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "", text)
    unquoted = re.sub(r"(^|\s)#.*$", "", unquoted, flags=re.M)  # a comment is read, not run
    return bool(_PLACEHOLDER.search(unquoted.replace("<<", "")))


def page(name: str) -> str:
    """The text of a page of the site (``name`` relative to docs/, as mkdocs.yml's nav names it)."""
    return (DOCS / name).read_text()


def site_text() -> str:
    """The README and every page of the site, one text (what a check of "everything the docs show" reads)."""
    return "\n".join(path.read_text() for path in pages())
