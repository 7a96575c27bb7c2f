"""A user's environment for the built wheel, offline: the wheel and exactly the distributions its requirements
pull in (their closure, with extras and markers), linked from this environment.

Nothing else of .venv is visible, so a dependency the wheel does not declare is missing here as it would be
after a real `pip install` (and, say, the bundled Node is there only if the wheel asks for it).
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


def build_wheel(source: Path, into: Path) -> Path:
    """The wheel of the checkout at ``source`` (built with this environment's setuptools: no network)."""
    subprocess.run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(into), str(source)], check=True,
                   capture_output=True)
    (wheel,) = into.glob("trainium_cdk-*.whl")
    return wheel


def requirements_of(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(archive.read(name).decode())
    return meta.get_all("Requires-Dist") or []


def closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` pull in; each must satisfy the version its requirer asks."""
    found: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [(text, "") for text in requirements]  # (requirement, the extra of its requirer that asks for it)
    while todo:
        text, extra = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        dist = found.setdefault(name, metadata.distribution(req.name))
        assert req.specifier.contains(dist.version, prereleases=True), f"{text}: installed {dist.version}"
        for wanted in ("", *sorted(req.extras)):
            if (name, wanted) not in done:
                done.add((name, wanted))
                todo.extend((child, wanted) for child in dist.requires or [])
    return list(found.values())


def dependency_view(requirements: list[str], into: Path) -> Path:
    """A folder of links to the top-level files (packages, modules, metadata) of each distribution of the closure."""
    into.mkdir(parents=True)
    for dist in closure(requirements):
        base = Path(str(dist.locate_file("")))
        assert dist.files, f"{dist.metadata['Name']}: installed without a RECORD of its files"
        for top in {Path(f).parts[0] for f in dist.files if not str(f).startswith("..")} - {"__pycache__"}:
            link = into / top
            if (base / top).exists() and not link.is_symlink():
                link.symlink_to(base / top)
    return into


def add_to_venv(python: str, *folders: Path) -> None:
    """Put ``folders`` on the sys.path of the venv of ``python`` (a .pth file in its site-packages)."""
    code = "import pathlib, sys, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'wheel-env.pth')" \
           ".write_text(''.join(f + chr(10) for f in sys.argv[1:]))"
    subprocess.run([python, "-c", code, *map(str, folders)], check=True)


def user_venv(wheel: Path, into: Path) -> Path:
    """A venv as `pip install WHEEL` leaves it: the wheel, and its dependency closure. Returns the venv's bin."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(into)], check=True)
    installed = into / "wheel"
    subprocess.run([*PIP, "install", "--no-deps", "--target", str(installed), str(wheel)], check=True)
    add_to_venv(str(into / "bin" / "python3"), installed, dependency_view(requirements_of(wheel), into / "deps"))
    return into / "bin"
