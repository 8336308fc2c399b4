"""The package's import graph, read from the source (``ast``, nothing imported): no import cycles
within ``lantern_demo``; ``train/`` and ``bench/`` independent of each other and imported by no
other module; ``emoji/`` (what both share) importing neither, nor the pipeline or the UI, and
imported only by them. Every import counts, function-local ones included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lantern_demo"

#: Layers that must not import each other: (importer prefix, imported prefix).
FORBIDDEN = (
    ("lantern_demo.bench", "lantern_demo.train"),
    ("lantern_demo.train", "lantern_demo.bench"),
    ("lantern_demo.emoji", "lantern_demo.train"),
    ("lantern_demo.emoji", "lantern_demo.bench"),
    ("lantern_demo.emoji", "lantern_demo.pipeline"),
    ("lantern_demo.emoji", "lantern_demo.ui"),
)
#: The top layers, which no other module imports, and the layer that only they import.
TOP = ("lantern_demo.train", "lantern_demo.bench")
SHARED_BY_TOP = "lantern_demo.emoji"



def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The ``lantern_demo`` modules that ``path`` (module ``name``) imports anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # ``from X import y``: y is a module when X.y is one, else a name defined in X
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known)
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {n: imports_of(n, p, set(mods)) for n, p in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def in_layer(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_graph_is_read():
    g = graph()
    assert "lantern_demo.emoji.data" in g["lantern_demo.train.retrain"]
    assert "lantern_demo.engine" in g["lantern_demo.pipeline"]


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_train_and_bench_do_not_import_each_other():
    g = graph()
    bad = sorted((a, b) for a, targets in g.items() for b in targets
                 if any(in_layer(a, x) and in_layer(b, y) for x, y in FORBIDDEN))
    assert bad == []


def test_only_the_top_layers_import_train_bench_and_emoji():
    g = graph()
    top = [*TOP, SHARED_BY_TOP]
    bad = sorted((a, b) for a, targets in g.items() for b in targets
                 if not any(in_layer(a, t) for t in top)
                 and any(in_layer(b, t) for t in top))
    assert bad == []

