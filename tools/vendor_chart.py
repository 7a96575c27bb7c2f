"""`make vendor-chart`: copy a Helm chart's folder from a git checkout into trainium_cdk/helm_charts/NAME/.

    python tools/vendor_chart.py NAME GIT_DIR REF CHART_PATH [DEST]

reads the files of CHART_PATH at REF from the git objects (a bare mirror will do; no work tree, no .gitattributes
filter or line-ending conversion), replaces the folder (or DEST) with them and prints what goes in versions.py and in
trainium_cdk/helm_charts/README.md. Symbolic links are resolved inside the repository at the same commit and written
as the files they point to, as `helm package` does (Karpenter's crds/ link to pkg/apis/crds/, Volcano's crd/v1 to
crd/bases): a wheel carries no links, and the published chart has the files.
"""

from __future__ import annotations

import posixpath
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainium_cdk.constructs.vendored_charts import CHARTS_DIR, tree_digest  # noqa: E402

LINK, MAX_LINKS = "120000", 8


def _git(git_dir: str, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True).stdout


def _entries(git_dir: str, commit: str, path: str) -> list[tuple[str, str, str, str]]:
    """(mode, type, object, path) of ``path`` itself (not recursive)."""
    found = []
    for entry in (e for e in _git(git_dir, "ls-tree", "-z", commit, "--", path).decode().split("\0") if e):
        meta, name = entry.split("\t", 1)
        mode, kind, obj = meta.split(" ")
        found.append((mode, kind, obj, name))
    return found


def _resolve(git_dir: str, commit: str, path: str, depth: int = 0) -> tuple[str, str, str]:
    """(type, object, path) of what ``path`` is at ``commit``, following links."""
    if depth > MAX_LINKS:
        raise SystemExit(f"{path}: more than {MAX_LINKS} links in a row")
    found = _entries(git_dir, commit, path)
    if not found:
        raise SystemExit(f"{path} is not in {commit}")
    mode, kind, obj, _ = found[0]
    if mode != LINK:
        return kind, obj, path
    target = _git(git_dir, "cat-file", "blob", obj).decode()
    return _resolve(git_dir, commit, posixpath.normpath(posixpath.join(posixpath.dirname(path), target)), depth + 1)


def _files(git_dir: str, commit: str, path: str, depth: int = 0) -> dict[str, bytes]:
    """Every file under ``path`` at ``commit``, by path relative to ``path``, links resolved."""
    out = _git(git_dir, "ls-tree", "-r", "-z", commit, "--", path.rstrip("/") + "/").decode()
    files: dict[str, bytes] = {}
    for entry in (e for e in out.split("\0") if e):
        meta, name = entry.split("\t", 1)
        mode, kind, obj = meta.split(" ")
        relative = posixpath.relpath(name, path)
        if kind == "commit":
            raise SystemExit(f"{name}: a submodule; vendor its chart from its own repository")
        if mode == LINK:
            kind, obj, real = _resolve(git_dir, commit, name, depth)
            if kind == "tree":
                inner = _files(git_dir, commit, real, depth + 1)
                files.update({posixpath.join(relative, k): v for k, v in inner.items()})
                continue
        files[relative] = _git(git_dir, "cat-file", "blob", obj)
    return files


def main(name: str, git_dir: str, ref: str, chart_path: str, dest: str = "") -> None:
    commit = _git(git_dir, "rev-parse", "--verify", f"{ref}^{{commit}}").decode().strip()
    files = _files(git_dir, commit, chart_path.strip("/"))
    if "Chart.yaml" not in files:
        raise SystemExit(f"{chart_path} at {ref} has no Chart.yaml")
    folder = Path(dest).resolve() if dest else CHARTS_DIR / name
    shutil.rmtree(folder, ignore_errors=True)
    for relative, data in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(data)
    chart = {k.strip(): v.strip().strip("\"'") for k, _, v in
             (line.partition(":") for line in files["Chart.yaml"].decode().splitlines() if not line.startswith((" ", "-")))}
    print(f"{folder}: {len(files)} files, Chart.yaml {chart.get('name')} "
          f"{chart.get('version')}, from {ref} = commit {commit}, {chart_path}")
    print(f'versions.HELM_CHART_DIGESTS["{name}"] = "{tree_digest(folder)}"')


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
