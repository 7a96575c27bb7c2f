"""The package's import graph has no circle, and the package root stays a front door.

The graph is static: every ``import`` of a trainium_cdk module in every module of the package, at any depth
(an import inside a function is still a dependency), and ``if TYPE_CHECKING:`` imports across packages (a
layer that names a type of a layer above it depends on it: issue 35's circle, backends -> examples -> config
-> backends, went through one). A type-only import between two plain modules (not packages) of one package is not an edge: the checks
of ``app/config/validation.py`` take the ``Config`` of ``models.py`` that runs them, one unit in two files.
``from trainium_cdk.x import y`` is an edge to ``trainium_cdk.x.y`` when that is a module, else to
``trainium_cdk.x``; a package that a module is inside is not an edge (Python loads it first, and a package's
``__init__`` that imports its own modules would otherwise make every one of them a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import trainium_cdk

PACKAGE = Path(trainium_cdk.__file__).resolve().parent
# The most Python modules the package root may hold (issue 35: "at most 8 modules at the package root").
ROOT_MODULES = 8


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__.py``). The recipes'
    own programs (train.py, prepare.py...) run in their images, not in the package: only their __init__."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[1:2] == ["recipes"] and len(parts) > 3:
            continue
        found[".".join(parts)] = path
    return found


def _walk(tree: ast.AST) -> list[tuple[ast.AST, bool]]:
    """Every node of ``tree``, each with whether it is under ``if TYPE_CHECKING:``."""
    found, pending = [], [(tree, False)]
    while pending:
        node, type_only = pending.pop()
        found.append((node, type_only))
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            pending.extend((child, True) for child in node.body)
            pending.extend((child, type_only) for child in node.orelse)
            continue
        pending.extend((child, type_only) for child in ast.iter_child_nodes(node))
    return found


def imports(path: Path, known: dict[str, Path]) -> set[tuple[str, bool]]:
    """The package's modules that ``path`` imports, each with whether only under TYPE_CHECKING."""
    edges: set[tuple[str, bool]] = set()
    for node, type_only in _walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `import a.b.c` of an attribute path: its module
                name = name.rpartition(".")[0]
            if name:
                edges.add((name, type_only))
    return edges


def _siblings(one: str, other: str, known: dict[str, Path]) -> bool:
    """Two plain modules (files, not packages) of the same package."""
    plain = all(known[m].name != "__init__.py" for m in (one, other))
    return plain and one.rpartition(".")[0] == other.rpartition(".")[0]


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    return {
        name: {target for target, type_only in imports(path, known)
               if target != name and not (type_only and _siblings(name, target, known))}
        for name, path in known.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_two_modules_import_each_other_through_any_path():
    found = cycles(graph())
    assert not found, "import circles (break each: move the shared part down, or pass it in):\n" + "\n".join(
        " <-> ".join(component) for component in found
    )


def test_the_walk_finds_a_circle_through_type_checking_and_function_imports(tmp_path):
    package = tmp_path / "trainium_cdk"
    (package / "app").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "app" / "__init__.py").write_text("")
    (package / "app" / "backends.py").write_text("def f():\n    from trainium_cdk.examples import g\n")
    (package / "examples.py").write_text("if TYPE_CHECKING:\n    from trainium_cdk.app import config\n")
    (package / "app" / "config.py").write_text("from trainium_cdk.app import backends as registry\n")
    (package / "app" / "alone.py").write_text("from trainium_cdk.app import config\nimport trainium_cdk.examples\n")
    # a sibling's type-only back-reference is not a circle: models runs validation's checks on itself
    (package / "app" / "models.py").write_text("from trainium_cdk.app.validation import check\n")
    (package / "app" / "validation.py").write_text("if TYPE_CHECKING:\n    from trainium_cdk.app.models import M\n")
    assert cycles(graph(package)) == [["trainium_cdk.app.backends", "trainium_cdk.app.config", "trainium_cdk.examples"]]


def test_the_package_root_holds_at_most_a_few_modules():
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES, f"{len(root)} modules at trainium_cdk/: {root}; give each a package of its parts"
