"""The import rules between msprlab's packages, read from the source with `ast`.

- `msprlab.engine` imports nothing else of msprlab: it is pure computation.
- `msprlab.datasets` does not import `msprlab.experiments` or `msprlab.reports`.
- No two modules import each other, directly or round a longer circle, counting imports
  inside functions and under TYPE_CHECKING too (a lazy import hides a circle, it does not
  break it).
- `experiments/` holds at most 15 modules at its top level: new code goes into a
  sub-package named for its concern (`measures/`, `stages/`, `cli/`, ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"engine": "msprlab.engine", "experiments": "msprlab.experiments",
            "datasets": "msprlab.datasets", "reports": "msprlab.reports"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts))
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The msprlab modules `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from . import pipeline` names a module; `from .x import f` names x
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in MODULES and t != name}
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_the_source_tree_is_found() -> None:
    assert "msprlab.engine.batch" in GRAPH and "msprlab.experiments.cli.experiment" in GRAPH
    assert "msprlab.experiments.stages.prepare" in GRAPH["msprlab.experiments.cli.experiment"]


@pytest.mark.parametrize(("package", "forbidden"), [
    ("msprlab.engine", ("msprlab.experiments", "msprlab.datasets", "msprlab.reports")),
    ("msprlab.datasets", ("msprlab.experiments", "msprlab.reports")),
])
def test_layers_import_downward_only(package: str, forbidden: tuple[str, ...]) -> None:
    bad = sorted(f"{m} imports {t}" for m, targets in GRAPH.items() if m.startswith(package)
                 for t in targets if t.startswith(forbidden))
    assert not bad, bad


def test_no_import_circles() -> None:
    # Tarjan's strongly connected components: any component of two or more is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, circles


def test_experiments_top_level_stays_small() -> None:
    top = sorted(p.stem for p in (ROOT / "experiments").glob("*.py") if p.stem != "__init__")
    assert len(top) <= 15, f"{len(top)} modules at experiments/'s top level: {top}"
